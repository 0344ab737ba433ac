"""What callers send to `pictrieve serve` does not stay (issue 38, Why 6): the pictures runs send are kept within a
count, a byte budget and an age, and the folder of a server killed with SIGKILL is removed when the next starts."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import tempfile

import pytest
from PIL import Image


def _fill(folder, n, size=100, start=1_000_000.0):
    """``n`` files of ``size`` bytes, the first the oldest (one second apart from ``start``)."""
    for i in range(n):
        path = folder / f"p{i:03d}"
        path.write_bytes(b"x" * size)
        os.utime(path, (start + i, start + i))


def test_pictures_beyond_the_count_go_oldest_first(tmp_path):
    from pictrieve.graphs import serving

    _fill(tmp_path, serving.MAX_KEPT_PICTURES + 5)
    now = 1_000_000.0 + serving.MAX_KEPT_PICTURES + 5
    removed = serving.prune_served_pictures(tmp_path, now=now)
    assert removed == [f"p{i:03d}" for i in range(5)]
    assert len(list(tmp_path.iterdir())) == serving.MAX_KEPT_PICTURES


def test_pictures_beyond_the_byte_budget_go_oldest_first_but_never_the_new_one(tmp_path, monkeypatch):
    from pictrieve.graphs import serving

    monkeypatch.setattr(serving, "MAX_KEPT_PICTURE_BYTES", 1000)
    _fill(tmp_path, 4, size=400)
    removed = serving.prune_served_pictures(tmp_path, keep=tmp_path / "p000", now=1_000_010.0)
    assert removed == ["p001", "p002"]  # p000 is the picture just written (kept), p003 fits beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p000", "p003"]


def test_pictures_older_than_their_age_go(tmp_path):
    from pictrieve.graphs import serving

    _fill(tmp_path, 3)
    now = 1_000_001.5 + serving.KEPT_PICTURE_SECONDS  # p000 and p001 are older than the age, p002 is not
    assert serving.prune_served_pictures(tmp_path, now=now) == ["p000", "p001"]


def _png_data(seed: int) -> str:
    image = Image.new("RGB", (32, 32), (seed * 40 % 256, 80, 160))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_a_served_run_that_sends_a_picture_prunes_what_earlier_runs_sent(tmp_path, monkeypatch):
    """The served graph's input step writes each picture sent as data, then prunes: five runs, three kept."""
    from pictrieve.graphs import serving

    monkeypatch.setattr(serving, "_served_images_folder", lambda: str(tmp_path))
    monkeypatch.setattr(serving, "MAX_KEPT_PICTURES", 3)
    paths = [serving.check_run_input({"image": _png_data(i)}, None, None)["image"] for i in range(5)]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths[-3:])


def test_a_killed_servers_folder_is_removed_when_the_next_one_starts(tmp_path, monkeypatch):
    """`pictrieve serve` killed with SIGKILL leaves its folder (the pictures runs sent, the server's state); the next
    `pictrieve serve` removes it as it starts, and leaves a running server's alone. The server started here is
    /bin/true (it stops at once), so the command's own folder is removed as it stops too."""
    from pictrieve.cli import serve

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f"{serve.STATE_PREFIX}killed"
        (stale / "tmp" / "pictrieve-served-images-x").mkdir(parents=True)
        (stale / "tmp" / "pictrieve-served-images-x" / "data-1").write_bytes(b"a caller's picture")
        (stale / serve.OWNER_FILE).write_text(str(dead.pid))
        running = tmp_path / f"{serve.STATE_PREFIX}running"
        running.mkdir()
        (running / serve.OWNER_FILE).write_text(str(alive.pid))
        unknown = tmp_path / f"{serve.STATE_PREFIX}without-owner"
        unknown.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        assert serve._run("/bin/true", "127.0.0.1", 9, {}, "g") == 0
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, unknown.name])
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.parametrize("pid_text", ["", "not a number"])
def test_a_folder_whose_owner_cannot_be_read_is_left_alone(tmp_path, pid_text):
    from pictrieve.cli import serve

    folder = tmp_path / f"{serve.STATE_PREFIX}x"
    folder.mkdir()
    (folder / serve.OWNER_FILE).write_text(pid_text)
    assert serve.remove_stale_folders(tmp_path) == []
    assert folder.exists()


@pytest.mark.server
@pytest.mark.slow
def test_after_kill_9_the_next_pictrieve_serve_removes_the_folder_with_the_pictures_runs_sent(tmp_path, tiny_clip_name):
    """Why 6 as it happened: a run sends a picture, `pictrieve serve` is killed with SIGKILL (its folder stays,
    the picture in it), and the next `pictrieve serve` on the same temporary folder removes it as it starts.
    The run's own picture is removed as soon as the run ends (finding 7 of the review, on the real server), so a
    picture of a run still going at the kill is stood in for by a file in the same folder."""
    import signal

    from helpers import make_photo
    from helpers.serve import sdk_client, start_serve, stop_group
    from pictrieve.vectorstore.gallery import Gallery

    make_photo(tmp_path / "photos" / "a.png", seed=1)
    Gallery.open(tmp_path / "g.gallery", tiny_clip_name).add(tmp_path / "photos", progress=False)
    first, url = start_serve(tmp_path, tmp_path / "g.gallery")
    try:
        sdk_client(url).runs.wait(None, "search", input={"image": _png_data(3)}, context={"k": 1})
        (left,) = (tmp_path / "tmp").glob("pictrieve-serve-*")
        (pictures,) = left.rglob("pictrieve-served-images-*")
        assert not list(pictures.iterdir()), "the run ended: its picture is removed"
        (pictures / "data-of-a-run-still-going").write_bytes(b"a caller's picture")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        stop_group(first)
    assert left.exists()  # nothing ran to remove it
    second, _ = start_serve(tmp_path, tmp_path / "g.gallery")
    try:
        assert not left.exists()
        assert len(list((tmp_path / "tmp").glob("pictrieve-serve-*"))) == 1  # the running server's own
    finally:
        stop_group(second)


# --- a run's picture goes when the run ends, and never while its run goes on (issue 38 review, finding 7) -------


def _picture_graph(pause: bool):
    """A served graph (graphs/serving.py's guard and end-of-run handler around it) whose one step reads the
    picture (and pauses for an answer first when ``pause``), with a checkpointer as the server attaches one."""
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from pictrieve.graphs.serving import _guard_input

    class State(TypedDict, total=False):
        image: str
        answer: str
        read: int

    def look(state: State) -> dict:
        answer = interrupt("which?") if pause else ""
        with open(state["image"], "rb") as picture:
            return {"answer": answer, "read": len(picture.read())}

    builder = StateGraph(State)
    builder.add_node("look", look)
    builder.add_edge(START, "look")
    builder.add_edge("look", END)
    graph = _guard_input(builder.compile(), None)
    graph.checkpointer = InMemorySaver()
    return graph


@pytest.fixture
def pictures(tmp_path, monkeypatch):
    from pictrieve.graphs import serving

    monkeypatch.setattr(serving, "_served_images_folder", lambda: str(tmp_path))
    monkeypatch.setattr(serving, "_held", {})
    return tmp_path


def test_a_runs_picture_is_removed_when_the_run_ends(pictures):
    graph = _picture_graph(pause=False)
    result = graph.invoke({"image": _png_data(1)}, {"configurable": {"thread_id": "t1"}})
    assert result["read"] > 0  # the step read it
    assert os.listdir(pictures) == []


def test_a_paused_runs_picture_stays_until_the_resume_ends(pictures):
    from langgraph.types import Command

    graph = _picture_graph(pause=True)
    config = {"configurable": {"thread_id": "t2"}}
    graph.invoke({"image": _png_data(2)}, config)
    assert graph.get_state(config).next == ("look",) and len(os.listdir(pictures)) == 1
    assert graph.invoke(Command(resume="the red one"), config)["read"] > 0
    assert os.listdir(pictures) == []


def test_pictures_of_runs_still_going_are_never_removed_for_a_newcomer(pictures, monkeypatch):
    """The reviewer's case: a caller sending one picture more than the count removed other runs' pictures in use.
    Now the newcomer is refused in one line, and the paused runs still read theirs."""
    from langgraph.types import Command

    from pictrieve.graphs import serving

    monkeypatch.setattr(serving, "MAX_KEPT_PICTURES", 3)
    graph = _picture_graph(pause=True)
    for i in range(3):
        graph.invoke({"image": _png_data(i)}, {"configurable": {"thread_id": f"p{i}"}})
    with pytest.raises(serving.ServingConfigError, match="for runs that have not ended; try again when one ends"):
        graph.invoke({"image": _png_data(9)}, {"configurable": {"thread_id": "newcomer"}})
    assert len(os.listdir(pictures)) == 3
    for i in range(3):
        assert graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": f"p{i}"}})["read"] > 0
    assert os.listdir(pictures) == []


def test_the_server_removes_pictures_past_their_age_without_waiting_for_another(pictures, monkeypatch):
    """The age bound is kept on a timer (the guard app's lifespan), not only when a new picture arrives."""
    import asyncio

    from pictrieve.graphs import serving

    monkeypatch.setattr(serving, "SWEEP_SECONDS", 0.05)
    monkeypatch.delenv(serving.ENV_GALLERY, raising=False)
    _fill(pictures, 2, start=1_000_000.0)  # from 1970: far past their hour
    (pictures / "fresh").write_bytes(b"x")

    async def serve_a_while():
        async with serving.lifespan(None):
            for _ in range(1200):  # up to 60 s on a loaded machine; a quiet one sees the first sweep in 0.1 s
                await asyncio.sleep(0.05)
                if sorted(os.listdir(pictures)) == ["fresh"]:
                    return

    asyncio.run(serve_a_while())
    assert sorted(os.listdir(pictures)) == ["fresh"]
