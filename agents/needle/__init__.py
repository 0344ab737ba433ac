"""NEEDLE's parts (Nauman et al.): rank aggregation, embedder trust, guide screening, guide images.

Each module is pure and small so that it can be tested against hand-computed numbers; the graph in
:mod:`pictrieve.graphs.needle` wires them together.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="needle",
    description="NEEDLE: guide images from several visualizers, ranked by several embedders (and tiles), fused with trust weights learned from feedback.",
    builder="pictrieve.graphs.needle:build_needle_graph",
    settings="pictrieve.graphs.needle:NeedleSettings",
    input_schema="pictrieve.graphs.needle:NeedleInput",
    output_schema="pictrieve.graphs.needle:NeedleOutput",
    needs=("llm", "visualizers", "checkpointer"),
    example_input={"query": "a kite over a beach", "topic": "outdoors"},
)
