"""Where models run: one rule for every model in pictrieve.

``pick_device(None)`` is ``"cuda"`` when torch sees a GPU, else ``"cpu"``; an explicit request
(``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``) is returned as given once it is known to work, so a
typo or a missing GPU fails here with a clear message instead of deep inside a model's ``.to()``.
"""

from __future__ import annotations

from pictrieve.errors import PictrieveError


class DeviceUnavailableError(PictrieveError, RuntimeError):
    """The requested torch device does not exist on this machine."""


def pick_device(requested: str | None = None) -> str:
    """The torch device to run on: ``requested`` if usable, else CUDA when available, else CPU."""
    import torch

    if requested is None or not str(requested).strip():
        return "cuda" if torch.cuda.is_available() else "cpu"
    requested = str(requested).strip()
    kind = requested.partition(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f"device {requested!r} was requested but torch sees no CUDA GPU here; "
            "pass device='cpu' (or device=None to choose automatically)"
        )
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise DeviceUnavailableError(
            f"device {requested!r} was requested but Apple MPS is not available; pass device='cpu'"
        )
    try:
        torch.device(requested)
    except RuntimeError as exc:
        raise DeviceUnavailableError(
            f"{requested!r} is not a torch device ({exc}); use 'cpu', 'cuda', 'cuda:N' or None"
        ) from exc
    return requested
