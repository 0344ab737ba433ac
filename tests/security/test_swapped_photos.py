"""A gallery photo is served only as the file that was indexed (issue 38, Why 2).

Someone who can write into a photo folder (a shared or synced one) replaces an indexed photo: by a link to a
file the server's user may read (a secret text, a private picture outside the folders), by a link standing for
its folder, by a file that is no image, or by a FIFO. Every route that gives a caller a gallery photo refuses
each in one line and sends nothing of the file: the page's ``/api/image/<id>``, "more like this" and Ask about a
gallery photo (a real uvicorn), MCP's
``pictrieve://image/<id>`` resource and a gallery id given to a tool (a real ``pictrieve mcp`` over stdio),
the id of a served run's image input and the LangChain tools (:func:`image_argument`), and the thumbnails in
search results (:func:`photo_blocks`). The untouched photo beside them is still served byte for byte.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from helpers import make_photo
from pictrieve.tools.core.image_inputs import ImageInputError, gallery_image_lookup, image_argument
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.hits import photo_blocks

SECRET = "SWAPPED-SECRET-4471"
SWAPS = ("link_to_secret", "link_to_private_picture", "linked_folder", "not_an_image", "fifo")
REFUSED = {"link_to_secret": "replaced by a link", "link_to_private_picture": "replaced by a link",
           "linked_folder": "replaced by a link", "not_an_image": "does not decode as an image",
           "fifo": "no longer a regular file"}


@pytest.fixture(scope="module")
def swapped(tmp_path_factory, tiny_clip_name):
    """A gallery of six photos, one per swap and one kept; then each swap done as an attacker would."""
    root = tmp_path_factory.mktemp("swapped")
    names = [*SWAPS, "kept"]
    for i, name in enumerate(names):
        folder = root / "photos" / (name if name == "linked_folder" else "flat")
        make_photo(folder / f"{name}.png", seed=i)
    gallery = Gallery.open(root / "gallery", tiny_clip_name)
    gallery.add(root / "photos", progress=False)
    ids = {Path(item.path).stem: item.id for item in gallery.items()}
    assert sorted(ids) == sorted(names)
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    Image.new("RGB", (40, 30), (7, 8, 9)).save(outside / "private.png")
    (outside / "folder").mkdir()
    Image.new("RGB", (40, 30), (9, 8, 7)).save(outside / "folder" / "linked_folder.png")
    flat = root / "photos" / "flat"
    for name, target in (("link_to_secret", outside / "secret.txt"), ("link_to_private_picture", outside / "private.png")):
        (flat / f"{name}.png").unlink()
        (flat / f"{name}.png").symlink_to(target)
    shutil.rmtree(root / "photos" / "linked_folder")
    (root / "photos" / "linked_folder").symlink_to(outside / "folder", target_is_directory=True)
    (flat / "not_an_image.png").write_text(f"{SECRET}\n")
    (flat / "fifo.png").unlink()
    os.mkfifo(flat / "fifo.png")
    return SimpleNamespace(root=root, gallery=gallery, ids=ids, kept=flat / "kept.png")


def test_the_page_refuses_every_swapped_photo_and_serves_the_kept_one(swapped, tmp_path):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    import httpx

    from helpers.plugir_fakes import ScriptedChatModel
    from helpers.web_page import serve
    from pictrieve.ui.app import create_app

    app = create_app(swapped.gallery, needs={"llm": ScriptedChatModel(questions=["Is it red?"]), "captioner": "none"},
                     state_dir=tmp_path / "state")
    with serve(app) as url:
        for name in SWAPS:
            started = time.monotonic()
            answer = httpx.get(f"{url}/api/image/{swapped.ids[name]}", timeout=90)
            assert answer.status_code == 404 and REFUSED[name] in answer.json()["error"], (name, answer.text)
            assert SECRET not in answer.text and str(swapped.root) not in answer.text
            assert time.monotonic() - started < 60, f"{name}: the page waited on the file"  # a FIFO never opens
            for route, body in (("/api/search", {"like": swapped.ids[name]}),
                                ("/api/ask", {"photo": swapped.ids[name], "question": "what is it?"})):
                refused = httpx.post(url + route, json=body, timeout=60)
                assert refused.status_code == 400 and REFUSED[name] in refused.json()["error"], (name, route, refused.text)
        kept = httpx.get(f"{url}/api/image/{swapped.ids['kept']}", timeout=30)
        assert kept.status_code == 200 and kept.content == swapped.kept.read_bytes()
        assert kept.headers["content-type"] == "image/png"
        like = httpx.post(url + "/api/search", json={"like": swapped.ids["kept"]}, timeout=120)
        assert like.status_code == 200 and like.json()["hits"][0]["id"] == swapped.ids["kept"]


async def test_mcp_refuses_every_swapped_photo_as_a_resource_and_as_a_tool_argument(swapped):
    pytest.importorskip("mcp", reason="the MCP server needs the 'mcp' extra")
    from mcp.shared.exceptions import McpError

    from helpers.mcp import error_text, stdio_session

    async with stdio_session(["-g", str(swapped.root / "gallery")]) as session:
        for name in SWAPS:
            with pytest.raises(McpError) as refused:
                await session.read_resource(f"pictrieve://image/{swapped.ids[name]}")
            assert REFUSED[name] in str(refused.value) and SECRET not in str(refused.value), name
            result = await session.call_tool("search_by_image", {"image": swapped.ids[name], "k": 2})
            assert result.isError and REFUSED[name] in error_text(result), (name, error_text(result))
        kept = (await session.read_resource(f"pictrieve://image/{swapped.ids['kept']}")).contents[0]
        assert base64.b64decode(kept.blob) == swapped.kept.read_bytes()


@pytest.mark.parametrize("name", SWAPS)
def test_a_gallery_id_given_as_an_image_argument_is_refused(swapped, name):
    """What served runs (`pictrieve serve`'s image inputs), the LangChain tools and MCP's tools resolve ids with."""
    with pytest.raises(ImageInputError, match=REFUSED[name]) as refused:
        with image_argument(swapped.ids[name], lookup_id=gallery_image_lookup(swapped.gallery)):
            pass
    assert SECRET not in str(refused.value)


def test_a_gallery_id_argument_is_read_once_into_a_private_copy(swapped):
    """The graph reads a copy made from the checked bytes, so swapping the file after the check changes
    nothing it sees."""
    with image_argument(swapped.ids["kept"], lookup_id=gallery_image_lookup(swapped.gallery)) as path:
        assert Path(path) != swapped.kept and Path(path).read_bytes() == swapped.kept.read_bytes()


def test_search_result_thumbnails_of_swapped_photos_are_left_out(swapped):
    hits = [{"id": swapped.ids[name], "path": item.path, "score": 0.5} for name in (*SWAPS, "kept")
            for item in swapped.gallery.get([swapped.ids[name]])]
    blocks = photo_blocks(hits)
    images = [block for block in blocks if block["type"] == "image"]
    texts = [block["text"] for block in blocks if block["type"] == "text"]
    assert len(images) == 1 and texts[-1].startswith("Photo 6")
    assert all("cannot be read" in text for text in texts[:-1])


def test_visual_rag_sends_no_swapped_photo_to_the_reader(swapped):
    """MCP's ``ask_gallery`` (VisRet's reader) puts the best photos into the chat model's message: a swapped one
    goes as "(picture unreadable)" and its caption, never as the file a link points to."""
    from pictrieve.agents.visret.reader import reader_messages
    from pictrieve.vectorstore.hits import as_hit

    hits = [as_hit({"id": swapped.ids[name], "path": item.path, "score": 0.5}) for name in (*SWAPS, "kept")
            for item in swapped.gallery.get([swapped.ids[name]])]
    parts = reader_messages("what is it?", hits, images=True)[1].content
    assert sum(part["type"] == "image_url" for part in parts) == 1
    assert [part["text"] for part in parts if "unreadable" in part.get("text", "")] == [
        f"Picture {n}: (picture unreadable) (no description available)" for n in range(1, len(SWAPS) + 1)]
