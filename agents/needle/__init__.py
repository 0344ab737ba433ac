"""NEEDLE (Nauman et al.): guide pictures from several visualizers, ranked by several embedders, fused with
trust weights learned from feedback.

- :mod:`.nodes`: its run settings, input and output schemas, and its nodes, each a top-level function
  testable alone;
- :mod:`.aggregation`, :mod:`.trust`, :mod:`.anomaly`, :mod:`.search`: the pure parts (rank aggregation,
  embedder trust, guide screening, the per-embedder rankings), each testable against hand-computed numbers;
- :mod:`pictrieve.graphs.needle`: the wiring of the nodes into a ``StateGraph``;
- ``METHOD`` (below): how the registry, the command line, the web page and the server find it.
"""

from pictrieve.agents.asks import Ask
from pictrieve.agents.method import Method

METHOD = Method(
    name="needle",
    description="NEEDLE: guide images from several visualizers, ranked by several embedders (and tiles), fused with trust weights learned from feedback.",
    builder="pictrieve.graphs.needle:build_needle_graph",
    settings="pictrieve.agents.needle.nodes:NeedleSettings",
    input_schema="pictrieve.agents.needle.nodes:NeedleInput",
    output_schema="pictrieve.agents.needle.nodes:NeedleOutput",
    needs=("llm", "visualizers", "checkpointer"),
    optional=("llm",),  # it rewrites the query with a chosen chat model; without one, visualizes it as written
    example_input={"query": "a kite over a beach", "topic": "outdoors"},
    # it asks only with the `feedback` setting (off by default): about the guides, then about the results
    asks=(Ask(kind="guides", question="pictrieve.agents.needle.nodes:GuidesQuestion",
              reply="pictrieve.agents.needle.nodes:GuidesReply", shows="guides"),
          Ask(kind="results", question="pictrieve.agents.needle.nodes:ResultsQuestion",
              reply="pictrieve.agents.needle.nodes:ResultsReply", shows="hits")),
)
