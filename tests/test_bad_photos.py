"""A bad photo (empty, truncated, or text named .jpg) at every entry that takes one: one readable line.

The entries: ``index`` (its skip reason), ``ask`` and ``search --image`` (real processes), the search
and Vision Search Assistant graphs (what served runs and Python users call), and the page's routes.
Each must give the guarded loader's one-line reason (:func:`pictrieve.tools.core.images.load_image`),
never a traceback, a ``struct`` message or "internal error". The VSA graph and the page use stand-in
detector and describer objects: they are never reached, which is the point.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from helpers import make_photo
from helpers.cli import one_clear_line as one_line, run
from pictrieve.tools.core.images import ImageDecodeError, load_image

REASONS = {"empty.jpg": "empty file", "truncated.jpg": "truncated", "text.jpg": "not a readable image"}


def write_bad_photos(folder: Path) -> dict[str, Path]:
    """The three bad files of the issue, beside nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    good = make_photo(folder.parent / "whole.jpg", seed=3, size=(64, 48)).read_bytes()
    files = {"empty.jpg": b"", "truncated.jpg": good[: len(good) // 2], "text.jpg": b"this is not a photo\n"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {name: folder / name for name in files}


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    return write_bad_photos(tmp_path_factory.mktemp("bad") / "photos")


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("gallery")
    for i in range(3):
        make_photo(root / "photos" / f"{i}.png", seed=i, size=(64, 48))
    opened = Gallery.open(root / "g", tiny_clip_name)
    opened.add([root / "photos"])
    return opened


def test_the_loader_says_why_in_one_line(bad):
    for name, path in bad.items():
        with pytest.raises(ImageDecodeError) as caught:
            load_image(path)
        message = str(caught.value)
        assert REASONS[name] in message and "\n" not in message and "unpack" not in message, message
    with pytest.raises(ImageDecodeError, match=r"empty\.jpg: empty file \(0 bytes\)"):
        load_image(bad["empty.jpg"])


def test_index_reports_an_empty_file_as_empty(tmp_path, bad, tiny_clip_name):
    make_photo(bad["empty.jpg"].parent.parent / "ok" / "fine.png", seed=1)
    result = run("index", str(bad["empty.jpg"].parent), str(bad["empty.jpg"].parent.parent / "ok"),
                 "-g", str(tmp_path / "g"), "-e", tiny_clip_name)
    assert result.returncode == 0, result.stderr
    skipped = {line for line in result.stderr.splitlines() if "skipped" in line}
    assert any("empty.jpg: empty file" in line for line in skipped), result.stderr
    assert not any("unpack" in line or "struct" in line for line in skipped), result.stderr
    assert len(skipped) == 3, result.stderr


def test_ask_and_search_by_image_give_one_line_for_each_bad_photo(bad, gallery):
    for name, path in bad.items():
        asked = run("ask", str(path), "what is this?")
        assert asked.returncode == 2 and REASONS[name] in one_line(asked), asked.stderr
        found = run("search", "--image", str(path), "-g", str(gallery.location))
        assert found.returncode == 2 and REASONS[name] in one_line(found), found.stderr
        assert not found.stdout


def test_the_graphs_refuse_a_bad_photo_at_their_input(bad, gallery):
    from pictrieve.graphs.search import build_search_graph
    from pictrieve.graphs.vsa import build_vsa_graph

    unreached = RunnableLambda(lambda messages: pytest.fail("no model may run for a bad photo"))
    vsa = build_vsa_graph(None, llm=unreached, vlm=Unreached(), detector=Unreached(), search=None)
    search = build_search_graph(gallery)
    for name, path in bad.items():
        with pytest.raises(ImageDecodeError, match=REASONS[name]):
            vsa.invoke({"image": str(path), "question": "what is this?"})
        with pytest.raises(ImageDecodeError, match=REASONS[name]):
            search.invoke({"image": str(path)})


class Unreached:
    """A detector and region describer that must never be called."""

    name = "unreached"

    def detect(self, image, **kwargs):
        pytest.fail("the detector ran on a bad photo")

    def caption(self, images, **kwargs):
        pytest.fail("the describer ran on a bad photo")


def test_the_page_answers_a_bad_photo_with_its_reason(bad, gallery, tmp_path):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    from helpers.web_page import page_client

    from pictrieve.ui.app import create_app

    llm = RunnableLambda(lambda messages: AIMessage(content="unused"))
    app = create_app(gallery, state_dir=tmp_path / "state",
                     needs={"llm": llm, "search": None, "detector": Unreached(), "vlm": Unreached()})
    client = page_client(app, raise_server_exceptions=False)
    for name, path in bad.items():
        upload = {"image": (name, path.read_bytes(), "image/jpeg")}
        searched = client.post("/api/search", files=upload)
        assert searched.status_code == 400 and REASONS[name] in searched.json()["error"], searched.text
        asked = client.post("/api/ask", data={"question": "what is this?"}, files=upload)
        assert asked.status_code == 400 and REASONS[name] in asked.json()["error"], asked.text
        assert "pictrieve-" not in searched.json()["error"] + asked.json()["error"]  # no server paths


def test_a_gallery_photo_that_went_bad_is_reported_on_the_page(tmp_path, tiny_clip_name):
    """Asking about (or searching like) a gallery photo whose file was emptied since indexing."""
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    from helpers.web_page import page_client

    from pictrieve.ui.app import create_app
    from pictrieve.vectorstore.gallery import Gallery

    photo = make_photo(tmp_path / "photos" / "spoiled.png", seed=5)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    gallery.add([photo])
    photo.write_bytes(b"")
    (item,) = gallery.items()
    llm = RunnableLambda(lambda messages: AIMessage(content="unused"))
    client = page_client(create_app(gallery, state_dir=tmp_path / "state",
                                   needs={"llm": llm, "search": None, "detector": Unreached(), "vlm": Unreached()}),
                        raise_server_exceptions=False)
    like = client.post("/api/search", json={"like": item.id})
    assert like.status_code == 400 and "empty file" in like.json()["error"], like.text
    view = client.post("/api/ask", json={"question": "what is this?", "photo": item.id}).json()
    deadline = time.time() + 120
    while not view.get("done") and not view.get("error"):
        assert time.time() < deadline, view
        time.sleep(0.1)
        view = client.get(f"/api/jobs/{view['id']}").json()
    assert "empty file" in view["error"] and "internal error" not in view["error"], view
