"""PlugIR (Lee et al., 2024): LLM agents for interactive text-to-image retrieval.

The pieces, each usable on its own and wired together by
:func:`pictrieve.graphs.interactive_retrieval.build_plugir_graph`:

- :mod:`.reformulator`: dialogue context -> one caption-style retrieval query (CR);
- :mod:`.retrieval_context`: Algorithm 1, distinctive captions of the top candidates (RCE);
- :mod:`.questioner`: candidate questions from the description, dialogue and candidates;
- :mod:`.question_filter`: Algorithm 2, drop answerable questions, keep the least disruptive (F);
- :mod:`.offline_questioner` and :mod:`.caption_terms`: questions without a language model, from what
  tells the candidates' captions apart, chosen by the expected information of their answer;
- :mod:`.simulated_user`: answers from a target's captions, for unattended evaluation (by an LLM,
  or by rules with no model: :class:`~.simulated_user.CaptionUser`).
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="plugir",
    description="PlugIR interactive retrieval: asks one question per round, pausing with interrupt() for the answer.",
    builder="pictrieve.graphs.interactive_retrieval:build_plugir_graph",
    settings="pictrieve.graphs.interactive_retrieval:PlugIRSettings",
    input_schema="pictrieve.graphs.interactive_retrieval:PlugIRInput",
    output_schema="pictrieve.graphs.interactive_retrieval:PlugIROutput",
    needs=("llm", "captioner", "checkpointer"),
    example_input={"description": "a dog running in the snow"},
)
