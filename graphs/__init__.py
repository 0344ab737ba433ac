"""LangGraph builders: one graph per retrieval method, all of one shape.

The contract every method keeps is :mod:`pictrieve.agents.method` (so the CLI, the evaluation harness,
the web page and the LangGraph server treat them alike, and name none of them):

- **Method**: one :class:`~pictrieve.agents.method.Method` object per method, ``METHOD`` in its folder
  ``agents/<method>/`` (or a ``pictrieve.methods`` entry point of another package): ``name``,
  ``description``, ``builder``, ``settings``, ``input_schema``, ``output_schema``, ``needs``,
  ``gallery``, ``served``, ``example_input``, ``exact_ranking``, ``steps`` (each node as people watch it run);
  ``describe()`` gives it as JSON.
- **Builder**: ``build_<method>_graph(index, *, checkpointer=None, name="<method>", <need>=...)``
  returns a ``CompiledStateGraph``. ``index`` is the gallery searched; the rest is keyword-only, one
  argument per need (``llm``, ``visualizers``, ``qc2_model``, ...: :data:`~pictrieve.agents.method.NEEDS`),
  none that it ignores. No builder compiles a checkpointer it was not given: the LangGraph server brings
  its own, and a CLI or test passes one when it needs ``interrupt()`` to pause and resume.
- **Schemas**: the ``input_schema`` and ``output_schema`` the Method names are the ones on the graph;
  every output carries ``hits``; the state in between is the method's own.
- **Run settings**: a :class:`~pictrieve.agents.settings.RunSettings` dataclass as the graph's
  ``context_schema``, passed per run (``graph.invoke(inputs, context={"k": 5})``), validated, visible
  in LangGraph Studio; never kept in state.
- **Results**: lists of :class:`~pictrieve.vectorstore.hits.ImageHit`.

Modules here are the wiring of each method's nodes (``agents/<method>/``) into a ``StateGraph``:
one module per method, named as the method is (``graphs/<m>.py`` beside ``agents/<m>/`` and
``prompts/<m>/``): ``search`` (the reference method: plain search), ``plugir``, ``qc2``, ``visret``,
``needle`` and ``vsa``; and ``registry`` (finds the methods), ``serving`` (a factory per registered method for the server),
``checkpoints`` (checkpointers that know our state's types).
"""
