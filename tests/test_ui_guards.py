"""``pictrieve ui`` answers only its operator's page: Host allow-list, same-origin API, body types and sizes,
running-job and stored-chat caps, and the security headers on every answer.

Each check runs against a real uvicorn on loopback; the cross-origin page is served by a second loopback
server and opened in headless Chromium, which sends what a browser really sends (``Origin``,
``Sec-Fetch-Site``, CORS preflights). Oversized bodies go over a raw socket, so the test knows exactly what
was sent when the server answered.
"""

from __future__ import annotations

import http.server
import json
import socket
import tempfile
import threading

import pytest

pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra: pip install -e '.[ui]'")
import httpx  # noqa: E402

from helpers import make_photo  # noqa: E402
from helpers.plugir_fakes import ScriptedChatModel  # noqa: E402
from helpers.web_page import browser, chat_step, finished, gallery, page, page_client, serve  # noqa: E402,F401

from pictrieve.ui.forms import MAX_UPLOAD_BYTES  # noqa: E402
from pictrieve.ui.app import create_app  # noqa: E402
from pictrieve.ui.guard import FORM_OVERHEAD, MAX_JSON_BYTES  # noqa: E402

pytestmark = pytest.mark.server
SECURITY = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


def make_app(gallery, tmp_path, visualizer=None, **kwargs):
    return create_app(gallery, needs={"llm": ScriptedChatModel(questions=["Is it red?"]), "captioner": "none",
                                      "visualizers": visualizer}, state_dir=tmp_path / "state", **kwargs)


def nothing_started(app, tmp_path) -> bool:
    """No job was made and no chat stored (the chat's SQLite file is made with its first session)."""
    return len(app.state.jobs) == 0 and not (tmp_path / "state" / "chat.sqlite").exists()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# --- Host ------------------------------------------------------------------------------------------


def test_a_host_that_is_not_local_is_refused(gallery, tmp_path):
    """A DNS-rebinding page sends its own name as Host: it gets 421 on every route, the page included."""
    app = make_app(gallery, tmp_path, allowed_hosts=["photos.lan"])
    with serve(app) as url:
        port = port_of(url)
        for path in ("/", "/api/status", "/app.js"):
            refused = httpx.get(url + path, headers={"Host": "evil.example"})
            assert refused.status_code == 421 and "--allow-host" in refused.json()["error"], path
        posted = httpx.post(url + "/api/chat/start", json={"description": "x"}, headers={"Host": f"evil.example:{port}"})
        assert posted.status_code == 421
        for host in ("127.0.0.1.evil.example", "localhost.evil.example", "[::2]", ""):
            assert httpx.get(url + "/api/status", headers={"Host": host}).status_code == 421, host
        for host in (f"localhost:{port}", f"LOCALHOST:{port}", f"127.0.0.2:{port}", f"[::1]:{port}", "127.0.0.1",
                     f"photos.lan:{port}"):
            assert httpx.get(url + "/api/status", headers={"Host": host}).status_code == 200, host
    assert nothing_started(app, tmp_path)


# --- Origin, Sec-Fetch-Site and body types, one guard at a time -------------------------------------------


def test_each_cross_origin_sign_is_refused_on_its_own(gallery, tmp_path):
    """Origin alone, Sec-Fetch-Site alone, and the body types a plain form on another site can send: each is
    refused by itself (a browser sends several, so a browser test alone would not notice one missing)."""
    app = make_app(gallery, tmp_path)
    with serve(app) as url:
        other = f"http://127.0.0.1:{port_of(url) + 1}"
        body = {"description": "a red square"}
        cases = {
            "other port's Origin": dict(json=body, headers={"Origin": other}),
            "null Origin": dict(json=body, headers={"Origin": "null"}),
            "same-site fetch": dict(json=body, headers={"Sec-Fetch-Site": "same-site"}),
            "cross-site fetch": dict(json=body, headers={"Sec-Fetch-Site": "cross-site"}),
        }
        for name, request in cases.items():
            refused = httpx.post(url + "/api/chat/start", **request)
            assert refused.status_code == 403 and "only this page" in refused.json()["error"], name
        # What an HTML form can send, without Origin (an old browser): no JSON, no proof of the page.
        assert httpx.post(url + "/api/chat/start", data=body).status_code == 415  # urlencoded
        plain = httpx.post(url + "/api/chat/start", content=json.dumps(body), headers={"Content-Type": "text/plain"})
        assert plain.status_code == 415
        multipart = httpx.post(url + "/api/ask", data={"question": "what?"}, files={"image": ("x.png", b"x", "image/png")})
        assert multipart.status_code == 403 and "from this page" in multipart.json()["error"]
        # A GET of the API from another site (a job's result, a chat) is refused too; the page itself opens.
        assert httpx.get(url + "/api/status", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert httpx.get(url + "/", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200
        assert nothing_started(app, tmp_path)
        # The page's own requests pass: JSON, and a form upload with its Origin or Sec-Fetch-Site.
        assert httpx.post(url + "/api/search", json={"query": "a red square", "k": 2}, timeout=60).status_code == 200
        photo = make_photo(tmp_path / "q.png", seed=3, size=(64, 48)).read_bytes()
        for proof in ({"Origin": url}, {"Sec-Fetch-Site": "same-origin"}):
            own = httpx.post(url + "/api/search", files={"image": ("q.png", photo, "image/png")}, headers=proof, timeout=60)
            assert own.status_code == 200 and own.json()["hits"], proof


INTRUDER = """<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="plain" method="post" enctype="text/plain" target="sink" action="{api}/api/chat/start">
  <input name='{{"description": "a", "x": "' value='"}}'></form>
<form id="urlencoded" method="post" target="sink" action="{api}/api/chat/start">
  <input name="description" value="a red square"></form>
<form id="multipart" method="post" enctype="multipart/form-data" target="sink" action="{api}/api/ask">
  <input name="question" value="what is it?"></form>
<script>
window.results = {{}};
const api = "{api}";
const body = JSON.stringify({{description: "a red square"}});
async function attempt(name, run) {{
  try {{ const r = await run(); window.results[name] = r.type === "opaque" ? "opaque" : r.status; }}
  catch (e) {{ window.results[name] = "blocked"; }}
}}
(async () => {{
  await attempt("json", () => fetch(api + "/api/chat/start", {{method: "POST", headers: {{"Content-Type": "application/json"}}, body}}));
  await attempt("no-cors text", () => fetch(api + "/api/chat/start", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body}}));
  const form = new FormData(); form.append("question", "what?"); form.append("image", new Blob(["x"], {{type: "image/png"}}), "x.png");
  await attempt("multipart", () => fetch(api + "/api/ask", {{method: "POST", body: form}}));
  await attempt("status", () => fetch(api + "/api/status"));
  window.fetched = true;
}})();
</script></body></html>"""


@pytest.mark.browser
def test_a_page_on_another_loopback_port_cannot_start_work(page, gallery, tmp_path):  # noqa: F811
    """A page served from another loopback port tries fetch() and plain HTML form posts against the page's
    API in Chromium: nothing answers it, no job is made and no chat is stored."""
    app = make_app(gallery, tmp_path)
    site = tmp_path / "intruder"
    site.mkdir()
    with serve(app) as url:
        (site / "index.html").write_text(INTRUDER.format(api=url))
        handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(site), **k)  # noqa: E731
        intruder = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=intruder.serve_forever, daemon=True).start()
        answers: list[tuple[str, int]] = []
        page.on("response", lambda r: answers.append((r.request.method + " " + r.url, r.status)) if r.url.startswith(url) else None)
        try:
            page.goto(f"http://127.0.0.1:{intruder.server_address[1]}/index.html")
            page.wait_for_function("() => window.fetched === true", timeout=30000)
            results = page.evaluate("() => window.results")
            for form in ("plain", "urlencoded", "multipart"):
                with page.expect_response(lambda r: r.url.startswith(url) and r.request.method == "POST"):
                    page.evaluate(f"() => document.getElementById('{form}').submit()")
        finally:
            intruder.shutdown()
    # (Chromium may drop the no-cors answer itself, for its Cross-Origin-Resource-Policy; either way unread.)
    assert results.pop("no-cors text") in ("opaque", "blocked")
    assert results == {"json": "blocked", "multipart": "blocked", "status": "blocked"}, results
    posts = [status for what, status in answers if what.startswith("POST")]
    # The three forms reached the server (the fetches' answers are hidden from the page): each refused.
    assert len(posts) >= 3 and all(status in (403, 415) for status in posts), answers
    assert nothing_started(app, tmp_path)


# --- sizes ---------------------------------------------------------------------------------------------


def raw_request(url: str, head: str, body_parts=(), timeout: float = 60) -> tuple[int, bytes]:
    """Send ``head`` and then ``body_parts`` over one socket, and read the answer (status, whole reply).

    Nothing more is ever sent, so an answer proves the server decided without the rest of the body."""
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=timeout) as sock:
        sock.sendall(head.encode("latin-1"))
        for part in body_parts:
            sock.sendall(part)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply) < reply.find(b"\r\n\r\n") + 40:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1]), reply


FILE_PART = b'--b\r\nContent-Disposition: form-data; name="image"; filename="x.png"\r\nContent-Type: image/png\r\n\r\n'


def chunked(total: int, start: bytes = b"", piece: int = 1024 * 1024):
    """``total`` bytes (``start``, then zeros) as HTTP chunks, never followed by the last (empty) chunk."""
    data_left, first = total, start
    while data_left > 0:
        size = min(piece, data_left)
        part = (first + b"\0" * size)[:size]
        first = first[size:]
        yield f"{size:x}\r\n".encode() + part + b"\r\n"
        data_left -= size


def test_oversized_bodies_are_refused_before_they_are_read(gallery, tmp_path, monkeypatch):
    """25 MB declared: 413 with nothing read. Without a length (chunked): 413 as soon as the limit is passed,
    while the sender still holds the rest. JSON over 1 MiB: the same. Nothing is left in the temp folder."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))  # where the server (in this process) spools uploads
    app = make_app(gallery, tmp_path)
    form_limit = MAX_UPLOAD_BYTES + FORM_OVERHEAD
    with serve(app) as url:
        host = f"127.0.0.1:{port_of(url)}"
        upload = f"POST /api/search HTTP/1.1\r\nHost: {host}\r\nOrigin: {url}\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        status, reply = raw_request(url, upload + "Content-Length: 25000000\r\n\r\n")
        assert status == 413 and b"larger than this server takes" in reply
        status, reply = raw_request(url, upload + "Transfer-Encoding: chunked\r\n\r\n", chunked(form_limit + 1, FILE_PART))
        assert status == 413, reply
        as_json = f"POST /api/chat/start HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        assert raw_request(url, as_json + f"Content-Length: {2 * 1024 * 1024}\r\n\r\n")[0] == 413
        assert raw_request(url, as_json + "Transfer-Encoding: chunked\r\n\r\n", chunked(MAX_JSON_BYTES + 1))[0] == 413
        # Just under the limits: read and answered as usual.
        padded = json.dumps({"query": "a red square", "k": 2, "pad": "x" * (MAX_JSON_BYTES - 100)})
        assert httpx.post(url + "/api/search", content=padded, headers={"Content-Type": "application/json"},
                          timeout=60).status_code == 200
    assert list(spool.iterdir()) == []
    assert nothing_started(app, tmp_path)


# --- caps ----------------------------------------------------------------------------------------------


class Held:
    """A visualizer that holds each job until the test lets it go (control flow only)."""

    name = "held"
    generates = False

    def __init__(self) -> None:
        self.reached = threading.Semaphore(0)
        self.opened = threading.Event()

    def visualize(self, prompt, *, n=1, seed=None):
        from PIL import Image

        self.reached.release()
        assert self.opened.wait(60), "the test never let the job go"
        return [Image.new("RGB", (32, 32), (120, 100, 100)) for _ in range(n)]


def test_running_jobs_are_capped_and_the_oldest_chats_pruned(gallery, tmp_path):
    """Past ``max_running`` jobs a new one gets 429 at once (no thread, nothing stored); once one ends, work
    starts again. Past ``max_chats`` stored sessions, starting a chat deletes the one touched longest ago."""
    held = Held()
    app = make_app(gallery, tmp_path, visualizer=held, max_running=2, max_chats=2)
    client = page_client(app, raise_server_exceptions=False)
    visualize = {"query": "a red square", "guides": 1}
    running = [client.post("/api/visualize", json=visualize).json() for _ in range(2)]
    for _ in running:
        assert held.reached.acquire(timeout=60)
    for path, body in (("/api/visualize", visualize), ("/api/chat/start", {"description": "a square"})):
        refused = client.post(path, json=body)
        assert refused.status_code == 429 and "wait for one to finish" in refused.json()["error"]
        assert refused.headers["retry-after"]
    assert len(app.state.jobs) == 2 and not (tmp_path / "state" / "chat.sqlite").exists()
    held.opened.set()
    assert all(not finished(client, job)["error"] for job in running)
    threads = [chat_step(client, client.post("/api/chat/start", json={"description": f"a square {i}"}))["thread"]
               for i in range(3)]
    gone = client.get(f"/api/chat/{threads[0]}")
    assert gone.status_code == 400 and "no such chat" in gone.json()["error"]
    assert all(client.get(f"/api/chat/{t}").json()["thread"] == t for t in threads[1:])
    long = client.post("/api/chat/start", json={"description": "x" * 2001})
    assert long.status_code == 400 and "longer than" in long.json()["error"]


# --- headers ---------------------------------------------------------------------------------------------


class BrokenGallery:
    """The gallery, except that counting fails (an internal error, answered 500)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def count(self):
        raise RuntimeError("the disk went away")


def test_every_answer_carries_the_security_headers(gallery, tmp_path):
    app = make_app(BrokenGallery(gallery), tmp_path, max_running=0)
    with serve(app) as url:
        answers = {
            "/": httpx.get(url + "/"), "/index.html": httpx.get(url + "/index.html"),
            "/app.js": httpx.get(url + "/app.js"), "/style.css": httpx.get(url + "/style.css"),
            "404": httpx.get(url + "/nosuch"), "image 404": httpx.get(url + "/api/image/nosuch"),
            "500": httpx.get(url + "/api/status"), "400": httpx.post(url + "/api/search", json={"query": " "}),
            "421": httpx.get(url + "/", headers={"Host": "evil.example"}),
            "403": httpx.post(url + "/api/search", json={}, headers={"Origin": "http://evil.example"}),
            "415": httpx.post(url + "/api/search", data={"query": "x"}),
            "429": httpx.post(url + "/api/chat/start", json={"description": "x"}),
            "405": httpx.put(url + "/api/search", json={}),
        }
        too_large = raw_request(url, f"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                                     f"\r\nContent-Length: {10**9}\r\n\r\n")
    answers["413"] = httpx.Response(too_large[0], headers=[tuple(line.split(": ", 1)) for line in
                                                           too_large[1].split(b"\r\n\r\n")[0].decode().split("\r\n")[1:]],
                                    content=too_large[1].split(b"\r\n\r\n", 1)[1])
    statuses = {name: r.status_code for name, r in answers.items()}
    assert statuses == {"/": 200, "/index.html": 200, "/app.js": 200, "/style.css": 200, "404": 404, "image 404": 404,
                        "500": 500, "400": 400, "421": 421, "403": 403, "415": 415, "429": 429,
                        "405": 405, "413": 413}, statuses
    for name, response in answers.items():
        csp = response.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, name
        assert {k: response.headers.get(k) for k in SECURITY} == SECURITY, name
        assert response.headers.get("cross-origin-resource-policy") == "same-origin", name
    assert "Traceback" not in answers["500"].text and "internal error" in answers["500"].json()["error"]
    assert all(set(r.json()) == {"error"} for name, r in answers.items() if r.status_code >= 400), answers


# --- the command --------------------------------------------------------------------------------------


def test_pictrieve_ui_answers_its_loopback_names_and_allow_host_only(gallery, tmp_path):
    """`pictrieve ui` as a person starts it: loopback names and `--allow-host` names answer, others get 421."""
    import subprocess
    import sys
    import time

    from helpers import free_port, stop_process
    from helpers.mcp import server_env

    port = free_port()
    log = open(tmp_path / "ui.log", "wb")
    served = subprocess.Popen([sys.executable, "-m", "pictrieve.cli.main", "ui", "-g", str(gallery.location),
                               "--port", str(port), "--state-dir", str(tmp_path / "state"), "--allow-host", "Photos.LAN"],
                              env=server_env(), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                first = httpx.get(url + "/api/status", timeout=5)
                break
            except httpx.TransportError:
                assert served.poll() is None and time.monotonic() < deadline, (tmp_path / "ui.log").read_text()
                time.sleep(0.2)
        assert first.status_code == 200 and first.json()["count"] == 6
        for host, status in ((f"photos.lan:{port}", 200), (f"localhost:{port}", 200), (f"evil.example:{port}", 421),
                             (f"lan.evil.example:{port}", 421)):
            assert httpx.get(url + "/api/status", headers={"Host": host}, timeout=10).status_code == status, host
    finally:
        stop_process(served)
        log.close()


def test_a_library_error_on_the_page_says_what_its_visitor_can_do():
    """Issue 37: page errors quoted command-line options ("check --base-url"), which a visitor cannot pass. A job
    failing on a dead chat-model endpoint (a real call to a closed loopback port) reads in words, and says who
    can change the setting."""
    import time

    from pictrieve.tools.models.llm_calls import ModelCallError, check_endpoint
    from pictrieve.ui.forms import UIError, page_message
    from pictrieve.ui.jobs import Jobs

    from helpers.openai_fake import dead_endpoint

    with dead_endpoint() as closed, pytest.raises(ModelCallError) as failed:  # its port is held, never listening
        check_endpoint("openai:some-model", closed)
    assert "--llm" in str(failed.value) or "--base-url" in str(failed.value)  # the command line's wording

    def work(job):
        raise failed.value

    job = Jobs().start("ask", work)
    deadline = time.monotonic() + 30
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.error and "--" not in job.error, job.error
    assert "the chat model" in job.error and "'some-model'" in job.error
    assert "ask whoever started it to restart `pictrieve ui`" in job.error
    assert page_message(UIError("type a query")) == "type a query"  # the page's own words stay as they are
