"""The page's long work never freezes the server, and stops when nobody wants it any more.

A slow chat round, Ask or Visualize is held at a :class:`Gate` (a stand-in model, detector or visualizer
that waits until the test lets it go: control flow only) while the test checks what the server does
meanwhile, on a real uvicorn: the status still answers, a cancelled job stops between graph steps, a job
nobody polls stops by itself, and a page that goes away (headless Chromium) cancels its job.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra: pip install -e '.[ui]'")
import httpx  # noqa: E402
from PIL import Image  # noqa: E402

from helpers.plugir_fakes import ScriptedChatModel  # noqa: E402
from helpers.web_page import browser, chat_step, finished, gallery, page, page_client, serve  # noqa: E402,F401  (fixtures, helpers)

from pictrieve.ui.app import create_app  # noqa: E402

HELD = 60
"""Seconds a gate holds its step at most (a test that forgets to open it fails instead of hanging)."""


class Gate:
    """Holds the first step that reaches it until the test opens it; later steps pass at once."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __call__(self) -> None:
        self.reached.set()
        if not self.opened.wait(HELD):
            raise TimeoutError("the test never opened the gate")


class GatedChatModel(ScriptedChatModel):
    """The scripted PlugIR chat model, held at a gate when it has one."""

    gate: Gate | None = None

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if self.gate is not None:
            self.gate()
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


class GatedDetector:
    """A region detector that finds nothing, after its gate."""

    name = "gated"

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def detect(self, image, *, labels=None, min_score=None):
        self.gate()
        return []


class Words:
    name = "words"

    def caption(self, images, *, prompt=None):
        return ["a square"] * len(images)


class GatedVisualizer:
    """Guide pictures (plain grey squares, found not generated) after its gate."""

    name = "gated"
    generates = False

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        # Pictures are cached by visualizer settings (tools/models/guide_images.py): each gated visualizer has its
        # own, so a later test's request reaches its gate instead of an earlier test's cached pictures.
        self.settings_key = uuid.uuid4().hex

    def visualize(self, prompt, *, n=1, seed=None):
        self.gate()
        return [Image.new("RGB", (32, 32), (100 + 10 * i, 100, 100)) for i in range(n)]


class GatedEmbedder:
    """The gallery's own embedder, held at a gate before it embeds a text query (a slow model)."""

    def __init__(self, inner, gate: Gate) -> None:
        self.inner, self.gate = inner, gate

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_texts(self, texts):
        self.gate()
        return self.inner.embed_texts(texts)


def gated_app(gallery, tmp_path, gate: Gate, **kwargs):
    return create_app(gallery, needs={"llm": GatedChatModel(gate=gate), "captioner": "none", "search": None,
                                       "detector": GatedDetector(gate), "vlm": Words(),
                                       "visualizers": GatedVisualizer(gate)},
                      state_dir=tmp_path / "state", settings={"vsa": {"plan_with_llm": False}}, **kwargs)


SLOW_WORK = {
    "search": ("/api/search", {"query": "a red square", "k": 2}),  # no job: answered when done, off the loop
    "chat": ("/api/chat/start", {"description": "a red square"}),
    "ask": ("/api/ask", {"question": "what is it?"}),
    "visualize": ("/api/visualize", {"query": "a red square", "guides": 1}),
}


@pytest.mark.parametrize("work", sorted(SLOW_WORK))
def test_status_answers_while_slow_work_runs(gallery, tmp_path, work):
    """One visitor's slow request must not hold up another's: while the work is held at its gate (as long
    as the test likes), the status answers on the same real server."""
    path, body = SLOW_WORK[work]
    gate = Gate()
    if work == "search":
        gallery = gallery.with_embedder(GatedEmbedder(gallery.embedder, gate))
    with serve(gated_app(gallery, tmp_path, gate)) as url, httpx.Client(base_url=url, timeout=HELD) as http:
        answers: list[httpx.Response] = []
        poster = threading.Thread(target=lambda: answers.append(http.post(path, json=body)), daemon=True)
        poster.start()
        try:
            assert gate.reached.wait(HELD), "the slow step was never reached"
            status = httpx.get(f"{url}/api/status", timeout=10)  # held work: the status answers at all
            assert status.status_code == 200 and status.json()["count"] == 6
        finally:
            gate.opened.set()
        poster.join(HELD)
        (started,) = answers
        if work == "search":
            assert started.status_code == 200 and len(started.json()["hits"]) == 2, started.text
            return
        view = finished(http, started.json())
    assert not view["error"] and view["result"] is not None


def test_a_cancelled_chat_round_stops_between_steps_and_continues_later(gallery, tmp_path):
    """The page cancels its job when it goes away: the round stops after the step that is running, the
    session keeps its finished steps, and ``continue`` runs it on to the next question."""
    model = GatedChatModel()
    app = create_app(gallery, needs={"llm": model, "captioner": "none"}, state_dir=tmp_path / "state")
    client = page_client(app, raise_server_exceptions=False)
    view = chat_step(client, client.post("/api/chat/start", json={"description": "a red square"}))
    thread = view["thread"]
    model.gate = gate = Gate()
    started = client.post("/api/chat/reply", json={"thread": thread, "answer": "yes, bright red"}).json()
    assert gate.reached.wait(HELD)  # reformulating: the first model call after the answer
    assert client.post(f"/api/jobs/{started['id']}/cancel").json() == {"cancelled": True}
    busy = client.post("/api/chat/reply", json={"thread": thread, "continue": True})
    assert busy.status_code == 400 and "still working" in busy.json()["error"]
    gate.opened.set()
    stopped = finished(client, started)
    assert stopped["cancelled"] and stopped["result"] is None and "went away" in stopped["error"]
    assert not any(step.startswith("searched") for step in stopped["steps"])  # nothing ran after the cancel
    calls = len(model.calls)
    saved = client.get(f"/api/chat/{thread}").json()
    assert saved["unfinished"] and not saved["working"] and not saved["question"]
    assert saved["dialogue"] == [{"question": view["question"], "answer": "yes, bright red"}]
    refused = client.post("/api/chat/reply", json={"thread": thread, "answer": "red"})
    assert refused.status_code == 400 and "reload the page" in refused.json()["error"]
    view = chat_step(client, client.post("/api/chat/reply", json={"thread": thread, "continue": True}))
    assert view["round"] == 1 and view["question"] and not view["unfinished"] and len(model.calls) > calls
    assert client.post("/api/jobs/" + "0" * 32 + "/cancel").status_code == 404


class StepClock:
    """A clock that moves only when the test moves it: how long nobody polled is exact, however loaded the
    machine is (a real 0.5 s could pass before the job even reached its gate)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def held_job(gallery, tmp_path, abandon_after):
    """An app on a :class:`StepClock`, and a Visualize job of it held at its gate."""
    gate, clock = Gate(), StepClock()
    app = gated_app(gallery, tmp_path, gate, abandon_after=abandon_after)
    app.state.jobs.clock = clock
    client = page_client(app, raise_server_exceptions=False)
    started = client.post("/api/visualize", json={"query": "a red square", "guides": 1}).json()
    assert gate.reached.wait(HELD)
    return app, client, started, gate, clock


def test_a_job_nobody_polls_stops_by_itself(gallery, tmp_path):
    """A page that vanished without a word (no beacon): its job is cancelled once nobody has asked about
    it for ``abandon_after`` seconds, at its next step."""
    app, client, started, gate, clock = held_job(gallery, tmp_path, abandon_after=10)
    clock.now += 11  # longer than abandon_after, and nobody polls meanwhile
    gate.opened.set()
    assert app.state.jobs.get(started["id"]).finished.wait(HELD)
    view = client.get(f"/api/jobs/{started['id']}").json()
    assert view["cancelled"] and view["result"] is None
    assert not any(step.startswith("searched the gallery") for step in view["steps"])


def test_a_polled_job_runs_past_abandon_after(gallery, tmp_path):
    """Polling keeps a job wanted: one that runs longer than ``abandon_after`` while its page polls it is
    never cancelled (a page watching a two-minute chat round must see its end)."""
    app, client, started, gate, clock = held_job(gallery, tmp_path, abandon_after=10)
    for _ in range(3):  # 24 s in all, never 10 s without a poll
        clock.now += 8
        assert not client.get(f"/api/jobs/{started['id']}").json()["done"]
    gate.opened.set()
    assert app.state.jobs.get(started["id"]).finished.wait(HELD)
    view = client.get(f"/api/jobs/{started['id']}").json()
    assert not view["cancelled"] and not view["error"], view
    assert view["result"] is not None and view["result"]["hits"]


def stops(job) -> bool:
    """Whether ``job`` stops at its next check between graph steps (what its worker thread runs)."""
    from pictrieve.ui.jobs import JobCancelled

    try:
        job.check()
    except JobCancelled:
        return True
    return False


@pytest.mark.browser
def test_leaving_the_page_cancels_its_running_job(page, gallery, tmp_path):  # noqa: F811
    """The page tells the server when it goes away (a beacon on pagehide); its job then stops."""
    gate = Gate()
    app = gated_app(gallery, tmp_path, gate)
    with serve(app) as url:
        try:
            page.goto(url + "/#visualize")
            page.wait_for_selector("#tab-visualize:not([hidden])")
            page.fill("#visualize-query", "a red square")
            page.click("#visualize-form button[type=submit]")
            assert gate.reached.wait(HELD)
            page.wait_for_function("() => runningJobs.size === 1")
            (job_id,) = page.evaluate("() => [...runningJobs]")
            job = app.state.jobs.get(job_id)
            page.goto("about:blank")
            deadline = time.time() + HELD
            while not stops(job) and time.time() < deadline:
                time.sleep(0.1)
            assert stops(job), "the page left without cancelling its job"
        finally:
            gate.opened.set()
        assert job.finished.wait(HELD)
        assert job.view()["cancelled"]
