"""`pictrieve serve` attacked as a determined caller would (issue 38): the real command over the real
`langgraph dev` on 127.0.0.1, each attack of the issue's Why kept here so a change that reopens one fails.

- **State writes on what the server decodes** (Why 1): every spelling of ``command`` and ``supersteps`` (plain,
  ``\\u`` escapes, a repeated key whose last value writes, nested in a batch, a gzip body) on every route that
  takes a run or a thread's state is refused, and the thread's state is left as its graph wrote it.
- **Bounded text** (Why 4): a 10 MiB query, question or resume answer is refused before the run is stored, the
  server's memory left where it was; 2,000 characters (the page's bound) pass, 2,001 do not.
- **Bounded bodies** (Why 6): the store's ``PUT /store/items`` is inside the 64 MiB body cap too.
"""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from helpers.serve import sdk_client, served_gallery

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_clip_name):
    with served_gallery(tmp_path_factory.mktemp("serve-attacks"), tiny_clip_name) as server:
        yield server


@pytest.fixture(scope="module")
def thread(served):
    """A thread with one finished search on it (the attacks of Why 1 went for such a thread)."""
    client = sdk_client(served["url"])
    thread_id = client.threads.create()["thread_id"]
    client.runs.wait(thread_id, "search", input={"query": "a red square"}, context={"k": 1})
    return thread_id


class _Raw(httpx.Client):
    """An HTTP client that sends each path exactly as written (``//threads`` too: a relative ``//x`` would be
    read as a host name), against the served URL."""

    def __init__(self, url: str) -> None:
        super().__init__(timeout=120, trust_env=False)
        self.url = url

    def request(self, method: str, path: str, **kwargs):  # type: ignore[override]
        return super().request(method, self.url + path, **kwargs)


def _http(url: str) -> httpx.Client:
    return _Raw(url)


# Each spelling says the same to a JSON parser: a command that writes the state. ``{image}`` is a photo outside
# --allow-dir (the graph would read it unchecked once it is in the state).
COMMAND_SPELLINGS = {
    "plain": '"command": {"update": {"image": "{image}"}, "goto": "search"}',
    "escaped first letter": '"\\u0063ommand": {"update": {"image": "{image}"}, "goto": "search"}',
    "escaped middle": '"c\\u006fmm\\u0061nd": {"\\u0075pdate": {"image": "{image}"}}',
    "every letter escaped": '"\\u0063\\u006f\\u006d\\u006d\\u0061\\u006e\\u0064": {"goto": "search"}',
    "repeated key, the last writes": '"command": null, "command": {"goto": "search"}',
    "goto alone": '"command": {"resume": null, "goto": ["search"]}',
}
SUPERSTEPS_SPELLINGS = {
    "plain": '"supersteps": [{"updates": [{"values": {"image": "{image}"}, "as_node": "served_input"}]}]',
    "escaped": '"\\u0073upersteps": [{"updates": [{"values": {"image": "{image}"}, "as_node": "served_input"}]}]',
    "repeated key, the last writes": '"supersteps": [], "supersteps": [{"updates": [{"values": {"image": "{image}"}}]}]',
}
RUN_ROUTES = ["/threads/{thread}/runs", "/threads/{thread}/runs/wait", "/threads/{thread}/runs/stream", "/runs",
              "/runs/wait", "/runs/stream", "/runs/crons", "/threads/{thread}/runs/crons",
              "/threads/{thread}/runs/wait/", "//threads/{thread}/runs/wait"]


def _body(member: str, image: str, *, route: str = "") -> str:
    run = "{" + '"assistant_id": "search", ' + member.replace("{image}", image) + \
        (', "schedule": "* * * * *"' if "crons" in route else "") + "}"
    return run


def _assert_refused(answer: httpx.Response, what: str) -> None:
    assert answer.status_code == 403, (what, answer.status_code, answer.text[:300])
    assert "written by its own steps" in answer.json()["detail"], what


@pytest.mark.parametrize("spelling", COMMAND_SPELLINGS)
@pytest.mark.parametrize("route", RUN_ROUTES)
def test_every_spelling_of_a_command_that_writes_state_is_refused_on_every_run_route(served, thread, route, spelling):
    outside = str(served["root"] / "photos" / "img1.png")
    body = _body(COMMAND_SPELLINGS[spelling], outside, route=route)
    json.loads(body)  # the body is JSON a parser reads as a state write
    with _http(served["url"]) as http:
        answer = http.post(route.format(thread=thread), content=body, headers={"content-type": "application/json"})
    _assert_refused(answer, f"{route} {spelling}")


@pytest.mark.parametrize("spelling", COMMAND_SPELLINGS)
def test_a_batch_with_one_writing_run_among_plain_ones_is_refused(served, spelling):
    outside = str(served["root"] / "photos" / "img1.png")
    plain = '{"assistant_id": "search", "input": {"query": "a"}}'
    body = f'[{plain}, {plain}, {_body(COMMAND_SPELLINGS[spelling], outside)}]'
    with _http(served["url"]) as http:
        _assert_refused(http.post("/runs/batch", content=body, headers={"content-type": "application/json"}),
                        spelling)


@pytest.mark.parametrize("spelling", SUPERSTEPS_SPELLINGS)
@pytest.mark.parametrize("route", ["/threads", "/threads/", "//threads"])
def test_every_spelling_of_supersteps_is_refused(served, route, spelling):
    outside = str(served["root"] / "photos" / "img1.png")
    body = "{" + SUPERSTEPS_SPELLINGS[spelling].replace("{image}", outside) + "}"
    before = len(sdk_client(served["url"]).threads.search(limit=1000))
    with _http(served["url"]) as http:
        _assert_refused(http.post(route, content=body, headers={"content-type": "application/json"}), spelling)
    assert len(sdk_client(served["url"]).threads.search(limit=1000)) == before


@pytest.mark.parametrize("route", ["/threads/{thread}/state", "/threads/{thread}/state/", "//threads/{thread}/state",
                                   "/threads/{thread}//state"])
def test_writing_a_threads_state_directly_is_refused_however_the_path_is_spelt(served, thread, route):
    outside = str(served["root"] / "photos" / "img1.png")
    with _http(served["url"]) as http:
        answer = http.post(route.format(thread=thread), json={"values": {"image": outside}, "as_node": "served_input"})
    _assert_refused(answer, route)


def test_a_gzip_body_the_server_would_not_decode_is_refused_not_passed_unjudged(served, thread):
    outside = str(served["root"] / "photos" / "img1.png")
    body = gzip.compress(_body(COMMAND_SPELLINGS["escaped first letter"], outside).encode())
    with _http(served["url"]) as http:
        answer = http.post(f"/threads/{thread}/runs/wait", content=body,
                           headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert answer.status_code == 415 and "gzip" in answer.json()["detail"]


def test_a_body_that_is_not_json_is_refused_by_the_guard(served):
    with _http(served["url"]) as http:
        answer = http.post("/runs/wait", content=b'{"assistant_id": "search", "\\u0063ommand": ',
                           headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "not JSON" in answer.json()["detail"]


def test_the_event_streaming_protocol_that_can_write_state_is_not_served(served, thread):
    """LangGraph's event-streaming ``input.respond`` folds ``update``/``goto`` into the resume: refused."""
    with _http(served["url"]) as http:
        answer = http.post(f"/threads/{thread}/commands", json={
            "id": 1, "method": "input.respond", "params": {"entries": [], "goto": "search"}})
    assert answer.status_code == 403 and "event-streaming" in answer.json()["detail"]


def test_after_every_attack_the_thread_holds_what_its_graph_wrote(served, thread):
    """Runs after the attacks of this module (module order): no image was put in the thread's state, and its
    query and history are what its one run wrote."""
    client = sdk_client(served["url"])
    values = client.threads.get_state(thread)["values"]
    assert values.get("image") is None and values.get("query") == "a red square"
    assert all(not (state["values"] or {}).get("image") for state in client.threads.get_history(thread, limit=100))


def test_a_resume_and_a_plain_run_still_pass_the_guard(served, thread):
    """What the guard lets through: a plain run, and a resume (the thread is not paused, so the server itself
    answers it; the guard does not refuse it)."""
    with _http(served["url"]) as http:
        plain = http.post(f"/threads/{thread}/runs/wait", json={"assistant_id": "search", "input": {"query": "a"},
                                                                "command": None, "context": {"k": 1}})
        assert plain.status_code == 200 and len(plain.json()["hits"]) == 1
        resume = http.post(f"/threads/{thread}/runs", json={"assistant_id": "search", "command": {"resume": "yes"}})
        assert resume.status_code != 403, resume.text[:300]


@pytest.mark.parametrize("method,path", [("POST", "/mcp"), ("GET", "/mcp"), ("POST", "/a2a/search"),
                                         ("GET", "/.well-known/agent-card.json")])
def test_langgraphs_own_mcp_and_a2a_doors_are_closed(served, method, path):
    """More doors into the same runs, with inputs of their own shape: off in the langgraph.json pictrieve writes."""
    with _http(served["url"]) as http:
        answer = http.request(method, path, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code in (404, 405), (path, answer.status_code, answer.text[:200])

