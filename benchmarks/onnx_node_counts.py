"""How many operators an open_clip image tower runs on ONNX Runtime, before and after the transformer fusions.

Exports the tower as pictrieve does (``try_onnx_model``, into a fresh cache), keeping a copy of the plain export
the transformer optimizer is given, and counts the nodes of each file and of the graph an ONNX Runtime session
runs after its own rewrites (``ORT_ENABLE_ALL``, as pictrieve sets it; saved with ``optimized_model_filepath``).
Random weights (the default, ``open_clip:ViT-B-32/random``) give the same graph as real ones.

Run:  python benchmarks/onnx_node_counts.py --out benchmarks/results/open_clip_index/NAME.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="open_clip:ViT-B-32/random")
    parser.add_argument("--out", type=Path, help="write the counts here as JSON (else print them)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pictrieve-onnx-nodes-"))
    os.environ["PICTRIEVE_ONNX_CACHE"] = str(work / "cache")

    import onnx
    import onnxruntime as ort

    import pictrieve.tools.models.onnx_runtime as runtime
    from pictrieve.tools.models.embedders.factory import create_embedder

    optimize = runtime._optimize

    def keeping_the_plain_export(source: Path, target: Path, fusion: runtime.TransformerFusion) -> None:
        shutil.copy(source, work / "plain.onnx")
        optimize(source, target, fusion)

    runtime._optimize = keeping_the_plain_export
    embedder = create_embedder(args.embedder, device="cpu")
    if runtime.try_onnx_model(embedder.image_export()) is None:
        raise SystemExit("the export failed (see the warning above)")
    [fused] = [path for path in (work / "cache").glob("*.onnx") if "int8" not in path.name]
    counts: dict[str, object] = {"embedder": args.embedder, "onnxruntime": ort.__version__}
    for label, path in (("plain", work / "plain.onnx"), ("fused", fused)):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(work / f"{label}-session.onnx")
        options.intra_op_num_threads = 1
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        graph = onnx.load(str(path), load_external_data=False).graph
        session = onnx.load(str(work / f"{label}-session.onnx"), load_external_data=False).graph
        counts[label] = {"file_nodes": len(graph.node), "session_nodes": len(session.node)}
    shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(counts, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
