"""A toy retrieval method that asks the person one question, installed by a test fixture as a third-party plugin.

Besides its steps it declares what it asks (:attr:`~pictrieve.agents.method.Method.asks`): the question it pauses
with and the reply it takes. Nothing else: every front end (the page's generic tab, MCP's start_method, the
command line) shows the question and reads the reply from that declaration.
"""

from pictrieve.agents.asks import Ask
from pictrieve.agents.method import Method

METHOD = Method(
    name="toy_ask",
    description="Toy that asks: the gallery's text ranking, then asks the order and which photos to drop "
                "(a plugin installed by a test fixture).",
    builder="toy_asking_method.graph:build_graph",
    settings="toy_asking_method.graph:AskSettings",
    input_schema="toy_asking_method.graph:AskInput",
    output_schema="toy_asking_method.graph:AskOutput",
    asks=(Ask(question="toy_asking_method.graph:OrderQuestion", reply="toy_asking_method.graph:OrderReply",
              shows="hits"),),
    example_input={"query": "a red square"},
)
