"""The Vision Search Assistant: answer a question about a photo from its regions and a page search.

- :mod:`.state`: its run settings, input and output schemas, the state its nodes share;
- :mod:`.nodes`: its nodes (retrieve, regions, describe, plan, search, summarize, answer), each a
  top-level function testable alone, and :mod:`.parts`: the models and backends they use;
- :mod:`.steps` (the LLM steps: planning, searching, answering; prompts in ``prompts/vsa/``),
  :mod:`.extractive` (the offline answerer), :mod:`.pages` (reading search results);
- :mod:`.progress`: one line per streamed update, for the command line and the web page;
- :mod:`pictrieve.graphs.vsa`: the wiring of the nodes into a ``StateGraph``;
- ``METHOD`` (below): how the registry, the command line, the web page and the server find it.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="vsa",
    description="Vision Search Assistant: answer a question about a photo from its regions and a web or local search, with numbered sources.",
    builder="pictrieve.graphs.vsa:build_vsa_graph",
    settings="pictrieve.agents.vsa.state:VisionSearchSettings",
    input_schema="pictrieve.agents.vsa.state:VisionSearchInput",
    output_schema="pictrieve.agents.vsa.state:VisionSearchOutput",
    needs=("llm", "vlm", "detector", "search"),
    gallery="optional",
    example_input={"question": "What breed is this dog and how big does it grow?", "image": "photo.jpg"},
)
