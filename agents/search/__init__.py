"""Plain search by text or example image: the smallest method, and the model every other one follows.

- :mod:`.nodes`: its run settings, input and output schemas, and its one node (``retrieve``), each a
  top-level function testable alone;
- :mod:`pictrieve.graphs.search`: the wiring of those nodes into a ``StateGraph``;
- ``METHOD`` (below): how the registry, the command line, the web page and the server find it.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="search",
    description="Plain search by text or example image (cosine similarity in the gallery's embedder space).",
    builder="pictrieve.graphs.search:build_search_graph",
    settings="pictrieve.agents.search.nodes:SearchSettings",
    input_schema="pictrieve.agents.search.nodes:SearchInput",
    output_schema="pictrieve.agents.search.nodes:SearchOutput",
    example_input={"query": "two dogs playing in the snow"},
    exact_ranking=True,
)
