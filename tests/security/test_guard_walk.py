"""The serve guard's judging of a body (graphs/serving_http.py), as the reviewer of issue 38 found it:

- it ran on the event loop: a 12 MB body of ``[0,0,...]`` took 9.75 s to walk and a ``GET /ok`` sent meanwhile
  waited 8.75 s. Now the body is judged in a worker thread, and one past :data:`MAX_VALUES` values is refused
  from its commas before anything is parsed;
- its text bound was per string: a resume of 15,000 answers of 2,000 characters (30 MB) passed, and PlugIR made
  one 30-million-character answer of it. Now a run's text is bounded in all, and PlugIR reads only a text (or
  a mapping of texts) within the bound as a reply.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from helpers.serve import guarded


def test_a_body_being_judged_never_holds_up_another_request(monkeypatch):
    """While one body is being judged (held here until the test lets it go), a ``GET`` on the same server is
    answered: the judging runs off the event loop. Deterministic: no timing but a generous client timeout."""
    from pictrieve.graphs import serving_http

    entered, release = threading.Event(), threading.Event()
    judged = serving_http.judged_body

    def held(body: bytes):
        entered.set()
        release.wait(60)
        return judged(body)

    monkeypatch.setattr(serving_http, "judged_body", held)
    with guarded("127.0.0.1", token="", origins=()) as (url, _):
        posted: dict = {}
        poster = threading.Thread(target=lambda: posted.setdefault(
            "answer", httpx.post(url + "/runs/wait", content=b"[" + b"0," * 1000 + b"0]", timeout=90, trust_env=False)))
        poster.start()
        try:
            assert entered.wait(30), "the body was never judged"
            assert httpx.get(url + "/ok", timeout=10, trust_env=False).status_code == 200
            assert "answer" not in posted  # the POST is still being judged meanwhile
        finally:
            release.set()
            poster.join(90)
    assert posted["answer"].status_code == 200


def test_a_body_of_more_values_than_the_bound_is_refused_before_it_is_parsed(monkeypatch):
    """The reviewer's 12 MB of ``[0,0,...]`` (6 million values): refused from its commas; orjson never sees it."""
    import orjson

    from pictrieve.graphs import serving_http

    parsed = []
    monkeypatch.setattr(orjson, "loads", lambda body, _loads=orjson.loads: parsed.append(len(body)) or _loads(body))
    many = b"[" + b"0," * (6 * 2**20) + b"0]"
    with guarded("127.0.0.1", token="", origins=()) as (url, _):
        answer = httpx.post(url + "/runs/wait", content=many, timeout=90, trust_env=False)
        assert answer.status_code == 413 and "values" in answer.json()["detail"], answer.text[:300]
        assert parsed == []
        at_bound = b"[" + b"0," * serving_http.MAX_VALUES + b"0]"
        assert httpx.post(url + "/runs/wait", content=at_bound, timeout=90, trust_env=False).status_code == 200


def _resume(value) -> bytes:
    return json.dumps({"assistant_id": "plugir", "command": {"resume": value}}).encode()


@pytest.mark.parametrize("shape", ["list", "answer list", "many keys", "split over parts", "batch"])
def test_a_runs_text_is_bounded_in_all_not_only_per_string(shape):
    """Every string here is within MAX_TEXT; together they are far past what a run may carry."""
    from pictrieve.agents.settings import MAX_TEXT
    from pictrieve.graphs.serving_http import RUN_TEXT_FACTOR, judged_body

    answer, many = "a" * MAX_TEXT, 15_000 if shape in ("list", "answer list") else RUN_TEXT_FACTOR + 1
    body = {
        "list": lambda: _resume([answer] * many),
        "answer list": lambda: _resume({"answer": [answer] * many}),
        "many keys": lambda: _resume({f"{i:04d}" + answer[4:]: 1 for i in range(many)}),
        "split over parts": lambda: json.dumps({"assistant_id": "s", "input": {f"q{i}": answer for i in range(6)},
                                                "context": {"prompt_prefix": answer}, "command": {"resume": answer},
                                                "config": {"tags": [answer] * 4}}).encode(),
        "batch": lambda: json.dumps([{"assistant_id": "s", "input": {"query": "a"},
                                      "context": {"x": [answer] * many}}]).encode(),
    }[shape]()
    refused = judged_body(body)
    assert refused is not None and refused[0] == 413 and "in all" in refused[1], refused


def test_what_a_run_may_carry_still_passes():
    """A full-length query, description, answer and context setting, a hundred result ids in a NEEDLE resume,
    and a batch of full runs (each counted on its own): all pass."""
    from pictrieve.agents.settings import MAX_TEXT
    from pictrieve.graphs.serving_http import judged_body

    full = "a" * MAX_TEXT
    run = {"assistant_id": "s", "input": {"query": full, "description": full, "image": "A" * 100_000},
           "context": {"prompt_prefix": full}, "command": {"resume": {"answer": full}}}
    assert judged_body(json.dumps(run).encode()) is None
    assert judged_body(_resume({"irrelevant": [f"{i:064x}" for i in range(100)]})) is None
    assert judged_body(json.dumps([run] * 20).encode()) is None


@pytest.mark.parametrize("reply", [["a" * 2000] * 3, {"answer": ["a" * 2000] * 3}, "a" * 2001, {"answer": "a" * 2001},
                                   {"found": ["1"] * 3}, {"answer": {"nested": "text"}}])
def test_plugir_asks_again_for_a_reply_that_is_not_a_text_within_the_bound(reply):
    """A resume value is read as a reply only when it is a text (or a mapping of texts) within MAX_TEXT:
    anything else is asked again with a line saying what a reply can be, never turned into one long answer."""
    from pictrieve.agents.plugir.replies import parse_reply
    from pictrieve.agents.settings import MAX_TEXT

    shown = [{"id": "a", "path": "", "score": 1.0, "rank": 1}]
    parsed = parse_reply(reply, shown)
    assert set(parsed) == {"refused"} and f"at most {MAX_TEXT} characters" in parsed["refused"], parsed


@pytest.mark.parametrize("reply,parsed", [("a" * 2000, {"answer": "a" * 2000}), ({"answer": "red"}, {"answer": "red"}),
                                          (3, {"answer": "3"}), ({"found": 1}, "a"), (None, {"answer": "unknown"}),
                                          ({"stop": True}, {"stop": True})])
def test_plugir_reads_a_reply_within_the_bound(reply, parsed):
    from pictrieve.agents.plugir.replies import parse_reply

    got = parse_reply(reply, [{"id": "a", "path": "", "score": 1.0, "rank": 1}])
    assert (got["found"].id if "found" in got else got) == parsed
