"""What a photo's own analysis says about the things a query names: the offline detector's COCO objects.

The relevance rule (:mod:`pictrieve.vectorstore.relevance`) reads one number, the cosine. A query often
names a thing the offline detector (SSD-MobileNet-v2, the 80 COCO classes) can look for: "a dog on a
beach" names a dog, "a giraffe in a kitchen" a giraffe. When the objects found in a photo at index time
are stored with it (``objects``: ``{label: score}``, the best score of each class found), they can

- *confirm* a hit: every COCO thing the query names was found in the photo (score >= :data:`CONFIRM_SCORE`);
- *deny* it: some COCO thing the query names was not found at all (no box >= :data:`DENY_SCORE`).

:func:`adjustment` turns that into a shift of the hit's rule statistic: ``+ CONFIRM_BONUS`` or
``- DENY_PENALTY`` (nothing when the query names no COCO thing, or the photo was not analysed). The
constants were chosen on flickr8k-train held-out folds, never on flickr8k-dev
(``benchmarks/relevance_evidence_study.py``; BENCHMARKS.md "Relevance: evidence beyond the cosine").

The objects are found where a photo is indexed (:func:`objects_for_file`, called by
:func:`~pictrieve.vectorstore.indexing.prepare_file`, so ``index``, ``index --watch`` and ``--engine ray`` store the
same ones) once a gallery was told ``index --objects`` (:data:`RECORD_FLAG`): a photo changed in place is looked at
again, a copy or a moved photo keeps the objects of its content, and :func:`objects_status` says how many photos
have them (``pictrieve info``, MCP ``gallery_info``).

Query words map to classes by :data:`OBJECT_WORDS`: the class names, their plurals and the everyday
words for them ("man", "girl", "crowd" -> person; "bike" -> bicycle; "puppy" -> dog). Words that name a
class only sometimes ("orange" the colour, "mouse" the animal, "glass") are left out.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

OBJECTS_KEY = "objects"
"""Metadata key of a photo's detected COCO objects: ``{label: best score}`` (scores >= :data:`STORED_SCORE`)."""

STORED_SCORE = 0.1
"""Detections kept at index time: low enough that :data:`DENY_SCORE` can say "not found at all"."""

_PERSON = ("person people persons man men woman women boy boys girl girls child children kid kids baby babies "
           "toddler toddlers teenager teenagers lady ladies guy guys player players crowd family team skier "
           "skiers surfer surfers cyclist cyclists biker bikers rider riders climber climbers swimmer swimmers "
           "runner runners dancer dancers hiker hikers skateboarder skateboarders snowboarder snowboarders "
           "musician musicians couple adult adults")

OBJECT_WORDS: dict[str, str] = {
    **{w: "person" for w in _PERSON.split()},
    **{w: "bicycle" for w in ("bicycle", "bicycles", "bike", "bikes")},
    **{w: "car" for w in ("car", "cars")},
    **{w: "motorcycle" for w in ("motorcycle", "motorcycles", "motorbike", "motorbikes")},
    **{w: "airplane" for w in ("airplane", "airplanes", "aeroplane", "plane", "planes", "jet", "jets")},
    **{w: "bus" for w in ("bus", "buses")},
    **{w: "train" for w in ("train", "trains")},
    **{w: "truck" for w in ("truck", "trucks")},
    **{w: "boat" for w in ("boat", "boats", "canoe", "canoes", "kayak", "kayaks", "ship", "ships")},
    "hydrant": "fire hydrant", "bench": "bench", "benches": "bench",
    **{w: "bird" for w in ("bird", "birds", "duck", "ducks", "seagull", "seagulls", "pigeon", "pigeons")},
    **{w: "cat" for w in ("cat", "cats", "kitten", "kittens")},
    **{w: "dog" for w in ("dog", "dogs", "puppy", "puppies")},
    **{w: "horse" for w in ("horse", "horses", "pony", "ponies")},
    **{w: "sheep" for w in ("sheep", "lamb", "lambs")},
    **{w: "cow" for w in ("cow", "cows", "cattle", "calf", "bull", "bulls")},
    **{w: "elephant" for w in ("elephant", "elephants")},
    **{w: "bear" for w in ("bear", "bears")},
    **{w: "zebra" for w in ("zebra", "zebras")},
    **{w: "giraffe" for w in ("giraffe", "giraffes")},
    **{w: "backpack" for w in ("backpack", "backpacks")},
    **{w: "umbrella" for w in ("umbrella", "umbrellas")},
    **{w: "handbag" for w in ("handbag", "handbags", "purse", "purses")},
    **{w: "suitcase" for w in ("suitcase", "suitcases", "luggage")},
    **{w: "frisbee" for w in ("frisbee", "frisbees")},
    **{w: "skis" for w in ("skis",)},
    **{w: "snowboard" for w in ("snowboard", "snowboards")},
    **{w: "sports ball" for w in ("ball", "balls", "football", "soccer", "basketball", "volleyball")},
    **{w: "kite" for w in ("kite", "kites")},
    **{w: "skateboard" for w in ("skateboard", "skateboards")},
    **{w: "surfboard" for w in ("surfboard", "surfboards")},
    **{w: "tennis racket" for w in ("racket", "rackets", "racquet")},
    **{w: "bottle" for w in ("bottle", "bottles")},
    **{w: "cup" for w in ("cup", "cups", "mug", "mugs")},
    **{w: "fork" for w in ("fork", "forks")}, **{w: "knife" for w in ("knife", "knives")},
    **{w: "spoon" for w in ("spoon", "spoons")}, **{w: "bowl" for w in ("bowl", "bowls")},
    **{w: "banana" for w in ("banana", "bananas")}, **{w: "apple" for w in ("apple", "apples")},
    **{w: "sandwich" for w in ("sandwich", "sandwiches")}, "broccoli": "broccoli",
    **{w: "carrot" for w in ("carrot", "carrots")}, **{w: "pizza" for w in ("pizza", "pizzas")},
    **{w: "donut" for w in ("donut", "donuts", "doughnut", "doughnuts")}, **{w: "cake" for w in ("cake", "cakes")},
    **{w: "chair" for w in ("chair", "chairs")}, **{w: "couch" for w in ("couch", "couches", "sofa", "sofas")},
    **{w: "bed" for w in ("bed", "beds")}, **{w: "toilet" for w in ("toilet", "toilets")},
    **{w: "tv" for w in ("tv", "television")}, **{w: "laptop" for w in ("laptop", "laptops")},
    **{w: "keyboard" for w in ("keyboard", "keyboards")},
    **{w: "cell phone" for w in ("cellphone", "smartphone", "smartphones")},
    **{w: "microwave" for w in ("microwave", "microwaves")}, **{w: "oven" for w in ("oven", "ovens")},
    **{w: "toaster" for w in ("toaster", "toasters")}, **{w: "sink" for w in ("sink", "sinks")},
    **{w: "refrigerator" for w in ("refrigerator", "refrigerators", "fridge", "fridges")},
    **{w: "book" for w in ("book", "books")}, **{w: "clock" for w in ("clock", "clocks")},
    **{w: "vase" for w in ("vase", "vases")}, "scissors": "scissors",
    **{w: "toothbrush" for w in ("toothbrush", "toothbrushes")},
}
"""Query word -> the COCO class it names (see the module docstring for what is left out)."""

PHRASES: dict[str, str | None] = {
    "hot dog": "hot dog", "hot dogs": "hot dog", "teddy bear": "teddy bear", "teddy bears": "teddy bear",
    "traffic light": "traffic light", "traffic lights": "traffic light", "stop sign": "stop sign",
    "parking meter": "parking meter", "fire hydrant": "fire hydrant", "cell phone": "cell phone",
    "wine glass": "wine glass", "potted plant": "potted plant", "dining table": "dining table",
    "tennis racket": "tennis racket", "baseball bat": "baseball bat", "baseball glove": "baseball glove",
    "hair drier": "hair drier", "mobile phone": "cell phone",
    "snow plow": None, "bus stop": None, "train station": None, "car park": None, "dog park": None,
    "dog show": None, "bike path": None, "bike trail": None, "boat ramp": None,
}
"""Two-word names read before single words; ``None``: the pair names no COCO thing (a "bus stop" needs no bus)."""

_WORD = re.compile(r"[a-z]+")

CONFIRM_SCORE = 0.5
"""A named thing counts as found at this detector score or above."""

DENY_SCORE = 0.1
"""A named thing counts as absent when no box of its class reaches this score (:data:`STORED_SCORE`)."""

CONFIRM_BONUS = 0.0
"""Added to a hit's rule statistic when every COCO thing the query names was found in the photo."""

DENY_PENALTY = 0.0
"""Taken from a hit's rule statistic when some COCO thing the query names was not found in the photo."""


def named_objects(query: str) -> frozenset[str]:
    """The COCO classes ``query`` names ("a man and his dog" -> {person, dog}); empty when it names none."""
    tokens = _WORD.findall(query.lower())
    found: set[str] = set()
    i = 0
    while i < len(tokens):
        pair = " ".join(tokens[i:i + 2])
        if len(tokens) > i + 1 and pair in PHRASES:
            if PHRASES[pair]:
                found.add(str(PHRASES[pair]))
            i += 2
            continue
        label = OBJECT_WORDS.get(tokens[i])
        if label:
            found.add(label)
        i += 1
    return frozenset(found)


def verdict(named: frozenset[str], objects: Mapping[str, Any] | None, *, confirm_score: float = CONFIRM_SCORE,
            deny_score: float = DENY_SCORE) -> str | None:
    """``confirm``, ``deny`` or ``None`` (nothing named, or the photo was not analysed: ``objects is None``)."""
    if not named or objects is None:
        return None
    scores = {str(k): float(v) for k, v in objects.items()}
    if any(scores.get(label, 0.0) < deny_score for label in named):
        return "deny"
    if all(scores.get(label, 0.0) >= confirm_score for label in named):
        return "confirm"
    return None


def adjustment(named: frozenset[str], objects: Mapping[str, Any] | None, *, bonus: float = CONFIRM_BONUS,
               penalty: float = DENY_PENALTY, confirm_score: float = CONFIRM_SCORE,
               deny_score: float = DENY_SCORE) -> float:
    """How much the photo's detected objects shift a hit's rule statistic for a query naming ``named``."""
    said = verdict(named, objects, confirm_score=confirm_score, deny_score=deny_score)
    return bonus if said == "confirm" else -penalty if said == "deny" else 0.0


def objects_text(found: Mapping[str, float]) -> str:
    """The stored form of a photo's objects (Chroma metadata holds scalars): ``"dog 0.91; person 0.88"``, best first;
    ``""`` for a photo analysed where nothing was found."""
    return "; ".join(f"{label} {score:.2f}" for label, score in sorted(found.items(), key=lambda kv: -kv[1]))


def parse_objects(text: Any) -> dict[str, float] | None:
    """:func:`objects_text` read back; ``None`` when the photo was not analysed (no stored value)."""
    if text is None:
        return None
    found: dict[str, float] = {}
    for part in str(text).split(";"):
        label, _, score = part.strip().rpartition(" ")
        if label:
            found[label] = float(score)
    return found


def best_scores(detections: Any) -> dict[str, float]:
    """Each class's best score among ``detections`` (:class:`~pictrieve.tools.models.protocols.Detection`)."""
    best: dict[str, float] = {}
    for det in detections:
        best[det.label] = max(best.get(det.label, 0.0), round(float(det.score), 2))
    return best


RECORD_FLAG = "objects"
"""The flag in the gallery's indexing record (:data:`~pictrieve.vectorstore.indexing.INDEXING_RECORD`) that says its
photos' objects are found whenever photos are indexed (``index --objects``; ``--no-objects`` stops it): new and
changed photos get theirs in every path that indexes (``index``, ``index --watch``, ``--engine ray``)."""

COST_NOTE = "finding the COCO objects in each photo too (SSD-MobileNet-v2: about 0.13 s of CPU a photo)"
"""What a run that finds objects says before it starts, so the slower indexing is no surprise."""

RAY_BATCH = 8
"""Photos per Ray worker batch at most while objects are found: a batch's progress comes back once it is done, and
the detector's 0.13 s a photo on top of embedding made a default batch of 32 a silence of 5-15 s."""

_shared: Any = None
_shared_lock = threading.Lock()


def shared_detector() -> Any:
    """The offline detector of this process, made once (it is thread-safe: the decode threads share it). Raises
    :class:`~pictrieve.tools.core.pypi_assets.AssetUnavailableError` when it can be neither found nor fetched."""
    global _shared
    with _shared_lock:
        if _shared is None:
            from pictrieve.tools.models.object_detector import ObjectDetector

            _shared = ObjectDetector()
        return _shared


def find_objects(path: str | os.PathLike, *, max_pixels: int | None = None, detector: Any = None) -> str:
    """The stored form (:func:`objects_text`) of the COCO objects the detector finds in the photo at ``path``,
    decoded at the detector's own size (a JPEG draft near 300x300), so that every way of indexing stores the same
    objects for the same file. Raises what :func:`~pictrieve.tools.core.images.load_image` raises."""
    from pictrieve.tools.core.images import load_image
    from pictrieve.tools.models.object_detector import INPUT_SIZE

    image = load_image(path, max_pixels=max_pixels, draft_size=(INPUT_SIZE, INPUT_SIZE))
    return objects_text(best_scores((detector or shared_detector()).detect(image, min_score=STORED_SCORE)))


def has_objects(record: Mapping[str, Any] | None) -> bool:
    """Whether a stored record holds its photo's objects (an in-memory store keeps a removed key as ``None``)."""
    return bool(record) and record.get(OBJECTS_KEY) is not None  # type: ignore[union-attr]


def objects_for_file(path: str | os.PathLike, digest: str, same_content: Iterable[Mapping[str, Any]],
                     stored: Iterable[Mapping[str, Any]], *, wanted: bool,
                     max_pixels: int | None = None) -> tuple[dict[str, Any], bool]:
    """The ``objects`` metadata to write for a file being indexed, and whether the detector ran for it now.

    The objects of a record of the same content (``digest``: the file's own record when only touched, the record
    of a copy or of a moved file) are kept without running the detector; otherwise, when ``wanted``, the detector
    looks at the file. When neither gives objects but a stored record of this file (``stored``) has some, they
    belonged to the content before it changed: ``{objects: None}`` removes them (stores merge metadata)."""
    for record in same_content:
        if record.get("sha256") == digest and has_objects(record):
            return {OBJECTS_KEY: str(record[OBJECTS_KEY])}, False
    if wanted:
        return {OBJECTS_KEY: find_objects(path, max_pixels=max_pixels)}, True
    return ({OBJECTS_KEY: None} if any(has_objects(record) for record in stored) else {}), False


def analysed_count(gallery: Any) -> int:
    """How many photos of ``gallery`` (one embedder's view) have their objects stored: read from Chroma's metadata
    table where the gallery is a folder (:func:`~pictrieve.vectorstore.changes.read_fields`), else from every
    record's metadata."""
    from pictrieve.vectorstore.changes import embedded_location, read_fields

    location = embedded_location(gallery)
    fields = read_fields(location, gallery.collection_name, [OBJECTS_KEY], what="the count of analysed photos") \
        if location is not None else None
    if fields is not None:
        return sum(1 for _, meta in fields.values() if meta.get(OBJECTS_KEY) is not None)
    return sum(1 for item in gallery.items() if has_objects(item.metadata))


def objects_status(gallery: Any, *, told: bool) -> dict[str, Any]:
    """What ``pictrieve info`` and MCP ``gallery_info`` say of the photos' detected objects: ``{"photos",
    "analysed", "told", "rule_uses", "said"}`` (``told``: new and changed photos get theirs as they are indexed,
    :func:`~pictrieve.vectorstore.indexing.finds_objects`; ``rule_uses``: the embedder's relevance rule reads them;
    ``said``: the same in words, with what to run)."""
    photos = gallery.count() if gallery.exists() else 0
    analysed = analysed_count(gallery) if photos else 0
    cutoff = gallery.relevance_cutoff()
    rule_uses = bool(cutoff.evidence and cutoff.per_query)
    run = f"`pictrieve index PHOTOS --gallery {gallery.location} --objects` finds {'the rest' if analysed else 'them'}"
    use = ("the relevance rule lets them confirm or deny what a query names" if rule_uses
           else f"the relevance rule of {gallery.embedder_name} does not read them (offline's shipped rule does)")
    if analysed and analysed == photos:
        said = f"found in all {photos} photos; {use}"
    elif analysed:
        said = f"found in {analysed} of {photos} photos; {use} (for those {analysed})"
    else:
        said = "found in none of the photos" if photos else "none yet"
    if told:
        said += "; new and changed photos get theirs as they are indexed (--no-objects stops it)"
    elif analysed < photos or not photos:
        said += f"; {run} (about 0.13 s of CPU a photo)"
    return {"photos": photos, "analysed": analysed, "told": told, "rule_uses": rule_uses, "said": said}
