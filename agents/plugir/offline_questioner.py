"""Deprecated: the offline questioner is split into :mod:`.offline_questions` (making and choosing
questions), :mod:`.offline_answers` (what an answer means) and :mod:`.offline_reranking` (how answers
re-score the ranking). This alias finds every old name in its new module for one release, warning.
"""

import warnings

from pictrieve.agents.plugir import offline_answers, offline_questions, offline_reranking

warnings.warn(
    "pictrieve.agents.plugir.offline_questioner is split into offline_questions, offline_answers and "
    "offline_reranking (pictrieve.agents.plugir); import from those (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    for module in (offline_questions, offline_answers, offline_reranking):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
