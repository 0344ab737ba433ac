"""QC2: quality-conditioned query completion for quality-controllable image retrieval.

A small causal language model, fine-tuned on a gallery's own captions prefixed with discretised
quality levels ("Relevance: High, Quality: Low, Query: ..."), turns a short query such as
"a dog" into a descriptive one that steers retrieval toward the requested quality.

- :mod:`~pictrieve.agents.qc2.levels`: percentile discretisation of scores into levels;
- :mod:`~pictrieve.agents.qc2.annotation`: captions, relevance and quality scores as gallery metadata;
- :mod:`~pictrieve.agents.qc2.prompt_format`: the level instruction, cleaned captions, encoded examples;
- :mod:`~pictrieve.agents.qc2.training`: CPU-sized training (LoRA, frozen-trunk cache through
  :mod:`~pictrieve.agents.qc2.decoder_internals`, restricted softmax);
- :mod:`~pictrieve.agents.qc2.bundle`: the trained model on disk, tied to its gallery's fingerprint;
- :mod:`~pictrieve.agents.qc2.completion`: sampling completions for a query and levels;
- :mod:`~pictrieve.agents.qc2.pipeline`: the whole thing on a gallery;
- :mod:`~pictrieve.agents.qc2.nodes`: the graph's run settings, schemas and nodes (``complete``,
  ``retrieve``), each node a top-level function testable alone;
- ``METHOD`` (below): how the registry, the command line, the web page and the server find it.

Python entry points::

    from pictrieve.agents.qc2.annotation import annotate_gallery
    from pictrieve.agents.qc2.pipeline import train_on_gallery
    from pictrieve.graphs.qc2 import quality_search
    from pictrieve.tools.models.quality_scorers import create_quality_scorer
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open("my.gallery")
    annotate_gallery(gallery, [create_quality_scorer("brisque")])
    train_on_gallery(gallery)                       # saved to my.gallery/qc2
    result = quality_search(gallery, "a dog", {"relevance": "high", "quality": "low"}, k=10)
    result.completions, result.hits

The LangGraph graph is :func:`pictrieve.graphs.qc2.build_qc2_graph`.
"""

from pictrieve.agents.method import Method

METHOD = Method(
    name="qc2",
    description="QC2 quality-controllable retrieval: completes a short query toward chosen relevance and quality levels.",
    builder="pictrieve.graphs.qc2:build_qc2_graph",
    settings="pictrieve.agents.qc2.nodes:QC2Settings",
    input_schema="pictrieve.agents.qc2.nodes:QC2Input",
    output_schema="pictrieve.agents.qc2.nodes:QC2Output",
    needs=("qc2_model",),
    example_input={"query": "a dog", "levels": {"relevance": "high", "quality": "high"}},
)
