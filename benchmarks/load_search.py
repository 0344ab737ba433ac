"""Many users at once: N concurrent clients doing text searches for T seconds against the served search.

Two targets, both over one gallery stored in a ``chroma run`` server:

- ``ui``: ``pictrieve ui`` (``POST /api/search`` with ``{"query", "k"}``, see :mod:`pictrieve.ui.app`);
- ``langgraph``: the ``search`` graph served by ``langgraph dev`` from the repository's langgraph.json
  (``POST /runs/wait``, a stateless run, what ``client.runs.wait(None, "search", ...)`` sends).

Each client is a coroutine on one event loop (``httpx.AsyncClient``, one connection each) that sends a
query, waits for the answer, checks it and sends the next, until the time is up; client ``i`` starts at
query ``i`` of the list and walks on, so the queries are varied and the same from run to run. A response
counts as an error unless it is HTTP 200 with a well-formed ``hits`` list (:func:`check_response`); an
exception (refused connection, timeout) is an error too. Beside the load, a probe asks the server for
something cheap (the page for ``ui``, ``/ok`` for ``langgraph``) every half second: if a handler blocked
the server's event loop, the probe's latency would jump to a search's.

Loopback only. The script starts what it is not given and stops what it started: ``--chroma-data DIR``
starts ``chroma run`` on that folder (``--photos DIR`` indexes a folder into it first; unchanged photos
are skipped, so the folder is a cache between runs), ``--gallery URL`` uses a running one; ``pictrieve ui``
and ``langgraph dev`` are started over the gallery unless ``--ui-url`` / ``--langgraph-url`` name them.

Run (BENCHMARKS.md, "Many users at once"):

    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    python benchmarks/load_search.py --chroma-data /work/scale-bench/chroma-load \\
        --photos ../shared/datasets/flickr8k-dev --embedder offline \\
        --queries ../shared/datasets/flickr8k-dev/captions.jsonl --clients 1,16 --seconds 60 \\
        --out benchmarks/results/scale/load

The exit status is 1 when any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import random
import re
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np

from loopback_servers import Server, start_chroma, start_langgraph, start_ui  # beside this script, on its sys.path

log = logging.getLogger("load_search")

TARGETS = ("ui", "langgraph")
PROBE_EVERY_S = 0.5


# --- what is sent and what counts as a good answer --------------------------------------------------


def request_for(target: str, query: str, k: int) -> tuple[str, dict[str, Any]]:
    """The path and JSON body of one text search against ``target``."""
    if target == "ui":
        return "/api/search", {"query": query, "k": k}
    if target == "langgraph":
        return "/runs/wait", {"assistant_id": "search", "input": {"query": query}, "context": {"k": k}}
    raise ValueError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")


PROBE_PATH = {"ui": "/", "langgraph": "/ok"}


def check_response(status: int, body: Any, expected_hits: int) -> tuple[str | None, int]:
    """``(error, hits)`` for one answer: ``error`` is None for HTTP 200 with ``expected_hits`` hits, each with
    a string id and path, a float score, ranks 1, 2, ... and the scores of the hits the vectors alone ranked not
    increasing; else it says what is wrong. (A text search is hybrid by default: a hit the photo's words matched
    (``keyword_match``) is placed by the fused ranking and keeps its cosine as ``score``, so its score may be below
    a later hit's; among the others the fusion keeps the vector order.) Both targets answer ``{"hits": [...], ...}`` (a failed LangGraph run answers 200 with
    ``__error__`` instead)."""
    hits = body.get("hits") if isinstance(body, dict) else None
    count = len(hits) if isinstance(hits, list) else 0
    if status != 200:
        detail = body.get("error") or body.get("detail") if isinstance(body, dict) else None
        return f"HTTP {status}: {detail or str(body)[:200]}", count
    if not isinstance(hits, list):
        detail = body.get("__error__") if isinstance(body, dict) else None
        return f"no hits list in the answer: {str(detail or body)[:200]}", 0
    if count != expected_hits:
        return f"{count} hits, expected {expected_hits}", count
    for rank, hit in enumerate(hits, 1):
        if not isinstance(hit, dict) or not isinstance(hit.get("id"), str) or not isinstance(hit.get("path"), str):
            return f"hit {rank} has no id or path: {str(hit)[:200]}", count
        if hit.get("rank") != rank or not isinstance(hit.get("score"), float):
            return f"hit {rank} has rank {hit.get('rank')!r}, score {hit.get('score')!r}", count
    by_vector = [(rank, hit["score"]) for rank, hit in enumerate(hits, 1) if not hit.get("keyword_match")]
    for (above, higher), (rank, score) in zip(by_vector, by_vector[1:]):
        if score > higher + 1e-6:
            return f"hit {rank} scores above hit {above}", count
    if len({hit["id"] for hit in hits}) != count:
        return "the same image twice in one answer", count
    return None, count


# --- the load -------------------------------------------------------------------------------------


@dataclass
class Sample:
    """One request: who sent it, what, how long it took and what came back."""

    target: str
    clients: int
    client: int
    seq: int
    query: str
    start_s: float
    latency_ms: float
    status: int
    hits: int
    error: str | None


@dataclass
class LoadResult:
    target: str
    clients: int
    seconds: float
    samples: list[Sample]
    probes_ms: list[float] = field(default_factory=list)
    server_runs: list[dict[str, float]] = field(default_factory=list)
    """LangGraph only, from its log: each run's time in the server's queue and running the graph."""

    def summary(self) -> dict[str, Any]:
        latencies = np.asarray([s.latency_ms for s in self.samples]) if self.samples else np.zeros(1)
        ends = [s.start_s + s.latency_ms / 1000 for s in self.samples]
        elapsed = max(ends) if ends else self.seconds
        errors = [s for s in self.samples if s.error is not None]
        probes = np.asarray(self.probes_ms) if self.probes_ms else np.zeros(1)
        return {
            "target": self.target, "clients": self.clients, "requests": len(self.samples), "errors": len(errors),
            "first_error": errors[0].error if errors else None,
            "p50_ms": round(float(np.percentile(latencies, 50)), 1),
            "p95_ms": round(float(np.percentile(latencies, 95)), 1),
            "requests_per_s": round(len(self.samples) / elapsed, 2) if elapsed > 0 else 0.0,
            "probe_p50_ms": round(float(np.percentile(probes, 50)), 1),
            "probe_max_ms": round(float(probes.max()), 1),
            **({f"server_{key}_p50_ms": round(float(np.median([r[key] for r in self.server_runs])), 1)
                for key in ("queue_wait", "exec")} if self.server_runs else {}),
        }


async def run_load(target: str, url: str, queries: list[str], clients: int, seconds: float, k: int,
                   expected_hits: int, timeout_s: float = 120.0, min_each: int = 1) -> LoadResult:
    """``clients`` concurrent clients searching ``url`` for ``seconds`` (requests under way at the end
    finish and count), each making at least ``min_each`` requests however slow the server is (so a short
    run on a loaded machine still hears from every client); a probe measures how fast the server answers
    something cheap meanwhile."""
    samples: list[Sample] = []
    probes: list[float] = []
    started = time.perf_counter()
    deadline = started + seconds
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)

    async def client(number: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits, trust_env=False) as http:
            seq = 0
            while seq < min_each or time.perf_counter() < deadline:
                query = queries[(number + seq * clients) % len(queries)]
                t0 = time.perf_counter()
                status, hits, error = await search_once(http, target, query, k, expected_hits)
                t1 = time.perf_counter()
                samples.append(Sample(target, clients, number, seq, query, round(t0 - started, 4),
                                      round((t1 - t0) * 1000, 2), status, hits, error))
                seq += 1

    async def probe() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=timeout_s, trust_env=False) as http:
            asked = 0
            while asked == 0 or time.perf_counter() < deadline:  # one at least, however late the client started
                asked += 1
                t0 = time.perf_counter()
                try:
                    (await http.get(PROBE_PATH[target])).raise_for_status()
                    probes.append((time.perf_counter() - t0) * 1000)
                except httpx.HTTPError as exc:
                    samples.append(Sample(target, clients, -1, len(probes), "(probe)", round(t0 - started, 4),
                                          0.0, 0, 0, f"probe {type(exc).__name__}: {exc}"))
                await asyncio.sleep(PROBE_EVERY_S)

    await asyncio.gather(probe(), *(client(i) for i in range(clients)))
    return LoadResult(target, clients, seconds, samples, probes)


async def search_once(http: httpx.AsyncClient, target: str, query: str, k: int,
                      expected_hits: int) -> tuple[int, int, str | None]:
    """``(HTTP status, hits, error)`` of one search (status 0: no answer came)."""
    path, body = request_for(target, query, k)
    try:
        response = await http.post(path, json=body)
    except httpx.HTTPError as exc:
        return 0, 0, f"{type(exc).__name__}: {exc}"
    error, hits = check_response(response.status_code, _json(response), expected_hits)
    return response.status_code, hits, error


async def warm_up(target: str, url: str, query: str, k: int, expected_hits: int) -> tuple[float, str | None]:
    """One search, waited for up to 5 minutes (it builds the graph and loads the model in the server):
    its time and error."""
    async with httpx.AsyncClient(base_url=url, timeout=300, trust_env=False) as http:
        t0 = time.perf_counter()
        _, _, error = await search_once(http, target, query, k, expected_hits)
        return time.perf_counter() - t0, error


RUN_LOG = re.compile(r"Background run succeeded.*?run_exec_ms\W+(\d+).*?run_wait_time_ms\W+(\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def server_runs(log_text: str) -> list[dict[str, float]]:
    """The runs a ``langgraph dev`` log reports as done: how long each waited in the server's queue and
    how long the graph ran (its ``run_wait_time_ms`` and ``run_exec_ms``)."""
    found = (RUN_LOG.search(ANSI.sub("", line)) for line in log_text.splitlines())
    return [{"exec": float(m[1]), "queue_wait": float(m[2])} for m in found if m]


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


# --- queries and the gallery ----------------------------------------------------------------------


def read_queries(path: Path, seed: int = 0) -> list[str]:
    """Every caption of a ``captions.jsonl`` (or every line of a text file), shuffled with ``seed``."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".jsonl":
        queries = [caption for line in lines for caption in json.loads(line)["captions"]]
    else:
        queries = lines
    random.Random(seed).shuffle(queries)
    return queries


def index_photos(gallery_url: str, photos: Path, embedder: str | None) -> int:
    """Index ``photos`` into the server gallery (unchanged photos are skipped); the gallery's size."""
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(gallery_url, embedder)
    report = gallery.add(photos, progress=True)
    log.info("indexed %d, unchanged %d, failed %d", report.indexed, report.unchanged, len(report.failed))
    return gallery.count()


def gallery_size(gallery_url: str) -> int:
    from pictrieve.vectorstore.gallery import Gallery

    return Gallery.open(gallery_url, create=False).count()


# --- one run: every target at every client count --------------------------------------------------


def run_all(targets: dict[str, str], queries: list[str], client_counts: list[int], seconds: float, k: int,
            expected_hits: int, logs: dict[str, Path] | None = None) -> list[LoadResult]:
    """Every target at every client count, one after the other, after one warm-up request each (which
    builds the graph and loads the model in the server). ``logs``: the started LangGraph server's log,
    whose run timings are added to its results."""
    results = []
    for target, url in targets.items():
        took, error = asyncio.run(warm_up(target, url, queries[0], k, expected_hits))
        log.info("%s warm-up: %.1f s%s", target, took, f", error: {error}" if error else "")
        for clients in client_counts:
            log_file = (logs or {}).get(target) if target == "langgraph" else None
            seen = log_file.stat().st_size if log_file else 0
            result = asyncio.run(run_load(target, url, queries, clients, seconds, k, expected_hits))
            if log_file:
                result.server_runs = read_server_runs(log_file, seen, sum(s.error is None for s in result.samples))
            log.info("%s", result.summary())
            results.append(result)
    return results


def read_server_runs(log_file: Path, offset: int, expected: int, wait_s: float = 60.0) -> list[dict[str, float]]:
    """The runs logged after ``offset``, waiting up to ``wait_s`` for the ``expected`` ones (the server
    may write a run's line just after its answer went out)."""
    deadline = time.monotonic() + wait_s
    while True:
        with open(log_file, encoding="utf-8", errors="replace") as handle:
            handle.seek(offset)
            runs = server_runs(handle.read())
        if len(runs) >= expected or time.monotonic() > deadline:
            return runs
        time.sleep(0.2)


@dataclass
class Servers:
    """What the search targets are (and which servers this process started, to stop them)."""

    gallery: str
    targets: dict[str, str]
    started: list[Server]


def serve(stack: ExitStack, workdir: Path, *, gallery: str | None = None, chroma_data: Path | None = None,
          photos: Path | None = None, embedder: str | None = None, targets: tuple[str, ...] = TARGETS,
          urls: dict[str, str] | None = None) -> Servers:
    """Start what is needed (stopped when ``stack`` closes): a Chroma server unless ``gallery`` is
    given, the photos indexed into it, and each target not in ``urls``."""
    started: list[Server] = []

    def keep(server: Server) -> Server:
        started.append(server)
        stack.callback(server.stop)
        return server

    if gallery is None:
        if chroma_data is None:
            raise ValueError("give a gallery URL or a folder for a Chroma server's data")
        gallery = keep(start_chroma(chroma_data, workdir)).url
    if photos is not None:
        index_photos(gallery, photos, embedder)
    starters = {"ui": start_ui, "langgraph": start_langgraph}
    chosen = {name: (urls or {}).get(name) or keep(starters[name](gallery, workdir)).url for name in targets}
    return Servers(gallery, chosen, started)


def write_results(results: list[LoadResult], out: Path, about: dict[str, Any]) -> None:
    """Per-request rows in ``requests.csv``, the summaries (and ``about``: the run's settings) in
    ``summary.json``."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "requests.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Sample.__dataclass_fields__))
        writer.writeheader()
        for result in results:
            writer.writerows(asdict(s) for s in result.samples)
    (out / "summary.json").write_text(json.dumps({**about, "results": [r.summary() for r in results]}, indent=2))


def _table(results: list[LoadResult]) -> Iterator[str]:
    yield ("| target | clients | requests | errors | p50 ms | p95 ms | requests/s | probe p50 / max ms "
           "| server queue wait / graph run p50 ms |")
    yield "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    for r in results:
        s = r.summary()
        server = (f"{s['server_queue_wait_p50_ms']} / {s['server_exec_p50_ms']}" if "server_exec_p50_ms" in s
                  else "")
        yield (f"| {s['target']} | {s['clients']} | {s['requests']} | {s['errors']} | {s['p50_ms']} | {s['p95_ms']} "
               f"| {s['requests_per_s']} | {s['probe_p50_ms']} / {s['probe_max_ms']} | {server} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--gallery", help="a running Chroma server gallery, http://127.0.0.1:PORT")
    where.add_argument("--chroma-data", type=Path, help="start `chroma run` on this folder (kept between runs)")
    parser.add_argument("--photos", type=Path, help="index this folder into the gallery first")
    parser.add_argument("--embedder", default=None, help="embedder for --photos (default: the gallery's)")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--ui-url", help="a running `pictrieve ui` (else one is started)")
    parser.add_argument("--langgraph-url", help="a running `langgraph dev` (else one is started)")
    parser.add_argument("--queries", type=Path, required=True, help="captions.jsonl, or one query a line")
    parser.add_argument("--clients", default="1,16", help="client counts, one run each (default 1,16)")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--out", type=Path, help="write requests.csv and summary.json here")
    parser.add_argument("--logs", type=Path, help="keep the started servers' logs (and state) here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    targets = tuple(t for t in args.targets.split(",") if t)
    if unknown := set(targets) - set(TARGETS):
        parser.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    queries = read_queries(args.queries)
    with tempfile.TemporaryDirectory(prefix="load-search-") as scratch, ExitStack() as stack:  # servers stop first
        workdir = args.logs or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        servers = serve(stack, workdir, gallery=args.gallery, chroma_data=args.chroma_data,
                        photos=args.photos, embedder=args.embedder, targets=targets,
                        urls={"ui": args.ui_url, "langgraph": args.langgraph_url})
        size = gallery_size(servers.gallery)
        results = run_all(servers.targets, queries, [int(c) for c in args.clients.split(",")], args.seconds,
                          args.k, min(args.k, size), {s.name: s.log for s in servers.started})
    print("\n".join(_table(results)))
    if args.out:
        write_results(results, args.out, {"gallery_size": size, "queries": len(queries), "k": args.k,
                                          "seconds": args.seconds, "argv": sys.argv[1:]})
    return 1 if any(r.summary()["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
