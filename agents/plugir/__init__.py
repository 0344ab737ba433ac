"""PlugIR (Lee et al., 2024): LLM agents for interactive text-to-image retrieval.

The method, wired into a graph by :func:`pictrieve.graphs.plugir.build_plugir_graph`:

- :mod:`.settings`: the run settings (:class:`~.settings.PlugIRSettings`) and the paper's ablation arms;
- :mod:`.state`: the input, output and state schemas;
- :mod:`.nodes`: the graph's nodes and routing, each a top-level function testable alone;
- :mod:`.steps`: each node as people watch a round run (the page, MCP and ``pictrieve chat`` word it);
- :mod:`.candidates`: what the nodes read about the candidate images (stored vectors, captions, caption
  vectors), cached per compiled graph; :mod:`.replies`: a person's reply read into an answer or a pick;
- ``METHOD`` (below): how the registry, the command line, the web page and the server find it.

The pieces the nodes use, each usable on its own:

- :mod:`.reformulator`: dialogue context -> one caption-style retrieval query (CR);
- :mod:`.retrieval_context`: Algorithm 1, distinctive captions of the top candidates (RCE);
- :mod:`.questioner`: candidate questions from the description, dialogue and candidates;
- :mod:`.question_filter`: Algorithm 2, drop answerable questions, keep the least disruptive (F);
- :mod:`.questioners`: the LLM and the offline questioner as strategies, one picked per run;
- :mod:`.offline_questions`, :mod:`.offline_answers`, :mod:`.offline_reranking` and :mod:`.caption_terms`:
  questions without a language model, from what tells the candidates' captions apart, chosen by the
  expected information of their answer; what an answer means; how answers re-score the ranking;
- :mod:`.simulated_user`: answers from a target's captions, for unattended evaluation (by an LLM,
  or by rules with no model: :class:`~.simulated_user.CaptionUser`).
"""

from pictrieve.agents.asks import Ask
from pictrieve.agents.method import Method

METHOD = Method(
    name="plugir",
    description="PlugIR interactive retrieval: asks one question per round, pausing with interrupt() for the answer.",
    builder="pictrieve.graphs.plugir:build_plugir_graph",
    settings="pictrieve.agents.plugir.settings:PlugIRSettings",
    input_schema="pictrieve.agents.plugir.state:PlugIRInput",
    output_schema="pictrieve.agents.plugir.state:PlugIROutput",
    needs=("llm", "captioner", "checkpointer"),
    example_input={"description": "a dog running in the snow"},
    steps="pictrieve.agents.plugir.steps:STEPS",
    asks=(Ask(question="pictrieve.agents.plugir.state:PlugIRQuestion",
              reply="pictrieve.agents.plugir.state:PlugIRReply", shows="shown"),),
)
