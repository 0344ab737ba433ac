"""The models and backends the Vision Search Assistant's nodes use, made from names or objects.

:func:`make_parts` turns the builder's arguments (``llm``, ``vlm``, ``detector``, ``search``: names such
as ``offline``, ``ssd``, ``local:DIR``, or objects) into a :class:`VisionSearchParts`. Building a graph
loads no model: the detector, the region describer and the search backend are :class:`LoadedOnFirstUse`
stand-ins that make the real part the first time a node uses it (a served graph is built for every
run; a search name is still checked at once, so ``--search bogus`` fails before any model loads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class LoadedOnFirstUse:
    """Stands in for the object ``make()`` returns, made (once, thread-safely: the parallel searchers
    share it) on the first attribute read; every attribute is the made object's."""

    def __init__(self, make: Callable[[], Any], what: str) -> None:
        self._make, self._what = make, what
        self._made: Any = None
        self._lock = threading.Lock()

    def loaded(self) -> Any:
        """The real object (made now if it was not yet)."""
        with self._lock:
            if self._make is not None:
                self._made, self._make = self._make(), None
            return self._made

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # our own fields, before __init__ set them (copy, pickle)
            raise AttributeError(name)
        return getattr(self.loaded(), name)

    def __repr__(self) -> str:
        state = "not loaded yet" if self._make is not None else repr(self._made)
        return f"<{self._what}: {state}>"


@dataclass(frozen=True)
class VisionSearchParts:
    """What the nodes use: the chat model, the region detector, the region describer and the page search
    (``None``: no search; the answer then comes from the photo alone)."""

    chat: Any
    detector: Any
    vlm: Any
    backend: Any


def make_parts(*, llm: Any = None, vlm: Any = None, detector: Any = None, search: Any = None) -> VisionSearchParts:
    """The parts from names or objects (defaults: the offline chat model, the offline describer, SSD).

    ``llm``: a chat model or a name for :func:`~pictrieve.tools.chat_models.create_chat_model`.
    ``vlm``: a Captioner or a name for :func:`~pictrieve.tools.vlm.create_region_captioner`.
    ``detector``: a Detector or a registry name. ``search``: ``ddgs``, ``local:DIR``, a SearchBackend or
    a LangChain retriever/tool, or None.
    """
    from pictrieve.tools.chat_models import create_chat_model
    from pictrieve.tools.detectors import create_detector
    from pictrieve.tools.vlm import create_region_captioner
    from pictrieve.tools.web_search import as_search_backend, check_search_name

    if isinstance(search, str):
        check_search_name(search)  # now, not after the detector and the describer have loaded
    chat = create_chat_model(llm) if llm is None or isinstance(llm, str) else llm
    return VisionSearchParts(
        chat=chat,
        detector=LoadedOnFirstUse(lambda: create_detector(detector or "ssd"), "detector"),
        vlm=LoadedOnFirstUse(lambda: create_region_captioner(vlm or "offline"), "region describer"),
        backend=None if search is None else LoadedOnFirstUse(lambda: as_search_backend(search), "page search"),
    )
