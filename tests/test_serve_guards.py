"""`pictrieve serve` trusts only its operator (issue 27): the real command, serving the real `langgraph dev`
on 127.0.0.1, attacked as a web page, a DNS-rebinding page and a caller would.

- A page on another loopback port can neither read (``fetch``) nor start work (a form post); a page on an
  origin the operator listed with ``--cors-origin`` can.
- ``Host: evil.example`` is refused, on every loopback spelling of the bound address.
- A run's ``configurable`` cannot choose a base URL, a gallery or a folder: a canary listener that a run
  names as its endpoint or gallery receives no connection (and so no key).
- Image inputs follow the MCP rule: ids and data always, paths only inside ``--allow-dir``.
- ``k`` is capped and a wrongly typed input is one line.
- With a token, a request without it is refused; beyond loopback, no token: the command refuses to start.
- SIGTERM stops `langgraph dev` with it: the port closes and the temporary folder is gone.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from helpers import has_ipv6_loopback, make_photo
from helpers.canary import Canary
from helpers.serve import TOKEN, guarded, sdk_client, served_gallery, start_serve, stop_group
from helpers.serve import serve_env as _env
from helpers.web_page import browser, page  # noqa: F401  (fixtures)

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_clip_name):
    """`pictrieve serve` over a tiny gallery (helpers/serve.py: ``served_gallery``)."""
    with served_gallery(tmp_path_factory.mktemp("serve-guards"), tiny_clip_name) as server:
        yield server


_client = sdk_client


def _thread_count(url: str) -> int:
    return len(_client(url).threads.search(limit=1000))


# --- browsers ----------------------------------------------------------------------------------------------


@pytest.mark.browser
def test_a_page_on_another_loopback_port_can_neither_read_nor_start_work(served, page):
    """fetch() of /runs/wait fails (no CORS grant), and neither it nor a no-cors fetch nor a plain HTML form
    post to /threads creates anything on the server."""
    url = served["url"]
    before = _thread_count(url)
    page.goto(served["evil"] + "/index.html")
    read = page.evaluate("""async (url) => {
        try {
            const r = await fetch(url + '/runs/wait', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                  body: JSON.stringify({assistant_id: 'search', input: {query: 'a'}})});
            return 'read: ' + (await r.text());
        } catch (e) { return 'refused: ' + e.name; }
    }""", url)
    assert read == "refused: TypeError"
    page.evaluate("""async (url) => {
        await fetch(url + '/threads', {method: 'POST', mode: 'no-cors', body: '{"metadata": {"via": "no-cors"}}'})
            .catch(() => null);
    }""", url)
    page.set_content(f"""<iframe name="sink"></iframe>
        <form id="f" method="POST" action="{url}/threads" enctype="text/plain" target="sink">
        <input name='{{"metadata": {{"via": "form", "x": "' value='"}}}}'></form>""")
    with page.expect_response(lambda r: r.url.startswith(url)) as answered:
        page.evaluate("document.getElementById('f').submit()")
    assert answered.value.status == 403
    assert _thread_count(url) == before


@pytest.mark.browser
def test_a_page_on_an_origin_the_operator_listed_may_call_the_server(served, page):
    page.goto(served["listed"] + "/index.html")
    hits = page.evaluate("""async (url) => {
        const r = await fetch(url + '/runs/wait', {method: 'POST', headers: {'Content-Type': 'application/json'},
                              body: JSON.stringify({assistant_id: 'search', input: {query: 'a'}, context: {k: 2}})});
        return (await r.json()).hits.length;
    }""", served["url"])
    assert hits == 2


def test_cors_grants_no_wildcard_and_no_private_network_access(served):
    url = served["url"]
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Private-Network": "true"}
    refused = httpx.options(f"{url}/runs/wait", headers={**preflight, "Origin": served["evil"]})
    assert refused.status_code == 403
    assert not any(h.lower().startswith("access-control-") for h in refused.headers)
    listed = httpx.options(f"{url}/runs/wait", headers={**preflight, "Origin": served["listed"]})
    assert listed.headers["access-control-allow-origin"] == served["listed"]
    plain = httpx.get(f"{url}/info")  # a program without Origin: no CORS headers at all, least of all '*'
    assert plain.status_code == 200
    assert not any(h.lower().startswith("access-control-") for h in plain.headers)


# --- Host ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil"])
def test_a_request_for_another_host_name_is_refused(served, host):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refused before any route."""
    answer = httpx.get(f"{served['url']}/assistants/search", headers={"Host": host}, timeout=60)
    assert answer.status_code == 403 and "search" not in answer.text


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "LOCALHOST", "127.0.0.1:{port}", "[::1]:{port}"])
def test_local_host_names_are_answered(served, host):
    port = served["url"].rsplit(":", 1)[1]
    assert httpx.get(f"{served['url']}/ok", headers={"Host": host.format(port=port)}, timeout=60).status_code == 200


@pytest.mark.parametrize("bound", ["127.0.0.2", "localhost", "::1"])
def test_every_loopback_spelling_refuses_a_foreign_host_and_origin(bound):
    """The guard decides on the address a connection reached, so each spelling of --host is covered."""
    if bound == "::1" and not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    with guarded(bound, token="", origins=()) as (url, port):
        assert httpx.get(url, headers={"Host": "evil.example"}).status_code == 403
        assert httpx.get(url, headers={"Host": f"evil.example:{port}"}).status_code == 403
        assert httpx.get(url, headers={"Origin": f"http://127.0.0.1:{port + 1}"}).status_code == 403
        answered = httpx.get(url)
        assert answered.status_code == 200 and "access-control-allow-origin" not in answered.headers


@pytest.mark.parametrize("given,status", [
    (None, 401), ("Bearer", 401), ("Bearer abc", 401), (f"Bearer {TOKEN[:-1]}", 401), (f"Bearer {TOKEN}x", 401),
    (f"Basic {TOKEN}", 401), (f"Bearer {TOKEN}", 200), (f"bearer {TOKEN}", 200),
])
def test_the_token_is_compared_whole(given, status):
    with guarded("127.0.0.1", token=TOKEN, origins=()) as (url, _):
        assert httpx.get(url, headers={"Authorization": given} if given else {}).status_code == status


# --- what a run may choose -------------------------------------------------------------------------------


CALLER_SETTINGS = [
    ("search", {"llm": "openai:gpt-4o-mini", "base_url": "{canary}/v1"}, "base_url"),
    ("plugir", {"llm": "openai:gpt-4o-mini", "base_url": "{canary}/v1"}, "base_url"),
    ("vsa", {"vlm": "openai:gpt-4o-mini", "vlm_base_url": "{canary}/v1"}, "vlm_base_url"),
    ("search", {"gallery": "{canary}"}, "gallery"),
    ("search", {"gallery": "../.."}, "gallery"),
    ("search", {"gallery": "/etc"}, "gallery"),
    ("vsa", {"search": "local:/etc"}, "search"),
    ("visret", {"visualizer": "exemplar:/etc"}, "visualizer"),
    ("search", {"llm": "openai:gpt-4o"}, "llm"),
    ("qc2", {"qc2_model": "/etc"}, "qc2_model"),
]


@pytest.mark.parametrize("graph,configurable,refused", CALLER_SETTINGS)
def test_a_run_cannot_choose_where_the_server_reaches_or_what_it_reads(served, graph, configurable, refused):
    """Each setting is refused in one line naming it, and the canary the run named hears nothing: no
    connection, so no Authorization header with the operator's key."""
    client = _client(served["url"])
    with Canary() as canary:
        chosen = {key: value.format(canary=canary.url) for key, value in configurable.items()}
        thread = client.threads.create()
        run = client.runs.create(thread["thread_id"], graph, input={"query": "a", "description": "a", "question": "a"},
                                 config={"configurable": chosen})
        error = client.runs.join(thread["thread_id"], run["run_id"])["__error__"]
        time.sleep(0.5)  # anything the server would have sent has arrived by now
    assert error["error"] == "ServingConfigError" and f"configurable.{refused}" in error["message"]
    assert "\n" not in error["message"] and "--" in error["message"]  # says how the operator allows it
    assert canary.connections == 0 and canary.requests == []
    assert not (Path("/etc") / "chroma.sqlite3").exists()


def test_an_assistant_cannot_choose_them_either(served):
    client = _client(served["url"])
    with Canary() as canary:
        assistant = client.assistants.create("search", config={"configurable": {"gallery": canary.url}})
        with pytest.raises(Exception, match="configurable.gallery"):
            client.runs.wait(None, assistant["assistant_id"], input={"query": "a"})
    assert canary.connections == 0


def test_a_run_may_choose_what_the_operator_allowed(served):
    client = _client(served["url"])
    result = client.runs.wait(None, "search", input={"query": "a"}, config={"configurable": {"llm": "offline"}})
    assert len(result["hits"]) == 4  # the whole tiny gallery (k defaults to 10)
    thread = client.threads.create()
    run = client.runs.create(thread["thread_id"], "search", input={"query": "a"},
                             config={"configurable": {"llm": "openai:gpt-4o"}})
    error = client.runs.join(thread["thread_id"], run["run_id"])["__error__"]
    assert "allowed: offline, openai:gpt-4o-mini" in error["message"]


# --- inputs ----------------------------------------------------------------------------------------------


def _search_error(url: str, **input_and_context) -> str:
    client = _client(url)
    thread = client.threads.create()
    context = input_and_context.pop("context", {})
    run = client.runs.create(thread["thread_id"], "search", input=input_and_context, context=context)
    error = client.runs.join(thread["thread_id"], run["run_id"])["__error__"]
    assert error["error"] in ("ServingConfigError", "SettingsError") and "\n" not in error["message"], error
    return error["message"]


def test_image_paths_are_read_only_inside_the_allowed_folder(served):
    root, url = served["root"], served["url"]
    client = _client(url)
    inside = client.runs.wait(None, "search", input={"image": str(root / "allowed" / "inside.png")}, context={"k": 1})
    assert len(inside["hits"]) == 1
    sibling = _search_error(url, image=str(root / "allowed-evil" / "outside.png"))
    assert "outside the folders this server may read" in sibling
    # A file that exists and one that does not, outside: the same words (nothing said about which exist).
    missing = _search_error(url, image=str(root / "photos" / "nothere.png"))
    existing = _search_error(url, image=str(root / "photos" / "img1.png"))
    assert missing.replace("nothere", "img1") == existing
    assert "outside" in _search_error(url, image=str(root / "allowed" / ".." / "photos" / "img1.png"))


def test_a_picture_that_decodes_huge_is_refused_from_its_header(served, tmp_path):
    """A 13000x13000 PNG of a few hundred kB, sent as data to a served run: refused in one line before it is
    decoded (the served graphs use the service pixel budget, not the desktop indexer's cap)."""
    from helpers.big_pictures import flat_png

    bomb = flat_png(tmp_path / "bomb.png", 13000, 13000)
    error = _search_error(served["url"], image=base64.b64encode(bomb.read_bytes()).decode())
    assert "more than this server decodes for one picture" in error, error


def test_image_ids_and_data_are_always_accepted(served):
    client = _client(served["url"])
    target = served["gallery"].search_text("a", k=1)[0]
    by_id = client.runs.wait(None, "search", input={"image": target.id}, context={"k": 1})
    assert by_id["hits"][0]["id"] == target.id
    data = base64.b64encode(Path(target.path).read_bytes()).decode()
    by_data = client.runs.wait(None, "search", input={"image": data}, context={"k": 1})
    assert by_data["hits"][0]["id"] == target.id


def test_a_caller_cannot_write_a_threads_state_past_the_input_check(served):
    """The graph checks a caller's input in its first step; a caller who writes the state directly (update
    state, a run's command.update or goto, a new thread's supersteps) would skip that check, so the server
    refuses those requests. A resume and a plain run still go through."""
    import httpx

    url, outside = served["url"], str(served["root"] / "photos" / "img1.png")
    client = _client(url)
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "search", input={"query": "a red square"}, context={"k": 1})
    with httpx.Client(base_url=url, timeout=60, trust_env=False) as http:
        attempts = {
            "update state": http.post(f"/threads/{thread}/state", json={"values": {"image": outside}}),
            "command.update": http.post(f"/threads/{thread}/runs/wait", json={
                "assistant_id": "search", "command": {"update": {"image": outside}}}),
            "command.goto": http.post("/runs/wait", json={"assistant_id": "search", "command": {"goto": "search"}}),
            "batch": http.post("/runs/batch", json=[{"assistant_id": "search", "command": {"update": {"k": 5}}}]),
            "supersteps": http.post("/threads", json={"supersteps": [
                {"updates": [{"values": {"image": outside}, "as_node": "served_input"}]}]}),
        }
        for what, answer in attempts.items():
            assert answer.status_code == 403 and "written by its own steps" in answer.json()["detail"], what
        plain = http.post(f"/threads/{thread}/runs/wait", json={"assistant_id": "search", "input": {"query": "a"},
                                                                "command": None, "context": {"k": 1}})
        assert plain.status_code == 200 and len(plain.json()["hits"]) == 1
        assert http.get(f"/threads/{thread}/state").status_code == 200  # reading a state is fine


@pytest.mark.parametrize("case,words", [
    ({"query": 5}, "input.query must be a string"),
    ({"query": ["a"]}, "input.query must be a string"),
    ({"image": {"path": "/etc/hosts"}}, "input.image must be a string"),
    ({"query": "a", "context": {"k": 10**9}}, "context.k must be a whole number from 1 to 100"),
    ({"query": "a", "context": {"k": 0}}, "k must be a whole number"),
])
def test_wrongly_typed_inputs_and_huge_k_are_one_line(served, case, words):
    assert words in _search_error(served["url"], **case)


# --- starting and stopping -------------------------------------------------------------------------------


@pytest.mark.parametrize("args,words", [
    (["--host", "0.0.0.0"], "reachable from other machines"),
    (["--host", "::"], "reachable from other machines"),
    (["--token", " "], "the token is blank"),
    (["--allow", "base_url=http://127.0.0.1:9/v1"], "base_url is never chosen by a run"),
    (["--allow", "gallery=/etc"], "gallery is never chosen by a run"),
])
def test_serve_refuses_to_start_unguarded_in_one_line(tmp_path, args, words):
    done = subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "serve", "-g", str(tmp_path), *args],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_sigterm_stops_the_server_closes_its_port_and_removes_its_folder(tmp_path, tiny_clip_name):
    """A supervisor's SIGTERM to `pictrieve serve` alone (not its group): `langgraph dev` stops with it.
    The server had a token: without it (or with a prefix of it) nothing is answered."""
    from pictrieve.vectorstore.gallery import Gallery

    make_photo(tmp_path / "photos" / "a.png", seed=1)
    Gallery.open(tmp_path / "g.gallery", tiny_clip_name).add(tmp_path / "photos", progress=False)
    process, url = start_serve(tmp_path, tmp_path / "g.gallery", token=TOKEN)
    try:
        assert httpx.get(f"{url}/ok").status_code == 401
        for given in ("", TOKEN[:-1], TOKEN + "x", "x" * len(TOKEN)):
            assert httpx.get(f"{url}/ok", headers={"Authorization": f"Bearer {given}".strip()}).status_code == 401
        assert httpx.get(f"{url}/ok", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
        assert list((tmp_path / "tmp").glob("pictrieve-serve-*"))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while _port_open(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _port_open(port)
        assert not list((tmp_path / "tmp").glob("pictrieve-serve-*"))
    finally:
        stop_group(process)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_oversized_run_bodies_and_pictures_are_refused(served):
    """A run's body is read by the guard (it judges what the server decodes) up to 64 MiB: one byte more is refused, not
    buffered without end; a picture over 20 MiB sent as data is refused in one line, nothing decoded."""
    from pictrieve.graphs.serving_http import _MAX_CHECKED_BODY

    head, tail = b'{"assistant_id": "search", "input": {"query": "', b'"}}'
    body = head + b"a" * (_MAX_CHECKED_BODY + 1 - len(head) - len(tail)) + tail
    answer = httpx.post(f"{served['url']}/runs/wait", content=body, headers={"content-type": "application/json"},
                        timeout=300)
    assert answer.status_code == 413 and "too large" in answer.text, (answer.status_code, answer.text[:300])
    picture = base64.b64encode(os.urandom(21 * 2**20)).decode()
    assert "larger than" in _search_error(served["url"], image=picture)
