"""A trained QC2 model on disk: a small folder (``qc2.json`` + a LoRA adapter or a full model) that
records the base model, the level thresholds and a fingerprint of the gallery it was trained for, so
it is never used on another gallery by mistake."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pictrieve.agents.qc2.errors import GalleryMismatchError, QC2ModelError
from pictrieve.agents.qc2.levels import AxisLevels

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
BUNDLE_FILE = "qc2.json"
ADAPTER_DIR = "adapter"
FULL_MODEL_DIR = "model"


def gallery_fingerprint(collection: str, ids: Sequence[str]) -> str:
    """Identity of a gallery's contents: collection name, image count and a hash of the sorted ids."""
    digest = hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()[:16]
    return f"{collection}:{len(ids)}:{digest}"


@dataclass
class QC2Model:
    """A trained completion model with everything needed to use it on its gallery."""

    model: Any
    tokenizer: Any
    base_model: str
    axes: list[AxisLevels]
    fingerprint: str | None = None
    allowed_token_ids: list[int] | None = None
    training: dict[str, Any] = field(default_factory=dict)
    gallery: dict[str, Any] = field(default_factory=dict)

    @property
    def axis_names(self) -> list[str]:
        return [axis.axis for axis in self.axes]

    def axis(self, name: str) -> AxisLevels:
        for axis in self.axes:
            if axis.axis.lower() == name.lower() or axis.score_key == name.lower():
                return axis
        raise QC2ModelError(
            f"this QC2 model has no {name!r} axis (it was trained on: {', '.join(self.axis_names)}). "
            f"Annotate that score (`pictrieve quality annotate`) and retrain to use it."
        )

    def resolve_levels(self, requested: dict[str, str], default: str = "Medium") -> tuple[str, ...]:
        """One canonical level per model axis from ``{axis or score key: level}``; unspecified axes get ``default``."""
        chosen = {axis.axis: axis.normalize(default) for axis in self.axes}
        for name, level in requested.items():
            if level is None:
                continue
            axis = self.axis(name)
            chosen[axis.axis] = axis.normalize(level)
        return tuple(chosen[axis.axis] for axis in self.axes)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        is_peft = hasattr(self.model, "peft_config")
        if is_peft:
            self.model.save_pretrained(directory / ADAPTER_DIR)
        else:
            self.model.save_pretrained(directory / FULL_MODEL_DIR)
            self.tokenizer.save_pretrained(directory / FULL_MODEL_DIR)
        meta = {
            "format": FORMAT_VERSION,
            "base_model": self.base_model,
            "weights": ADAPTER_DIR if is_peft else FULL_MODEL_DIR,
            "axes": [axis.to_dict() for axis in self.axes],
            "fingerprint": self.fingerprint,
            "gallery": self.gallery,
            "allowed_token_ids": self.allowed_token_ids,
            "training": self.training,
        }
        from pictrieve.tools.core.files import atomic_write_text

        atomic_write_text(directory / BUNDLE_FILE, json.dumps(meta, indent=1))
        return directory


def read_bundle_info(directory: str | Path) -> dict[str, Any]:
    """``qc2.json`` of a saved model (no weights loaded)."""
    path = Path(directory) / BUNDLE_FILE
    if not path.is_file():
        raise QC2ModelError(f"no QC2 model at {directory} ({BUNDLE_FILE} missing): train one with `pictrieve quality train`")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise QC2ModelError(f"{path}: unsupported QC2 model format {meta.get('format')!r}; retrain it")
    return meta


def load_qc2_model(directory: str | Path, *, fingerprint: str | None = None, device: str | None = None) -> QC2Model:
    """Load a saved QC2 model; refuse it when ``fingerprint`` (of the gallery in use) differs.

    A model trained on a separate captioned collection (``pictrieve quality train --captions-from``)
    has no fingerprint: it is meant for any gallery, and its levels are those of its training captions.
    """
    from pictrieve.tools.models.causal_lm import load_causal_lm

    directory = Path(directory)
    meta = read_bundle_info(directory)
    if fingerprint is not None and meta.get("fingerprint") is not None and meta.get("fingerprint") != fingerprint:
        raise GalleryMismatchError(
            f"the QC2 model in {directory} was trained for gallery {meta.get('fingerprint')!r}, not for "
            f"this one ({fingerprint!r}); images were added or removed, or it is another gallery. "
            f"Re-annotate and retrain: `pictrieve quality annotate` then `pictrieve quality train`."
        )
    if meta["weights"] == ADAPTER_DIR:
        from peft import PeftModel

        from pictrieve.tools.core.loading import quiet_peft_wrapping

        base, tokenizer = load_causal_lm(meta["base_model"], device=device or "cpu")
        with quiet_peft_wrapping():
            model = PeftModel.from_pretrained(base, directory / ADAPTER_DIR).merge_and_unload()
    else:
        model, tokenizer = load_causal_lm(str(directory / FULL_MODEL_DIR), device=device)
    return QC2Model(
        model=model.eval(),
        tokenizer=tokenizer,
        base_model=meta["base_model"],
        axes=[AxisLevels.from_dict(a) for a in meta["axes"]],
        fingerprint=meta.get("fingerprint"),
        allowed_token_ids=meta.get("allowed_token_ids"),
        training=meta.get("training") or {},
        gallery=meta.get("gallery") or {},
    )
