"""The models and backends the Vision Search Assistant's nodes use, made from names or objects.

:func:`make_parts` turns the builder's arguments (``llm``, ``vlm``, ``detector``, ``search``: names such
as ``offline``, ``ssd``, ``local:DIR``, or objects) into a :class:`VisionSearchParts`. Building a graph
loads no model: the detector, the region describer and the search backend are functions of no argument
that make the part on their first call, from the node that uses it (a served graph is built for every
run; a search name is still checked at once, so ``--search bogus`` fails before any model loads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def made_once(make: Callable[[], T]) -> Callable[[], T]:
    """A function of no argument returning what ``make()`` returns, made on the first call only (under a
    lock: the parallel searchers share the backend, and a model is loaded once)."""
    lock = threading.Lock()
    made: list[T] = []

    def get() -> T:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return get


def shared_part(key: tuple[str, Any], make: Callable[[], T]) -> T:
    """``make()`` for a part given by name, shared by every graph of the process (the model cache); an
    object given by the caller is the caller's and is used as it is."""
    from pictrieve.tools.core.model_cache import shared_model

    return shared_model(key, make) if isinstance(key[1], str) else make()


@dataclass(frozen=True)
class VisionSearchParts:
    """What the nodes use: the chat model, and functions returning (made on first call) the region
    detector, the region describer and the page search (``backend`` is ``None`` for no search: the answer
    then comes from the photo alone)."""

    chat: Any
    detector: Callable[[], Any]
    vlm: Callable[[], Any]
    backend: Callable[[], Any] | None


def make_parts(*, llm: Any = None, vlm: Any = None, detector: Any = None, search: Any = None) -> VisionSearchParts:
    """The parts from names or objects (defaults: the offline chat model, the offline describer, SSD).

    ``llm``: a chat model or a name for :func:`~pictrieve.tools.models.chat_models.create_chat_model`.
    ``vlm``: a Captioner or a name for :func:`~pictrieve.tools.models.vlm.create_region_captioner`.
    ``detector``: a Detector or a registry name. ``search``: ``ddgs``, ``local:DIR``, a SearchBackend or
    a LangChain retriever/tool, or None.
    """
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.detectors import create_detector
    from pictrieve.tools.models.vlm import create_region_captioner
    from pictrieve.tools.web.search import as_search_backend, check_search_name

    if isinstance(search, str):
        check_search_name(search)  # now, not after the detector and the describer have loaded
    chat = create_chat_model(llm) if llm is None or isinstance(llm, str) else llm
    detector_name, vlm_name = detector or "ssd", vlm or "offline"
    return VisionSearchParts(
        chat=chat,
        # a named detector or describer is the process's shared one: a served graph is built for every
        # run, and loading them again on every run cost seconds before the first region was described
        detector=made_once(lambda: shared_part(("vsa-detector", detector_name), lambda: create_detector(detector_name))),
        vlm=made_once(lambda: shared_part(("vsa-describer", vlm_name), lambda: create_region_captioner(vlm_name))),
        backend=None if search is None else made_once(lambda: as_search_backend(search)),
    )
