"""VisRet (visualize, then retrieve): search a gallery with pictures of the query instead of its text.

- :mod:`.nodes`: its run settings, input and output schemas, and its nodes (rewrite, visualize, retrieve,
  read), each a top-level function testable alone;
- :mod:`.reader`: visual RAG, a reader answering from the retrieved images and a judge grading answers;
- :mod:`pictrieve.graphs.visret`: the wiring of the nodes into a ``StateGraph``;
- ``METHOD`` (below): how the registry, the command line, the web page and the server find it.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="visret",
    description="VisRet: visualize the query as guide images, search image-to-image, fuse by reciprocal rank.",
    builder="pictrieve.graphs.visret:build_visret_graph",
    settings="pictrieve.agents.visret.nodes:VisRetSettings",
    input_schema="pictrieve.agents.visret.nodes:VisRetInput",
    output_schema="pictrieve.agents.visret.nodes:VisRetOutput",
    needs=("llm", "visualizers"),
    optional=("llm",),  # it rewrites the query with a chosen chat model; without one, visualizes it as written
    example_input={"query": "a dog catching a frisbee"},
)
