"""open_clip image towers on a CPU: torch vs ONNX Runtime fp32 vs ONNX Runtime int8, interleaved in one run.

Every arm is pictrieve's own ``OpenCLIPEmbedder`` (one model, loaded once) with the runtime switched the way a
person switches it (``PICTRIEVE_RUNTIME`` / ``PICTRIEVE_QUANTIZE``), so the ONNX arms include the export's
cache lookup and the array handling of the real path. The arms take turns batch by batch (the order rotates
every round), so a machine whose load changes during the run slows them alike.

- ``model``: ``embed_preprocessed`` on flickr8k-dev photos decoded and preprocessed beforehand;
- ``index``: ``Gallery.add`` of a fresh chunk of photos per arm and round, into one gallery per arm
  (decode threads, batched model calls, Chroma writes): ``pictrieve index``'s images/s.

Also reported: the one-time export and int8 quantisation (seconds), the largest absolute difference of the
fp32 vectors from torch's, and the lowest cosine of the int8 vectors with torch's. Random weights (the
default, ``open_clip:ViT-B-32/random``) cost what the real ones cost: speed does not depend on the weights.
``onnx-fp32-unfused`` runs the tower as exported before ONNX Runtime's transformer fusions (attention, residual +
LayerNorm, bias + GELU; ``tools/models/onnx_runtime.py``), so one run shows what the fusions give;
``onnx-fp32-all-tokens`` the fused tower with its last block computed for every token, as exported before that
block was cut to the class token (``export_tower``), so one run shows what the cut gives.

Run:  python benchmarks/open_clip_runtimes.py ../shared/datasets/flickr8k-dev/images --threads 2 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

logger = logging.getLogger("open_clip_runtimes")

DEFAULT_MODEL = "open_clip:ViT-B-32/random"
ARMS = {  # name -> (PICTRIEVE_RUNTIME, PICTRIEVE_QUANTIZE)
    "torch": ("torch", "none"),
    "onnx-fp32": ("onnx", "none"),
    "onnx-int8": ("onnx", "int8"),
    "onnx-fp32-unfused": ("onnx", "none"),  # the plain export, before ONNX Runtime's transformer fusions
    "onnx-fp32-all-tokens": ("onnx", "none"),  # fused, but the last block for every token
}
UNFUSED = "onnx-fp32-unfused"
ALL_TOKENS = "onnx-fp32-all-tokens"
_fp32_sessions: dict[str, Any] = {}  # onnx-fp32 and the earlier exports -> its ONNX Runtime session


def use_arm(arm: str, embedder: Any = None) -> None:
    """Switch the runtime as a person would: through the environment pictrieve reads on every call. The two fp32
    arms share the environment; the embedder is handed the session of the one asked for (the fused file is what
    pictrieve opens itself, the unfused one is what it opened before the fusions)."""
    runtime, quantize = ARMS[arm]
    os.environ["PICTRIEVE_RUNTIME"], os.environ["PICTRIEVE_QUANTIZE"] = runtime, quantize
    if embedder is not None and arm in _fp32_sessions:
        embedder._towers[None] = _fp32_sessions[arm]
    elif embedder is not None and arm == "onnx-fp32":
        embedder._towers.pop(None, None)  # not opened yet: pictrieve opens (or exports) its own file


def open_earlier_export(embedder: Any, arm: str) -> Any:
    """The tower as exported before a change, in its own cached file: before the fusions (``onnx-fp32-unfused``:
    ``torch.nn.MultiheadAttention`` as torch writes it, no optimizer), or before the class-token last block
    (``onnx-fp32-all-tokens``)."""
    import dataclasses

    from pictrieve.tools.models.embedders.open_clip import export_tower, image_tower
    from pictrieve.tools.models.onnx_runtime import onnx_model

    export = embedder.image_export()
    if arm == UNFUSED:
        earlier = dataclasses.replace(export, name=f"{export.name}-unfused", fusion=None,
                                      build=lambda: image_tower(embedder.model))
    else:
        earlier = dataclasses.replace(export, name=f"{export.name}-all-tokens",
                                      build=lambda: export_tower(embedder.model, first_token_only=False))
    return onnx_model(earlier)


def rotated(arms: Sequence[str], round_: int) -> list[str]:
    shift = round_ % len(arms)
    return [*arms[shift:], *arms[:shift]]


def prepare_runtimes(embedder: Any, arms: Sequence[str], sample: Sequence[Any]) -> dict[str, Any]:
    """Export (and quantise) once, outside the timed part; the vectors of ``sample`` per arm."""
    timings, vectors, files = {}, {}, {}
    for arm in arms:
        use_arm(arm, embedder)
        start = time.perf_counter()
        if arm in (UNFUSED, ALL_TOKENS):
            _fp32_sessions[arm] = open_earlier_export(embedder, arm)
            use_arm(arm, embedder)
        vectors[arm] = embedder.embed_preprocessed(sample)  # exports and opens the file at the first ONNX call
        timings[arm] = round(time.perf_counter() - start, 2)
        if arm != "torch" and embedder.image_runtime is None:
            raise SystemExit(f"{arm}: the export failed (see the warning above); nothing to compare")
        if arm == "onnx-fp32":
            _fp32_sessions[arm] = embedder.image_runtime
        if arm != "torch":
            files[arm] = embedder.image_runtime.path.name
    out: dict[str, Any] = {"first_call_s": timings, "files": files}
    if "torch" in vectors:
        for arm in arms:
            if arm != "torch":
                diff = np.abs(vectors[arm] - vectors["torch"]).max()
                cosine = (vectors[arm] * vectors["torch"]).sum(axis=1).min()
                out[arm] = {"max_abs_diff_vs_torch": float(f"{diff:.3g}"), "min_cosine_vs_torch": round(float(cosine), 6)}
    return out


def model_mode(embedder: Any, tensors: Sequence[Any], arms: Sequence[str], batch: int, rounds: int) -> dict[str, float]:
    """images/s of ``embed_preprocessed`` per arm, batch by batch in turn."""
    spent = {arm: 0.0 for arm in arms}
    done = {arm: 0 for arm in arms}
    for r in range(rounds):
        chunk = [tensors[(r * batch + i) % len(tensors)] for i in range(batch)]
        for arm in rotated(arms, r):
            use_arm(arm, embedder)
            start = time.perf_counter()
            embedder.embed_preprocessed(chunk)
            spent[arm] += time.perf_counter() - start
            done[arm] += len(chunk)
        logger.info("model round %d/%d: %s", r + 1, rounds,
                     ", ".join(f"{a} {done[a] / spent[a]:.2f}" for a in arms))
    return {arm: round(done[arm] / spent[arm], 3) for arm in arms}


def index_mode(embedder: Any, paths: Sequence[Path], arms: Sequence[str], batch: int, rounds: int,
               workers: int, scratch: Path) -> dict[str, float]:
    """images/s of ``Gallery.add`` per arm, each round a new chunk of ``batch`` photos per arm."""
    from pictrieve.vectorstore.gallery import Gallery

    galleries = {arm: Gallery.open(scratch / arm, embedder) for arm in arms}
    spent = {arm: 0.0 for arm in arms}
    done = {arm: 0 for arm in arms}
    needed = rounds * batch
    if len(paths) < needed:
        raise SystemExit(f"index mode needs {needed} photos (rounds x batch); the folder gave {len(paths)}")
    for r in range(rounds):
        chunk = list(paths[r * batch:(r + 1) * batch])
        for arm in rotated(arms, r):
            use_arm(arm, embedder)
            start = time.perf_counter()
            report = galleries[arm].add(chunk, batch_size=batch, workers=workers, progress=False)
            spent[arm] += time.perf_counter() - start
            done[arm] += report.indexed
        logger.info("index round %d/%d: %s", r + 1, rounds,
                     ", ".join(f"{a} {done[a] / spent[a]:.2f}" for a in arms))
    return {arm: round(done[arm] / spent[arm], 3) for arm in arms}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", type=Path, help="folder of photos (e.g. ../shared/datasets/flickr8k-dev/images)")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--modes", default="model,index", help="model, index or both (comma-separated)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for torch and ONNX Runtime alike")
    parser.add_argument("--workers", type=int, default=2, help="decode threads in index mode")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    _fp32_sessions.clear()
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms takes some of {', '.join(ARMS)}")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # open_clip's INFO lines go to the root
    logger.setLevel(logging.INFO)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # ONNX Runtime's sessions read it (intra_op_threads)
    import torch

    torch.set_num_threads(args.threads)
    from pictrieve.tools.core.images import load_image
    from pictrieve.tools.models.embedders.factory import create_embedder
    from pictrieve.vectorstore.indexing import DRAFT_SIZE

    paths = sorted(p for p in args.images.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
    embedder = create_embedder(args.model, device="cpu")
    tensors = [embedder.preprocess(load_image(p, draft_size=DRAFT_SIZE)) for p in paths[: args.batch]]
    results: dict[str, Any] = {
        "model": embedder.name, "threads": args.threads, "batch": args.batch, "rounds": args.rounds,
        "torch": torch.__version__, "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    results["prepare"] = prepare_runtimes(embedder, arms, tensors[: min(8, len(tensors))])
    modes = args.modes.split(",")
    if "model" in modes:
        results["model_images_per_s"] = model_mode(embedder, tensors, arms, args.batch, args.rounds)
    if "index" in modes:
        with tempfile.TemporaryDirectory(prefix="open-clip-runtimes-") as scratch:
            results["index_images_per_s"] = index_mode(embedder, paths, arms, args.batch, args.rounds,
                                                       args.workers, Path(scratch))
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    for mode in ("model_images_per_s", "index_images_per_s"):
        if mode in results and "torch" in results[mode]:
            results[mode.replace("images_per_s", "speedup_vs_torch")] = {
                arm: round(rate / results[mode]["torch"], 3) for arm, rate in results[mode].items() if arm != "torch"
            }
    print(json.dumps(results, indent=2) if args.json else results)
    return results


if __name__ == "__main__":
    main()
