"""A toy retrieval method, installed by a test fixture as a third-party plugin.

It shows what adding a method takes: a package with its parts and wiring (:mod:`.graph`), one
:class:`~pictrieve.agents.method.Method`, and one entry point (group ``pictrieve.methods``) naming it.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="toy",
    description="Toy: the gallery's text ranking, optionally reversed (a plugin installed by a test fixture).",
    builder="toy_pictrieve_method.graph:build_toy_graph",
    settings="toy_pictrieve_method.graph:ToySettings",
    input_schema="toy_pictrieve_method.graph:ToyInput",
    output_schema="toy_pictrieve_method.graph:ToyOutput",
    served="toy_pictrieve_method.graph:served_arguments",
    example_input={"query": "a red square"},
)
