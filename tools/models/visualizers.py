"""Visualizers: turn a text prompt into guide images, chosen by name like embedders.

``VISUALIZERS.create("exemplar:/path/to/captioned/folder")`` builds the offline visualizer. It does
NOT generate anything: it returns the photos of a reference captioned collection whose captions best
match the prompt (text-to-text cosine with all-MiniLM-L6-v2). Its images are *exemplars*, never
generations, and ``generates`` is ``False`` so reports can say so.

Text-to-image backends live in :mod:`pictrieve.tools.models.text_to_image`: ``diffusers:<model>``,
``openai:<model>`` and ``tiny-random`` (a real diffusers pipeline with random weights, for tests and
cost measurements). A backend that cannot be built raises :class:`VisualizerUnavailableError`
saying what to install or pass.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.files import atomic_write_bytes
from pictrieve.tools.core.registry import Registry, UnknownNameError

logger = logging.getLogger(__name__)


class UnknownVisualizerError(UnknownNameError):
    """A visualizer name whose family is not registered."""


class VisualizerUnavailableError(PictrieveError):
    """A visualizer that cannot be built here (missing backend or bad reference folder)."""


VISUALIZERS: Registry[Any] = Registry(
    "visualizer", example="exemplar:/path/to/captioned-folder", error=UnknownVisualizerError
)


def read_captioned_folder(root: str | os.PathLike) -> list[tuple[Path, list[str]]]:
    """``(image path, captions)`` pairs from ``root/captions.jsonl`` (lines ``{"image", "captions"}``)."""
    folder = Path(root).expanduser()
    index = folder / "captions.jsonl"
    if not index.is_file():
        raise VisualizerUnavailableError(
            f"{folder} has no captions.jsonl: the exemplar visualizer needs a captioned folder "
            '(one JSON line per photo: {"image": "relative/path.jpg", "captions": ["...", ...]})'
        )
    items: list[tuple[Path, list[str]]] = []
    for line in index.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        captions = [c for c in record.get("captions", []) if isinstance(c, str) and c.strip()]
        if captions:
            items.append((folder / record["image"], captions))
    if not items:
        raise VisualizerUnavailableError(f"{index} lists no captioned photos")
    return items


CAPTION_MATRIX_FORMAT = 2
"""Bump when the way the caption matrix is computed or stored changes (2: keyed by captions.jsonl's
bytes and the encoder's model files; 1 keyed by the caption texts only)."""
CHECKPOINT_CHUNK = 2048
"""Captions per checkpoint of a first use: a stopped run loses at most this many (about a minute on
one busy core, seconds on several)."""
ENCODE_CHUNK = 128
"""Captions encoded per progress update: 1-5 s of one busy core with MiniLM (1024 left 18 s between
updates on a loaded machine). The encoder batches internally (64), so smaller chunks cost nothing."""


class ExemplarVisualizer:
    """The offline visualizer: the reference photos whose captions best match the prompt.

    An image scores as its best-matching caption. The caption matrix (one MiniLM vector per
    reference caption) is cached on disk under ``$PICTRIEVE_CACHE/exemplar/``, keyed by the content
    of ``captions.jsonl`` (which names every photo and its captions) and the encoder's identity
    (its model files' content), so only the first use of a reference collection pays for encoding
    (flickr8k-train's 31,075 captions: batched on every core, checkpointed so a stopped first use
    resumes; then 2.7 s to start; README) and
    a changed folder or model is encoded again. First use shows a progress bar (stderr) and logs its progress. An encoder without
    a ``fingerprint`` cannot be told apart from another, so its matrix is not cached. ``seed`` is
    accepted for the protocol and ignored: the choice is deterministic.
    """

    generates = False

    def __init__(self, folder: str | os.PathLike, *, encoder: Any = None, cache_dir: str | os.PathLike | None = None,
                 progress: bool = True) -> None:
        self.folder = Path(folder).expanduser()
        self.name = f"exemplar:{self.folder}"
        self.items = read_captioned_folder(self.folder)
        counts = np.array([len(caps) for _, caps in self.items], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)[:-1]])  # each photo's first caption row
        if encoder is None:
            from pictrieve.tools.core.model_cache import shared_model
            from pictrieve.tools.models.sentence_encoder import SentenceEncoder

            encoder = shared_model(("sentence-encoder",), SentenceEncoder, label="the MiniLM sentence encoder")  # the offline embedder's too
        self.encoder = encoder
        self.caption_vectors = self._caption_vectors(cache_dir, progress)

    def cache_path(self, cache_dir: str | os.PathLike | None = None) -> Path | None:
        """Where this folder's caption matrix is cached, or ``None`` for an encoder without a fingerprint."""
        from pictrieve.tools.core.pypi_assets import cache_root

        identity = getattr(self.encoder, "fingerprint", None)
        if not isinstance(identity, str) or not identity:
            return None
        digest = hashlib.sha256(f"format={CAPTION_MATRIX_FORMAT}\nencoder={identity}\n".encode())
        digest.update(hashlib.sha256((self.folder / "captions.jsonl").read_bytes()).digest())
        return Path(cache_dir or cache_root() / "exemplar") / f"captions-{digest.hexdigest()[:24]}.npy"

    def _caption_vectors(self, cache_dir: str | os.PathLike | None, progress: bool) -> np.ndarray:
        texts = [c for _, caps in self.items for c in caps]
        path = self.cache_path(cache_dir)
        if path is None:
            logger.info("the encoder %s has no fingerprint: its caption vectors are not cached on disk",
                        type(self.encoder).__name__)
        elif path.is_file():
            try:
                vectors = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as exc:  # a truncated or foreign file: encode again
                logger.warning("ignoring unreadable cache %s (%s)", path, exc)
            else:
                if vectors.ndim == 2 and vectors.shape[0] == len(texts):
                    return vectors
        vectors = self._encode(texts, progress, path)
        if path is not None:
            buffer = io.BytesIO()
            np.save(buffer, vectors, allow_pickle=False)
            try:
                atomic_write_bytes(path, buffer.getvalue())
            except OSError as exc:  # a read-only cache is slower, not broken
                logger.warning("could not cache the caption vectors at %s (%s)", path, exc)
            else:
                self._drop_parts(path)
        return vectors

    def _encode(self, texts: list[str], progress: bool, path: Path | None) -> np.ndarray:
        """Every caption's vector, with a progress bar (stderr) and a log line per tenth.

        The captions are encoded longest first (chunks of similar length pad little) in checkpoints of
        :data:`CHECKPOINT_CHUNK`, each saved under ``<cache>.parts/`` (temp file + rename) as soon as it is
        done, so a stopped first use resumes where it stopped; the parts are removed once the whole
        matrix is saved. An encoder with ``encode_bulk`` (:class:`SentenceEncoder`: batched PyTorch on
        every core) does the work; one with only ``encode`` is called per :data:`ENCODE_CHUNK`.
        """
        from tqdm.auto import tqdm

        bulk = getattr(self.encoder, "encode_bulk", None)
        logger.warning("encoding the %d reference captions of %s once (%s)%s", len(texts), self.folder,
                       "batched on every core" if bulk else "one batch at a time",
                       f"; kept at {path}, resumable if stopped" if path else "")
        start = time.perf_counter()
        order = np.argsort([-len(t) for t in texts], kind="stable")
        parts = path.with_name(path.stem + ".parts") if path is not None else None
        out: np.ndarray | None = None
        logged = 0
        with tqdm(total=len(texts), desc="encoding reference captions", unit="caption", disable=not progress) as bar:
            for begin in range(0, len(texts), CHECKPOINT_CHUNK):
                rows = order[begin : begin + CHECKPOINT_CHUNK]
                part = parts / f"{begin:09d}.npy" if parts is not None else None
                chunk = _read_part(part, len(rows))
                if chunk is not None:
                    bar.update(len(rows))
                else:
                    chunk_texts = [texts[i] for i in rows]
                    if bulk is not None:
                        chunk = np.asarray(bulk(chunk_texts, on_batch=bar.update), dtype=np.float32)
                    else:
                        pieces = []
                        for at in range(0, len(chunk_texts), ENCODE_CHUNK):
                            pieces.append(np.asarray(self.encoder.encode(chunk_texts[at : at + ENCODE_CHUNK]),
                                                     dtype=np.float32))
                            bar.update(len(pieces[-1]))
                        chunk = np.concatenate(pieces)
                    _write_part(part, chunk)
                if out is None:
                    out = np.empty((len(texts), chunk.shape[1]), dtype=np.float32)
                out[rows] = chunk
                done = begin + len(rows)
                if done * 10 // len(texts) > logged:
                    logged = done * 10 // len(texts)
                    logger.info("encoded %d of %d reference captions (%.0f s)", done, len(texts),
                                time.perf_counter() - start)
        assert out is not None  # read_captioned_folder refuses a folder without captions
        logger.warning("encoded %d reference captions in %.0f s", len(texts), time.perf_counter() - start)
        return out

    def _drop_parts(self, path: Path) -> None:
        """Remove the checkpoints of ``path`` once the whole matrix is saved."""
        import shutil

        shutil.rmtree(path.with_name(path.stem + ".parts"), ignore_errors=True)

    def best_matches(self, prompt: str, n: int = 1) -> list[tuple[Path, float]]:
        """The ``n`` reference photos best matching ``prompt``: ``[(path, cosine), ...]``, best first."""
        if not prompt or not prompt.strip():
            raise VisualizerUnavailableError("empty prompt: say what the guide images should show")
        query = np.asarray(self.encoder.encode([prompt]), dtype=np.float32)[0]
        sims = self.caption_vectors @ query
        best = np.maximum.reduceat(sims, self._starts)  # a photo scores as its best caption
        n = max(1, min(int(n), len(self.items)))
        top = np.argpartition(-best, n - 1)[:n]
        top = top[np.lexsort((top, -best[top]))]
        return [(self.items[i][0], float(best[i])) for i in top]

    def source_paths(self, prompt: str, n: int = 1) -> list[Path]:
        """The files of the ``n`` best-matching reference photos (see :mod:`pictrieve.tools.models.guide_images`)."""
        return [path for path, _ in self.best_matches(prompt, n)]

    def visualize(self, prompt: str, *, n: int = 1, seed: int | None = None) -> list[Image.Image]:
        del seed
        from pictrieve.tools.core.images import load_image

        return [load_image(path) for path, _ in self.best_matches(prompt, n)]


def _read_part(part: Path | None, rows: int) -> np.ndarray | None:
    """A saved checkpoint of ``rows`` vectors, or ``None`` when absent or unreadable (then encoded again)."""
    if part is None or not part.is_file():
        return None
    try:
        chunk = np.load(part, allow_pickle=False)
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable checkpoint %s (%s)", part, exc)
        return None
    return chunk.astype(np.float32, copy=False) if chunk.ndim == 2 and chunk.shape[0] == rows else None


def _write_part(part: Path | None, chunk: np.ndarray) -> None:
    """Save one checkpoint (temp file + rename: a half-written part is never read)."""
    if part is None:
        return
    buffer = io.BytesIO()
    np.save(buffer, chunk, allow_pickle=False)
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(part, buffer.getvalue())
    except OSError as exc:  # a read-only cache: no resume, nothing broken
        logger.warning("could not save a checkpoint at %s (%s)", part, exc)


def _build_exemplar(spec: str, **kwargs: Any) -> ExemplarVisualizer:
    if not spec:
        raise VisualizerUnavailableError("name the reference collection: exemplar:/path/to/captioned-folder")
    return ExemplarVisualizer(spec, **kwargs)


VISUALIZERS.register("exemplar", _build_exemplar, "offline: reference photos whose captions match the prompt (not generated)")
VISUALIZERS.register("diffusers", "pictrieve.tools.models.text_to_image:build_diffusers",
                     "a diffusers text-to-image pipeline: diffusers:<model id or local folder>")
VISUALIZERS.register("openai", "pictrieve.tools.models.text_to_image:build_openai",
                     "an OpenAI-compatible images endpoint: openai:<model> (base_url=... for others)")
VISUALIZERS.register("tiny-random", "pictrieve.tools.models.text_to_image:build_tiny_random",
                     "a tiny random-weight diffusers pipeline: real code path, meaningless pictures (tests, cost)")


GENERATING_FAMILIES = ("diffusers", "tiny-random")
"""Visualizer families that run a diffusers pipeline here (the generation extra)."""


def check_visualizer_name(name: str) -> str:
    """``name`` if it names a visualizer that can be built here: its family is known and, for a diffusers
    pipeline, the generation extra is installed. Cheap (nothing loads), for a command's start."""
    from pictrieve.tools.core.extras import require_extra
    from pictrieve.tools.core.registry import split_name

    name = VISUALIZERS.check(name)
    if split_name(name)[0] in GENERATING_FAMILIES:
        require_extra("generation", f"the visualizer {name!r}")
    return name


def create_visualizer(name: str, **kwargs: Any) -> Any:
    """Build a visualizer from its name, e.g. ``exemplar:/data/flickr8k-train``."""
    return VISUALIZERS.create(name, **kwargs)
