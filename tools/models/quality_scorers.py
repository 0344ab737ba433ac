"""Per-image quality scorers for quality-controlled retrieval (QC2), behind one small registry.

A scorer turns images into one float each and says how to read it:

- ``laion_aesthetic``: the LAION "improved aesthetic predictor" (Schuhmann, 2022), an MLP on
  L2-normalised OpenAI CLIP ViT-L/14 image embeddings, about 1-10, higher is more visually appealing.
  This is the aesthetic scorer of the QC2 paper. Its weights (3.7 MB, Apache-2.0) are fetched once
  from the upstream GitHub repository into ``cache_root()/laion-aesthetic/``. It is only meaningful on
  ViT-L/14 embeddings: when the gallery itself uses ``open_clip:ViT-L-14/openai`` the stored
  vectors are reused, otherwise that CLIP model is loaded (downloaded once) to embed the images.
- ``brisque``: BRISQUE (Mittal et al., 2012) from the ``brisque`` package, a no-reference measure of
  *technical* quality (noise, blur, compression and other distortions of natural-scene statistics),
  not of aesthetics; lower is better (about 0-100). It needs no download, so it is the offline
  default. Its prompt axis is therefore called "Quality", never "Aesthetic".

Register more with :func:`register_quality_scorer` (the :data:`QUALITY_SCORERS` registry).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.downloads import DownloadError, download_verified
from pictrieve.tools.core.files import atomic_write_bytes
from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.tools.core.registry import Registry, UnknownNameError

logger = logging.getLogger(__name__)

LAION_AESTHETIC_URL = (
    "https://github.com/christophschuhmann/improved-aesthetic-predictor/raw/main/"
    "sac%2Blogos%2Bava1-l14-linearMSE.pth"
)
LAION_AESTHETIC_FILE = "sac+logos+ava1-l14-linearMSE.pth"
LAION_AESTHETIC_SHA256 = "21dd590f3ccdc646f0d53120778b296013b096a035a2718c9cb0d511bff0f1e0"
LAION_CLIP_EMBEDDER = "open_clip:ViT-L-14/openai"
LAION_EMBEDDING_DIM = 768


class QualityScorerError(PictrieveError, RuntimeError):
    """A quality scorer cannot be built or run here (the message says what to do)."""


@runtime_checkable
class QualityScorer(Protocol):
    """Scores images; ``key`` names the score in gallery metadata, ``axis`` in QC2 prompts."""

    key: str
    axis: str
    higher_is_better: bool
    description: str

    def score_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """One float64 score per image."""


# --------------------------------------------------------------------------- BRISQUE


class BrisqueScorer:
    """Technical image quality by BRISQUE (lower raw score = fewer distortions = better).

    Images are downscaled so their longer side is at most ``max_side`` pixels before scoring (BRISQUE
    costs O(pixels): ~0.1 s for a 384 px photo on one core). Scores are only comparable between
    images scored with the same ``max_side``.
    """

    key = "brisque"
    axis = "Quality"
    higher_is_better = False
    description = "BRISQUE no-reference technical quality (distortion), lower raw score is better"

    def __init__(self, max_side: int = 512) -> None:
        try:
            from brisque import BRISQUE
        except ImportError as exc:  # pragma: no cover - brisque is a dependency
            raise QualityScorerError("BRISQUE needs `pip install brisque opencv-python-headless`") from exc

        class _Brisque(BRISQUE):
            # brisque 0.2.0 returns 1-element arrays among its features, which numpy >= 2.4 refuses
            # to turn into floats; flatten them to scalars before its own scaling step.
            def calculate_brisque_features(self, image, kernel_size=7, sigma=7 / 6):  # noqa: ANN001
                features = super().calculate_brisque_features(image, kernel_size, sigma)
                return np.array([float(np.ravel(value)[0]) for value in features])

        self._model = _Brisque(url=False)
        self.max_side = max_side

    def score_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        return np.array([self._score(image) for image in images], dtype=np.float64)

    def _score(self, image: Image.Image) -> float:
        image = image.convert("RGB")
        if max(image.size) > self.max_side:
            image = image.copy()
            image.thumbnail((self.max_side, self.max_side), Image.Resampling.BICUBIC)
        pixels = np.asarray(image)
        if min(pixels.shape[:2]) < 16:
            raise ValueError(f"image too small for BRISQUE ({pixels.shape[1]}x{pixels.shape[0]})")
        return float(self._model.score(pixels))


# --------------------------------------------------------------------------- LAION aesthetic


def build_laion_aesthetic_head():
    """The LAION improved-aesthetic-predictor MLP (layer layout of the released state dict)."""
    from torch import nn

    class LaionAestheticHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Linear layers without activations, exactly as released: keys layers.{0,2,4,6,7}.*
            self.layers = nn.Sequential(
                nn.Linear(LAION_EMBEDDING_DIM, 1024),
                nn.Dropout(0.2),
                nn.Linear(1024, 128),
                nn.Dropout(0.2),
                nn.Linear(128, 64),
                nn.Dropout(0.1),
                nn.Linear(64, 16),
                nn.Linear(16, 1),
            )

        def forward(self, embeddings):  # noqa: ANN001
            return self.layers(embeddings)

    return LaionAestheticHead()


def fetch_laion_aesthetic_weights(*, download: bool = True) -> Path:
    """Local path of the LAION aesthetic head weights, downloading them once from upstream."""
    target = cache_root() / "laion-aesthetic" / LAION_AESTHETIC_FILE
    if target.is_file():
        return target
    if not download:
        raise QualityScorerError(f"LAION aesthetic weights not cached at {target}")
    logger.info("fetching the LAION aesthetic predictor once from %s", LAION_AESTHETIC_URL)
    try:
        payload = download_verified(LAION_AESTHETIC_URL, LAION_AESTHETIC_SHA256)
    except DownloadError as exc:
        raise QualityScorerError(
            f"could not fetch the LAION aesthetic predictor: {exc}. Copy "
            f"{LAION_AESTHETIC_FILE} from github.com/christophschuhmann/improved-aesthetic-predictor "
            f"to {target}, pass its path, or use the offline 'brisque' scorer."
        ) from exc
    atomic_write_bytes(target, payload)
    return target


def load_laion_aesthetic_head(weights: str | Path | None = None):
    """The head in eval mode, from ``weights`` or the cached/downloaded upstream file."""
    import torch

    path = Path(weights) if weights is not None else fetch_laion_aesthetic_weights()
    head = build_laion_aesthetic_head()
    head.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return head.eval()


class LaionAestheticScorer:
    """Aesthetic score (about 1-10, higher is more appealing) from CLIP ViT-L/14 image embeddings."""

    key = "laion_aesthetic"
    axis = "Aesthetic"
    higher_is_better = True
    description = "LAION improved aesthetic predictor on OpenAI CLIP ViT-L/14 embeddings, higher is better"

    def __init__(self, embedder: Any | None = None, weights: str | Path | None = None) -> None:
        self._embedder = embedder
        self._head = load_laion_aesthetic_head(weights)

    @staticmethod
    def accepts_embedder(embedder_name: str) -> bool:
        """Whether a gallery's stored vectors are ViT-L/14 OpenAI CLIP embeddings the head reads."""
        return embedder_name.replace(" ", "") == LAION_CLIP_EMBEDDER

    def score_embeddings(self, embeddings: np.ndarray) -> np.ndarray:
        """Scores for L2-normalised ViT-L/14 image embeddings, shape ``(n, 768)``."""
        import torch

        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[1] != LAION_EMBEDDING_DIM:
            raise ValueError(f"LAION aesthetic head needs (n, 768) ViT-L/14 embeddings, got {embeddings.shape}")
        norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
        with torch.no_grad():
            scores = self._head(torch.from_numpy(embeddings / np.maximum(norms, 1e-12)))
        return scores.squeeze(1).double().numpy()

    def score_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        if self._embedder is None:
            from pictrieve.tools.models.embedders.factory import create_embedder

            self._embedder = create_embedder(LAION_CLIP_EMBEDDER)
        if getattr(self._embedder, "dim", None) != LAION_EMBEDDING_DIM:
            raise QualityScorerError(f"LAION aesthetic scores need {LAION_CLIP_EMBEDDER}, not {self._embedder.name}")
        return self.score_embeddings(self._embedder.embed_images(list(images)))


# --------------------------------------------------------------------------- registry


class UnknownQualityScorerError(UnknownNameError, QualityScorerError):
    """The scorer name names no registered scorer."""


QUALITY_SCORERS: Registry[QualityScorer] = Registry(
    "quality scorer", example="'brisque' or 'laion_aesthetic'", error=UnknownQualityScorerError
)
QUALITY_SCORERS.register("brisque", lambda spec="", **options: BrisqueScorer(**options), BrisqueScorer.description)
QUALITY_SCORERS.register("laion_aesthetic", lambda spec="", **options: LaionAestheticScorer(**options),
                         LaionAestheticScorer.description)


def register_quality_scorer(name: str, factory: Callable[..., QualityScorer]) -> None:
    """Make ``create_quality_scorer(name)`` build scorers with ``factory(**options)``."""
    QUALITY_SCORERS.register(_normalise(name), lambda spec="", **options: factory(**options))


def available_quality_scorers() -> list[str]:
    return QUALITY_SCORERS.families()


def create_quality_scorer(name: str, **options: Any) -> QualityScorer:
    """Build a registered scorer by name (``brisque``, ``laion_aesthetic``, or one you registered)."""
    return QUALITY_SCORERS.create(_normalise(name), **options)


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def default_quality_scorer_name(embedder_name: str) -> str:
    """``laion_aesthetic`` for a ViT-L/14 OpenAI CLIP gallery (as in the paper), else offline ``brisque``."""
    return "laion_aesthetic" if LaionAestheticScorer.accepts_embedder(embedder_name) else "brisque"
