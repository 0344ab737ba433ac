"""Deprecated: the offline questioner is split into :mod:`.offline_questions` (making and choosing
questions), :mod:`.offline_answers` (what an answer means) and :mod:`.offline_reranking` (how answers
re-score the ranking). This alias finds every old name in its new module for one release, warning.
"""

from pictrieve.agents.plugir import offline_answers, offline_questions, offline_reranking
from pictrieve.tools.core.deprecation import moved_module

__getattr__ = moved_module(__name__, "is split into offline_questions, offline_answers and offline_reranking "
                           "(pictrieve.agents.plugir)", offline_questions, offline_answers, offline_reranking)
