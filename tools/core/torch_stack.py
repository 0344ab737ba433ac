"""Recognising a torch and a torchvision that were not built for each other.

Installing the CPU-only torch from PyTorch's index next to a torchvision built for another torch (or
the other way round) leaves torchvision unable to register its C++ operators: the first import of
torchvision (by timm, open_clip or transformers, deep inside loading a model) fails with
``RuntimeError: operator torchvision::nms does not exist``, forty lines below anything that names
the cause. :func:`torch_stack_error` turns that failure into one line that names both packages and
how to reinstall them as a pair; the command line prints it instead of the traceback.
"""

from __future__ import annotations

import re
from importlib import metadata

from pictrieve.errors import PictrieveError, causes

_MISSING_OPERATOR = re.compile(r"operator torchvision::\w+ does not exist")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


class TorchStackError(PictrieveError, RuntimeError):
    """torch and torchvision are installed in versions that do not work together."""


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def torch_stack_error(exc: BaseException) -> TorchStackError | None:
    """The one-line error when ``exc`` (or anything in its cause chain) is torchvision failing to load
    its operators against the installed torch; ``None`` for any other failure."""
    for current in causes(exc):
        match = _MISSING_OPERATOR.search(str(current))
        if match:
            torch, vision = _version("torch"), _version("torchvision")
            build = "the CPU-only pair" if "+cpu" in torch + vision else "a matching pair"
            return TorchStackError(
                f"torchvision {vision} does not work with torch {torch} ({match.group(0)}): they were not "
                "built for each other",
                fix=f"reinstall {build}: pip install --force-reinstall torch torchvision --index-url {CPU_INDEX} "
                "(CPU only), or pip install --force-reinstall torch torchvision (CUDA)",
            )
    return None
