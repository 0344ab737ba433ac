"""LangGraph builders: one graph per retrieval method, all of one shape.

The contract every method follows (so the CLI, the evaluation harness, the web page and the LangGraph
server treat them alike):

- **Builder**: ``build_<method>_graph(index, *, llm=None, checkpointer=None, name="<method>", **extras)``
  returns a ``CompiledStateGraph``. ``index`` is the gallery searched; the rest is keyword-only. No
  builder compiles a checkpointer it was not given: the LangGraph server brings its own, and a CLI or
  test passes one explicitly when it needs ``interrupt()`` to pause and resume.
- **Schemas**: ``input_schema`` and ``output_schema`` declare what a caller sends and gets back; the
  state in between is the method's own.
- **Run settings**: a :class:`~pictrieve.graphs.settings.RunSettings` dataclass as the graph's
  ``context_schema``, passed per run (``graph.invoke(inputs, context={"k": 5})``), validated, visible
  in LangGraph Studio; never kept in state.
- **Results**: lists of :class:`~pictrieve.vectorstore.hits.ImageHit`.
- **Registry**: :mod:`pictrieve.graphs.registry` lists every method (name, builder, settings, what it
  needs); :mod:`pictrieve.graphs.serving` exposes each one to ``langgraph dev`` (``langgraph.json``).

Modules: ``registry`` and ``settings`` (the contract), ``serving`` (the server's factories), ``search``
(the reference method: plain search), ``interactive_retrieval`` (PlugIR), ``quality_retrieval`` (QC2),
and, as they land, ``visret``, ``needle`` and ``vision_search``.
"""
