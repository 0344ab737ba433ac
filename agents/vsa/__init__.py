"""The Vision Search Assistant's LLM-backed steps (regions, planning, searching, answering).

See :mod:`pictrieve.graphs.vision_search` for the graph that wires them.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="vsa",
    description="Vision Search Assistant: answer a question about a photo from its regions and a web or local search, with numbered sources.",
    builder="pictrieve.graphs.vision_search:build_vision_search_graph",
    settings="pictrieve.graphs.vision_search:VisionSearchSettings",
    input_schema="pictrieve.graphs.vision_search:VisionSearchInput",
    output_schema="pictrieve.graphs.vision_search:VisionSearchOutput",
    needs=("llm", "vlm", "detector", "search"),
    gallery="optional",
    example_input={"question": "What breed is this dog and how big does it grow?", "image": "photo.jpg"},
)
