"""Time to first result of ``search_images`` over stdio with the official MCP Python client.

- **cold**: from starting a fresh ``pictrieve mcp`` process (the client starts it, as an agent app does) to
  the first ``search_images`` result, split into "ready" (the process answers ``initialize``: Python, the SDK,
  the gallery opened) and "first search" (the embedder loaded, the query embedded, the gallery searched,
  ``k`` thumbnails made); repeated ``--runs`` times, each a new process;
- **warm**: ``--calls`` more ``search_images`` calls in one session, each a different query (first
  captions of photos of the folder): p50 and p90.

The gallery is the folder indexed with the offline default embedder (cached under the pictrieve cache, as
the evaluations do). The machine's load average is recorded before and after.

Run:  OMP_NUM_THREADS=1 python benchmarks/mcp_latency.py ../shared/datasets/flickr8k-dev \
          --json benchmarks/results/mcp/latency-flickr8k-dev.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path


async def one_server(gallery: str, queries: list[str], k: int, warm_calls: int) -> dict:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "pictrieve.cli.main", "mcp", "--gallery", gallery],
                                   env=dict(os.environ))
    started = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=600)) as session:
            await session.initialize()
            ready = time.perf_counter()
            first = await session.call_tool("search_images", {"query": queries[0], "k": k})
            done = time.perf_counter()
            assert not first.isError and sum(block.type == "image" for block in first.content) == k, first.content
            warm = []
            for query in queries[1 : 1 + warm_calls]:
                before = time.perf_counter()
                result = await session.call_tool("search_images", {"query": query, "k": k})
                warm.append(time.perf_counter() - before)
                assert not result.isError, result.content
    return {"ready_s": ready - started, "first_search_s": done - ready, "cold_s": done - started, "warm_s": warm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a captioned folder (captions.jsonl), indexed with the offline embedder")
    parser.add_argument("--runs", type=int, default=3, help="fresh server processes (cold starts)")
    parser.add_argument("--calls", type=int, default=20, help="warm calls in the first server's session")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery

    folder = CaptionedFolder.load(args.folder)
    gallery = eval_gallery(folder, progress=True)
    captions = [caps[0] for caps in folder.captions.values() if caps]
    random.Random(0).shuffle(captions)
    load_before = os.getloadavg()
    runs = [asyncio.run(one_server(gallery.location, captions[run * 50:], args.k, args.calls if run == 0 else 0))
            for run in range(args.runs)]
    load_after = os.getloadavg()
    warm = runs[0]["warm_s"]
    cold = [r["cold_s"] for r in runs]
    summary = {
        "command": "OMP_NUM_THREADS=1 python benchmarks/mcp_latency.py " + " ".join(sys.argv[1:]),
        "gallery": {"folder": str(args.folder), "images": gallery.count(), "embedder": gallery.embedder_name},
        "k": args.k,
        "cold_s": {"each": [round(x, 2) for x in cold], "median": round(statistics.median(cold), 2)},
        "cold_ready_s": [round(r["ready_s"], 2) for r in runs],
        "cold_first_search_s": [round(r["first_search_s"], 2) for r in runs],
        "warm_s": {"calls": len(warm), "p50": round(statistics.median(warm), 3),
                   "p90": round(sorted(warm)[int(0.9 * (len(warm) - 1))], 3), "each": [round(x, 3) for x in warm]},
        "machine": {"cpus": os.cpu_count(), "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                    "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
                    "load_avg_1_5_15_after": [round(x, 2) for x in load_after]},
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
