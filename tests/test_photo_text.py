"""Text in photos (issue 30): the ``ocr`` extra (RapidOCR, its models inside the wheel) reads signs and screenshots
rendered here with a real font, indexing stores the text as ``photo_text`` (added to old records without
re-embedding, re-read when a file changes, removed when it changes with reading off), and every way of searching
shows it: Python hits, ``pictrieve search`` (text and ``--json``), the page's JSON and MCP ``search_images``.
OCR errors are allowed: the checks look for key words. Galleries use the tiny random CLIP model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("rapidocr", reason="text in photos needs the 'ocr' extra: pip install -e '.[ocr]'")

from helpers import make_photo  # noqa: E402
from helpers.cli import CLI  # noqa: E402
from helpers.text_pictures import screenshot, sign  # noqa: E402

from pictrieve.tools.core.images import load_image  # noqa: E402
from pictrieve.tools.models.photo_text import OCR_EXTRA, PHOTO_TEXT_KEY, read_photo_text  # noqa: E402
from pictrieve.vectorstore.chroma_store import path_id  # noqa: E402
from pictrieve.vectorstore.gallery import Gallery  # noqa: E402


def _words(text: str) -> set[str]:
    return {word.strip(":,.").lower() for word in text.split()}


@pytest.fixture(scope="module")
def text_photos(tmp_path_factory):
    """A folder with a sign, a screenshot and two photos without text."""
    folder = tmp_path_factory.mktemp("text") / "photos"
    sign(folder / "sign.jpg")
    screenshot(folder / "Screenshot 2024-05-01.png")
    for i in range(2):
        make_photo(folder / f"noise{i}.png", seed=i, size=(320, 240))
    return folder


@pytest.fixture(scope="module")
def ocr_gallery(tmp_path_factory, text_photos, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path_factory.mktemp("g") / "g", tiny_clip_embedder)
    report = gallery.add(text_photos, progress=False, ocr=True)
    assert report.indexed == 4 and report.text_read == 4
    return gallery


def _text_of(gallery: Gallery, path) -> str | None:
    return gallery.metadata_of([path_id(path)])[path_id(path)].get(PHOTO_TEXT_KEY)


def test_the_reader_reads_a_sign_and_a_screenshot(text_photos):
    assert {"bakery", "open", "daily"} <= _words(read_photo_text(load_image(text_photos / "sign.jpg")))
    shot = read_photo_text(load_image(text_photos / "Screenshot 2024-05-01.png"))
    assert {"password", "sunflower42", "harborcafe", "wpa2"} <= _words(shot), shot
    assert read_photo_text(load_image(text_photos / "noise0.png")) == ""  # specks are not read as letters


def test_indexing_stores_the_text_and_hits_carry_it(ocr_gallery, text_photos):
    assert "sunflower42" in _words(_text_of(ocr_gallery, text_photos / "Screenshot 2024-05-01.png"))
    assert _text_of(ocr_gallery, text_photos / "noise1.png") == ""  # read: nothing there
    hits = ocr_gallery.search_text("a screenshot", k=4)
    by_name = {h.metadata["name"]: h for h in hits}
    assert "bakery" in _words(by_name["sign.jpg"].photo_text)
    assert by_name["noise0.png"].photo_text == ""
    # the text is searchable: hybrid search's keyword side reads photo_text
    assert ocr_gallery.search_text("the wifi password", k=1, hybrid=True)[0].metadata["name"] == "Screenshot 2024-05-01.png"
    assert ocr_gallery.search_text("bakery", k=1, hybrid=True)[0].metadata["name"] == "sign.jpg"


def test_old_galleries_gain_the_text_without_reembedding_and_it_follows_changes(tmp_path, tiny_clip_embedder):
    folder = tmp_path / "photos"
    sign(folder / "sign.jpg")
    make_photo(folder / "plain.png", seed=3, size=(320, 240))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    first = gallery.add(folder, progress=False)
    assert first.text_read == 0 and _text_of(gallery, folder / "sign.jpg") is None  # off unless asked
    ids = [path_id(folder / "sign.jpg"), path_id(folder / "plain.png")]
    marked = gallery.embeddings(ids) + 0.5  # a re-embedded record would lose the mark
    gallery.upsert(ids, marked, [{"path": str(folder / "sign.jpg")}, {"path": str(folder / "plain.png")}])
    gained = gallery.add(folder, progress=False, ocr=True)
    assert (gained.indexed, gained.unchanged, gained.text_read) == (0, 2, 2)
    assert np.allclose(gallery.embeddings(ids), marked)
    assert "bakery" in _words(_text_of(gallery, folder / "sign.jpg"))
    again = gallery.add(folder, progress=False)  # nothing changed: nothing read again
    assert (again.unchanged, again.text_read) == (2, 0)
    # the gallery remembers --ocr: a changed photo's text is read again on a plain index
    sign(folder / "sign.jpg", ("PHARMACY", "night service"))
    changed = gallery.add(folder, progress=False)
    assert (changed.indexed, changed.text_read) == (1, 1)
    assert "pharmacy" in _words(_text_of(gallery, folder / "sign.jpg"))
    # with --no-ocr a changed photo's old text goes (it no longer says what the photo shows)
    sign(folder / "sign.jpg", ("BOOKSHOP", "since 1901"))
    stopped = gallery.add(folder, progress=False, ocr=False)
    assert (stopped.indexed, stopped.text_read) == (1, 0)
    assert _text_of(gallery, folder / "sign.jpg") is None
    assert "sunflower42" not in json.dumps(gallery.metadata_of(ids))


def test_an_exact_copy_keeps_the_text_read_before(tmp_path, tiny_clip_embedder):
    import shutil

    folder = tmp_path / "photos"
    sign(folder / "sign.jpg")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    assert gallery.add(folder, progress=False, ocr=True).text_read == 1
    shutil.copy(folder / "sign.jpg", folder / "sign copy.jpg")
    report = gallery.add(folder, progress=False)
    assert (report.indexed, report.copied, report.text_read) == (1, 1, 0)  # its vector and its text were copied
    assert "bakery" in _words(_text_of(gallery, folder / "sign copy.jpg"))


def test_a_watched_folder_reads_the_text_of_new_photos_when_the_gallery_was_indexed_with_ocr(
        tmp_path, tiny_clip_embedder):
    from pictrieve.vectorstore.watching import update_folders

    folder = tmp_path / "photos"
    make_photo(folder / "plain.png", seed=3, size=(320, 240))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False, ocr=True)
    screenshot(folder / "new screenshot.png")  # what a watch batch picks up: no --ocr given to it
    batch = update_folders(gallery.views(), [folder.resolve()], [(folder / "new screenshot.png").resolve()], [])
    assert not batch.failed
    assert "sunflower42" in _words(_text_of(gallery, (folder / "new screenshot.png").resolve()))


def test_the_cli_reads_text_and_search_shows_it(tmp_path, text_photos, tiny_clip_name):
    gallery = str(tmp_path / "g")
    indexed = subprocess.run([*CLI, "index", str(text_photos), "-g", gallery, "-e", tiny_clip_name, "--ocr"],
                             capture_output=True, text=True, timeout=600)
    assert indexed.returncode == 0, indexed.stderr
    assert "read the text in 4 photos" in indexed.stdout
    found = subprocess.run([*CLI, "search", "wifi password", "-g", gallery, "-k", "4", "--json"],
                           capture_output=True, text=True, timeout=600)
    assert found.returncode == 0, found.stderr
    texts = {h["metadata"]["name"]: h["metadata"][PHOTO_TEXT_KEY] for h in json.loads(found.stdout)["hits"]}
    assert "sunflower42" in _words(texts["Screenshot 2024-05-01.png"])
    shown = subprocess.run([*CLI, "search", "wifi password", "-g", gallery, "-k", "4"],
                           capture_output=True, text=True, timeout=600)
    lines = [line for line in shown.stdout.splitlines() if line.strip().startswith("text:")]
    assert len(lines) == 2 and any("Password: sunflower42" in line or "sunflower42" in line for line in lines)


def test_without_the_extra_ocr_is_one_line_naming_it(tmp_path, text_photos, tiny_clip_name):
    blocked = ("import sys; sys.modules['rapidocr'] = None; "  # as if the extra were not installed
               "from pictrieve.cli.main import main; sys.argv[0] = 'pictrieve'; main()")
    result = subprocess.run([sys.executable, "-c", blocked, "index", str(text_photos), "-g", str(tmp_path / "g"),
                             "-e", tiny_clip_name, "--ocr"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"pip install '{OCR_EXTRA}'" in lines[0], result.stderr
    assert not (tmp_path / "g").exists()  # refused before anything was written


def test_the_page_and_mcp_show_the_text(ocr_gallery, text_photos, tmp_path):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    pytest.importorskip("mcp", reason="MCP needs the 'mcp' extra")
    import anyio
    from helpers.mcp import stdio_session
    from helpers.web_page import page_client

    from pictrieve.ui.app import create_app

    client = page_client(create_app(ocr_gallery, state_dir=tmp_path / "state"))
    hits = client.post("/api/search", json={"query": "a sign", "k": 4}).json()["hits"]
    assert any("bakery" in _words(h["metadata"].get(PHOTO_TEXT_KEY, "")) for h in hits)

    async def over_mcp() -> list[dict]:
        async with stdio_session(["--gallery", str(ocr_gallery.location)]) as session:
            result = await session.call_tool("search_images", {"query": "a wifi password", "k": 4})
            assert not result.isError, result.content
            return result.structuredContent["hits"]

    by_path = {h["path"]: h for h in anyio.run(over_mcp)}
    assert "sunflower42" in _words(by_path[str(text_photos / "Screenshot 2024-05-01.png")]["photo_text"])
    assert by_path[str(text_photos / "noise0.png")]["photo_text"] == ""
