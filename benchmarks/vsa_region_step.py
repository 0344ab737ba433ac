"""The Vision Search Assistant's region step run after run in one process, as a served graph runs it.

    OMP_NUM_THREADS=1 python benchmarks/vsa_region_step.py PHOTO [--runs 3]

A served graph (``langgraph dev``, ``pictrieve serve``, the MCP tool, ``pictrieve eval vsa``) is built for
every run. Each run here builds a new graph with the detector and describer given by name (``ssd``,
``offline``), asks one question about PHOTO without a search, and reports the seconds of the regions and
describe nodes and how many times the SSD detector and the offline embedder were constructed so far.
Counts, not only time: on a shared machine the seconds move with the load.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("photo")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from langchain_core.runnables import RunnableLambda

    from pictrieve.graphs.vsa import build_vsa_graph
    from pictrieve.tools.models import object_detector
    from pictrieve.tools.models.embedders import factory

    made = {"ssd_detectors": 0, "embedders": 0}
    init = object_detector.ObjectDetector.__init__

    def counted_init(self, *a, **kw):
        made["ssd_detectors"] += 1
        init(self, *a, **kw)

    object_detector.ObjectDetector.__init__ = counted_init
    create = factory.EMBEDDERS.create

    def counted_create(name, **kw):
        made["embedders"] += 1
        return create(name, **kw)

    factory.EMBEDDERS.create = counted_create
    never = RunnableLambda(lambda m: (_ for _ in ()).throw(AssertionError("no chat model call expected")))
    for run in range(1, args.runs + 1):
        start = time.perf_counter()
        graph = build_vsa_graph(None, llm=never, detector="ssd", vlm="offline")
        out = graph.invoke({"image": args.photo, "question": "What animal is this?"},
                           context={"answerer": "extractive", "plan_with_llm": False, "correlate": False})
        timings = out["timings"]
        print(json.dumps({"run": run, "regions_s": timings.get("regions"), "describe_s": timings.get("describe"),
                          "wall_s": round(time.perf_counter() - start, 2), **made,
                          "descriptions": [r.get("description") for r in out["regions"]]}))


if __name__ == "__main__":
    main()
