"""The load script (benchmarks/load_search.py) against the real servers, briefly: `chroma run` holding a tiny
gallery, `pictrieve ui` and `langgraph dev` over it, a few concurrent clients for a few seconds. No timing
thresholds: every request must come back well-formed, and a refused request must be counted as an error."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from helpers import free_port, make_photo
from helpers.benchmark_scripts import benchmark_script

load_search = benchmark_script("load_search", "loopback_servers")

pytestmark = pytest.mark.server

K = 4
PHOTOS = 6
QUERIES = ["a red square", "a dog on the grass", "two people at a table", "a blue car", "snow", "a kite"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_clip_name):
    """A Chroma server with six photos indexed by the tiny random CLIP, and both targets over it."""
    root = tmp_path_factory.mktemp("load")
    for i in range(PHOTOS):
        make_photo(root / "photos" / f"img{i}.png", seed=i)
    with ExitStack() as stack:
        yield load_search.serve(stack, root, chroma_data=root / "chroma", photos=root / "photos",
                                embedder=tiny_clip_name)


def test_concurrent_searches_all_come_back_well_formed(served):
    results = load_search.run_all(served.targets, QUERIES, [3], seconds=2, k=K, expected_hits=K,
                                  logs={s.name: s.log for s in served.started})
    assert [(r.target, r.clients) for r in results] == [("ui", 3), ("langgraph", 3)]
    for result in results:
        summary = result.summary()
        assert summary["errors"] == 0, summary["first_error"]
        assert summary["requests"] == len(result.samples) >= 3
        assert {s.client for s in result.samples} == {0, 1, 2}  # every client got answers
        assert all(s.status == 200 and s.hits == K and s.error is None for s in result.samples)
        assert {s.query for s in result.samples} <= set(QUERIES)
        assert result.probes_ms  # the server answered the probe while under load
    langgraph = results[1]
    assert len(langgraph.server_runs) >= len(langgraph.samples)  # the server log's runs were read


def test_refused_requests_are_counted_as_errors(served):
    """An empty query is refused by both servers (ui: HTTP 400; LangGraph: a failed run): every request
    must count as an error, with what the server said."""
    results = load_search.run_all(served.targets, ["", " "], [2], seconds=1, k=K, expected_hits=K)
    for result in results:
        summary = result.summary()
        assert summary["requests"] == summary["errors"] == len(result.samples) >= 2
        assert all(s.error for s in result.samples)
    assert all(s.status == 400 for s in results[0].samples), [(s.status, s.error) for s in results[0].samples]
    assert "type what you are looking for" in results[0].summary()["first_error"]


@pytest.mark.parametrize("status, body, problem", [
    (500, {"error": "internal error (RuntimeError)"}, "HTTP 500: internal error"),
    (200, {"__error__": {"error": "QueryError", "message": "empty query"}}, "no hits list"),
    (200, {"hits": []}, "0 hits, expected 2"),
    (200, {"hits": [{"id": "a", "path": "/a", "rank": 1, "score": 0.5}, {"id": "b", "path": "/b", "rank": 3,
                                                                           "score": 0.4}]}, "hit 2 has rank 3"),
    (200, {"hits": [{"id": "a", "path": "/a", "rank": 1, "score": 0.5}, {"id": "b", "path": "/b", "rank": 2,
                                                                           "score": 0.6}]}, "scores above"),
    (200, {"hits": [{"id": "a", "path": "/a", "rank": 1, "score": 0.5}, {"id": "a", "path": "/a", "rank": 2,
                                                                           "score": 0.5}]}, "same image twice"),
    (200, {"hits": [{"id": "a", "rank": 1, "score": 0.5}, {"id": "b", "path": "/b", "rank": 2, "score": 0.4}]},
     "no id or path"),
    (200, "<html>", "no hits list"),
])
def test_a_malformed_answer_is_an_error(status, body, problem):
    error, _ = load_search.check_response(status, body, expected_hits=2)
    assert error is not None and problem in error


def test_a_well_formed_answer_is_not_an_error():
    body = {"hits": [{"id": "a", "path": "/a", "rank": 1, "score": 0.5}, {"id": "b", "path": "/b", "rank": 2,
                                                                         "score": 0.5}]}
    assert load_search.check_response(200, body, expected_hits=2) == (None, 2)


def test_an_unreachable_server_counts_as_errors():
    """No server on the port: every request (and probe) fails to connect, and each is counted."""
    import asyncio

    result = asyncio.run(load_search.run_load("ui", f"http://127.0.0.1:{free_port()}", QUERIES, clients=2,
                                              seconds=0.5, k=K, expected_hits=K))
    summary = result.summary()
    assert summary["requests"] == summary["errors"] == len(result.samples) >= 2
    assert all(s.status == 0 and "ConnectError" in s.error for s in result.samples)


def test_a_hybrid_answer_may_place_a_word_match_above_a_higher_cosine():
    """A text search is hybrid by default: a photo its words matched is placed by the fused ranking and keeps its
    cosine as its score, so a lower score may come first; the hits the vectors alone ranked keep their order."""
    hits = [{"id": "w", "path": "/w", "rank": 1, "score": 0.25, "keyword_match": True},
            {"id": "a", "path": "/a", "rank": 2, "score": 0.47},
            {"id": "x", "path": "/x", "rank": 3, "score": -0.16, "keyword_match": True},
            {"id": "b", "path": "/b", "rank": 4, "score": 0.44}]
    assert load_search.check_response(200, {"hits": hits}, expected_hits=4) == (None, 4)
    hits[3]["score"] = 0.48  # above the vector-ranked hit before it
    assert load_search.check_response(200, {"hits": hits}, expected_hits=4) == ("hit 4 scores above hit 2", 4)
