"""Quiet model loading: per-tensor progress bars only when the user asked for detail.

transformers draws a ``Loading weights`` bar for every checkpoint it loads and a ``Converting and
de-quantizing GGUF tensors`` bar for every GGUF conversion. On a command line that is noise on
every run, so pictrieve wraps its model loads in :func:`quiet_model_loading`: inside the block the
bars are hidden unless the ``pictrieve`` logger is enabled for INFO (``pictrieve -v``). What is
worth one line (a first-time download or conversion) is logged by the caller instead.

The switch is scoped and counted, so nested or concurrent loads restore the previous state only
when the last one ends; nothing changes at import.
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

_lock = threading.Lock()
_depth = 0
_saved: dict[str, Any] = {}


def progress_wanted() -> bool:
    """Whether the user asked for detail: the ``pictrieve`` logger shows INFO messages."""
    return logging.getLogger("pictrieve").isEnabledFor(logging.INFO)


@contextmanager
def quiet_model_loading() -> Iterator[None]:
    """Hide transformers' loading and GGUF-conversion bars in the block (unless :func:`progress_wanted`)."""
    global _depth
    if progress_wanted():
        yield
        return
    with _lock:
        if _depth == 0:
            _silence()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore()


def _silence() -> None:
    try:
        import transformers.utils.logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        return
    _saved["bars"] = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:  # the GGUF reader uses tqdm directly, not transformers' switch
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - older or newer transformers
        return
    if hasattr(gguf_utils, "tqdm"):
        _saved["gguf_tqdm"] = gguf_utils.tqdm
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)


def _restore() -> None:
    import transformers.utils.logging as hf_logging

    if _saved.pop("bars", False):
        hf_logging.enable_progress_bar()
    if "gguf_tqdm" in _saved:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        gguf_utils.tqdm = _saved.pop("gguf_tqdm")


@contextmanager
def quiet_peft_wrapping() -> Iterator[None]:
    """Hide the FutureWarning peft triggers when it wraps a transformers model.

    peft probes ``model.is_gradient_checkpointing``, which transformers 5 deprecated in favour of
    ``is_activation_checkpointing``; the warning names neither pictrieve nor anything a user can
    change, so ``quality train`` and ``quality search`` keep it out of their output.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield
