"""A picture from a network caller costs bounded memory (MCP, the page, the served graphs' image inputs).

The picture of the issue: a PNG of 13000x13000 (169 MP, just under the desktop indexer's 180 MP cap) that
takes a few hundred kilobytes. It must be refused from its header, before a pixel is decoded; a JPEG of the
same size is accepted, decoded reduced (draft mode). Both are sent to the real servers (``pictrieve mcp``
over streamable HTTP with the official client, ``pictrieve ui`` with a multipart upload), and each server
process's peak resident memory is read from ``/proc`` around the request: the issue measured 1.3 GB added by
one upload and 6 GB peaks over MCP.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from helpers import free_port, make_photo, stop_process
from helpers.big_pictures import flat_jpeg, flat_png, peak_added
from helpers.mcp import HttpServer, error_text, server_env
from pictrieve.tools.core.image_inputs import AllowedDirs, ImageInputError, image_argument, image_file
from pictrieve.tools.core.images import (
    DEFAULT_MAX_PIXELS, SERVICE_SIDE, ImageTooLargeError, load_image, load_service_image)

BOUND = 512 * 2**20
"""Most a server's peak may rise for one picture here (the issue asks under 1 GiB; decoding the 169 MP PNG
fully costs about 680 MB: 169 MB grey, then 507 MB as RGB)."""
SIDE = 13000


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pictures")
    return {"png": flat_png(folder / "flat.png", SIDE, SIDE), "jpeg": flat_jpeg(folder / "flat.jpg", SIDE, SIDE),
            "small": make_photo(folder / "small.png", seed=1, size=(64, 48))}


# --- the decoder ------------------------------------------------------------------------------------------


def test_the_png_is_refused_from_its_header_and_the_jpeg_is_decoded_reduced(pictures):
    assert (SIDE * SIDE) < DEFAULT_MAX_PIXELS  # the indexer's cap would let it through (local indexing keeps it)
    assert os.path.getsize(pictures["png"]) < 300_000
    with peak_added(os.getpid()) as added:
        with pytest.raises(ImageTooLargeError, match=r"13000x13000 = 169 MP is more than this server decodes"):
            load_service_image(pictures["png"])
        reduced = load_service_image(pictures["jpeg"])
    assert max(reduced.size) == SERVICE_SIDE and reduced.mode == "RGB"
    assert added.bytes < 64 * 2**20, added  # nothing near the 507 MB a full decode of either takes


def test_a_small_picture_comes_back_as_it_is(pictures):
    assert load_service_image(pictures["small"]).size == load_image(pictures["small"]).size == (64, 48)


def test_an_image_argument_larger_than_the_models_need_reaches_the_graph_reduced(tmp_path):
    allowed = tmp_path / "allowed"
    small = make_photo(allowed / "small.png", seed=2, size=(300, 200))
    big = make_photo(allowed / "big.png", seed=3, size=(3000, 2000))
    dirs = AllowedDirs.of([allowed])
    with image_argument(str(small), allowed=dirs) as path:
        assert path != str(small) and Path(path).read_bytes() == small.read_bytes()  # a private copy, as it is
    with image_argument(str(big), allowed=dirs) as path:
        assert path != str(big) and Image.open(path).size == (SERVICE_SIDE, 1024)
    assert not Path(path).exists()  # the copy goes with the block
    with pytest.raises(ImageInputError, match="more than this server decodes"):
        with image_argument(str(big), allowed=dirs, max_pixels=1_000_000):
            pass


def test_a_served_run_keeps_its_pictures_in_a_folder_it_owns(tmp_path):
    """``image_file``: what a served run resolves lives in the run's folder (two pictures, two files) until
    the run removes it, reduced like every caller's picture."""
    big = make_photo(tmp_path / "big.png", seed=6, size=(2000, 1000))
    data = base64.b64encode(big.read_bytes()).decode("ascii")
    run = tmp_path / "run"
    run.mkdir()
    first, second = image_file(data, run), image_file(data, run)
    assert first != second and Path(first).parent == run == Path(second).parent
    assert Image.open(first).size == Image.open(second).size == (SERVICE_SIDE, 768)


def test_the_allowed_folder_is_a_folder_not_a_string_prefix(tmp_path):
    allowed = tmp_path / "data" / "allowed"
    evil = make_photo(tmp_path / "data" / "allowed-evil" / "photo.png", seed=4)
    inside = make_photo(allowed / "photo.png", seed=5)
    dirs = AllowedDirs.of([allowed])
    assert dirs.resolve(inside) == inside.resolve()
    with pytest.raises(ImageInputError, match="outside the folders this server may read"):
        with image_argument(str(evil), allowed=dirs):
            pass


# --- the servers, measured ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("budget")
    for i in range(3):
        make_photo(root / "photos" / f"{i}.png", seed=i, size=(64, 48))
    opened = Gallery.open(root / "gallery", tiny_clip_name)
    opened.add(root / "photos", progress=False)
    return root / "gallery"


@pytest.mark.server
async def test_mcp_refuses_the_png_and_takes_the_jpeg_reduced_in_bounded_memory(gallery, pictures):
    server = HttpServer(["-g", str(gallery), "--state-dir", str(gallery.parent / "state")])
    try:
        async with server.session() as session:
            def data(name):
                return base64.b64encode(pictures[name].read_bytes()).decode("ascii")

            warm = await session.call_tool("search_by_image", {"image": data("small"), "k": 1})  # loads the embedder
            assert not warm.isError, warm.content
            with peak_added(server.process.pid) as added:
                refused = await session.call_tool("search_by_image", {"image": data("png"), "k": 1})
            assert added.bytes < BOUND, added
            refused = error_text(refused)
            assert "13000x13000 = 169 MP is more than this server decodes" in refused, refused
            with peak_added(server.process.pid) as added:
                taken = await session.call_tool("search_by_image", {"image": data("jpeg"), "k": 2})
            assert not taken.isError, taken.content
            assert len(taken.structuredContent["hits"]) == 2
            assert added.bytes < BOUND, added
    finally:
        server.stop()


@pytest.mark.server
def test_the_page_refuses_the_png_and_takes_the_jpeg_reduced_in_bounded_memory(gallery, pictures, tmp_path):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    port = free_port()
    log = open(tmp_path / "ui.log", "wb")
    page = subprocess.Popen([sys.executable, "-m", "pictrieve.cli.main", "ui", "-g", str(gallery), "--port", str(port),
                             "--state-dir", str(tmp_path / "state")], env=server_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _listening(port):
            assert page.poll() is None and time.monotonic() < deadline, (tmp_path / "ui.log").read_text()
            time.sleep(0.2)
        headers = {"Origin": url, "Sec-Fetch-Site": "same-origin"}  # the page's own requests

        def upload(name):
            files = {"image": (pictures[name].name, pictures[name].read_bytes(), "application/octet-stream")}
            return httpx.post(f"{url}/api/search", files=files, data={"k": "2"}, headers=headers, timeout=300)

        assert upload("small").status_code == 200  # loads the embedder
        with peak_added(page.pid) as added:
            refused = upload("png")
        assert added.bytes < BOUND, added
        assert refused.status_code == 400 and "169 MP is more than this server decodes" in refused.json()["error"]
        with peak_added(page.pid) as added:
            taken = upload("jpeg")
        assert taken.status_code == 200 and len(taken.json()["hits"]) == 2, taken.text
        assert added.bytes < BOUND, added
    finally:
        stop_process(page)
        log.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
