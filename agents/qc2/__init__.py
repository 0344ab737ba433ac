"""QC2: quality-conditioned query completion for quality-controllable image retrieval.

A small causal language model, fine-tuned on a gallery's own captions prefixed with discretised
quality levels ("Relevance: High, Aesthetic: Low, Query: ..."), turns a short query such as
"a dog" into a descriptive one that steers retrieval toward the requested quality.

- :mod:`~pictrieve.agents.qc2.levels`: percentile discretisation of scores into levels;
- :mod:`~pictrieve.agents.qc2.training`: prompt format, loss mask, training, saving/loading;
- :mod:`~pictrieve.agents.qc2.completion`: sampling completions for a query and levels;
- :mod:`~pictrieve.agents.qc2.annotation`: captions and scores stored as gallery metadata.
"""
