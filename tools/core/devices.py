"""Where models run: one rule for every model in pictrieve.

``pick_device(None)`` is ``"cuda"`` when torch sees a GPU, else ``"cpu"``; an explicit request
(``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``) is returned as given once it is known to work, so a
typo or a missing GPU fails here with a clear message instead of deep inside a model's ``.to()``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pictrieve.errors import PictrieveError

GPU_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
"""Present when a CUDA (NVIDIA), ROCm (AMD) or WSL GPU driver is: without any of them on Linux torch
cannot see a GPU, so the automatic choice is the CPU without importing torch (about 4 s)."""


GPU_DECODE_ENV = "PICTRIEVE_GPU_DECODE"
"""``1``: an open_clip embedder on CUDA decodes the JPEGs it indexes on the GPU (nvJPEG through torchvision,
:mod:`~pictrieve.tools.models.embedders.device_pixels`); ``pictrieve index --gpu-decode`` sets it."""


class DeviceUnavailableError(PictrieveError, RuntimeError):
    """The requested torch device does not exist on this machine."""


def pick_device(requested: str | None = None) -> str:
    """The torch device to run on: ``requested`` if usable, else CUDA when available, else CPU."""
    wanted = str(requested or "").strip()
    if wanted == "cpu" or (not wanted and not gpu_driver_present()):
        return "cpu"  # known without importing torch
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


def require_cuda(purpose: str) -> None:
    """Raise :class:`DeviceUnavailableError` (one line naming ``purpose``) unless torch sees a CUDA GPU here. Known
    without importing torch where no GPU driver is installed."""
    if not pick_device(None).startswith("cuda"):
        raise DeviceUnavailableError(f"{purpose} needs a CUDA GPU, and torch sees none on this machine; leave it out "
                                     "to decode photos on the CPU")


def gpu_driver_present(files: tuple[str, ...] = GPU_DRIVER_FILES) -> bool:
    """Whether torch might see a GPU: ``False`` only on Linux with none of the driver files; other systems
    answer ``True`` (torch is asked)."""
    if not sys.platform.startswith("linux"):
        return True
    return any(Path(name).exists() for name in files)
