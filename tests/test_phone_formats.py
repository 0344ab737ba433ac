"""Phone formats (issue 30): HEIC/HEIF through the ``heic`` extra (pillow-heif) and AVIF through Pillow, indexed,
searched, shown and sent like JPEG. Every file is written here (pillow-heif encodes HEIC, Pillow AVIF); the
gallery is real Chroma with the tiny random CLIP model, the page is the real app, the CLI a real subprocess."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, features

pytest.importorskip("pillow_heif", reason="HEIC needs the 'heic' extra: pip install -e '.[heic]'")

from helpers import make_photo  # noqa: E402
from helpers.cli import CLI  # noqa: E402

from pictrieve.tools.core.images import (  # noqa: E402
    HEIC_EXTRA, ImageDecodeError, ImageTooLargeError, iter_image_files, load_image, load_service_image,
)
from pictrieve.tools.core.photo_metadata import read_photo_metadata  # noqa: E402
from pictrieve.vectorstore.chroma_store import path_id  # noqa: E402
from pictrieve.vectorstore.gallery import Gallery  # noqa: E402

AVIF = features.check("avif")


def _scene(width: int = 160, height: int = 120) -> Image.Image:
    """An asymmetric picture with broad areas (lossy HEIC keeps them): a gradient, a white block top-left."""
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    pixels = np.stack([np.broadcast_to(x, (height, width)), np.broadcast_to(y, (height, width)),
                       np.full((height, width), 60, np.float32)], axis=2).astype(np.uint8)
    pixels[: height // 3, : width // 4] = 255
    return Image.fromarray(pixels)


def _close(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute pixel difference (0-255) of two same-size pictures."""
    assert a.size == b.size, (a.size, b.size)
    return float(np.abs(np.asarray(a.convert("RGB"), np.float32) - np.asarray(b.convert("RGB"), np.float32)).mean())


def test_a_folder_walk_takes_heic_heif_and_avif(tmp_path):
    for name in ("a.heic", "b.HEIF", "c.avif", "d.hif", "e.jpg", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    found = {p.name for p in iter_image_files(tmp_path)}
    assert found == {"a.heic", "b.HEIF", "c.avif", "d.hif", "e.jpg"}


def test_a_heic_copy_of_a_dev_photo_is_found_by_its_jpeg(tmp_path, flickr_dir, tiny_clip_embedder):
    jpeg = sorted((flickr_dir / "images").glob("*.jpg"))[0]
    folder = tmp_path / "phone"
    folder.mkdir()
    with Image.open(jpeg) as photo:
        photo.save(folder / "IMG_0001.heic", format="HEIF", quality=90)
        if AVIF:
            photo.save(folder / "IMG_0002.avif", format="AVIF", quality=90)
        size = photo.size
    for i in range(4):
        make_photo(folder / f"other{i}.png", seed=i, size=(160, 120))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(folder, progress=False)
    assert not report.failed and report.indexed == 5 + AVIF
    hits = gallery.search_image(load_image(jpeg), k=3)
    top = {h.metadata["name"]: h.score for h in hits[: 1 + AVIF]}
    assert set(top) == {"IMG_0001.heic"} | ({"IMG_0002.avif"} if AVIF else set())
    assert min(top.values()) > 0.98, top
    meta = gallery.metadata_of([path_id(folder / "IMG_0001.heic")])[path_id(folder / "IMG_0001.heic")]
    assert (meta["width"], meta["height"]) == size


def _sideways_heic(path: Path) -> Image.Image:
    """What a phone writes: the pixels as the sensor saw them (turned) and Orientation 6 saying "turn them back"."""
    upright = _scene()
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F], exif[0x0110] = "Apple", "iPhone 15"
    upright.transpose(Image.Transpose.ROTATE_90).save(path, format="HEIF", exif=exif.tobytes(), quality=95)
    return upright


def test_an_orientation_6_heic_is_read_upright_everywhere(tmp_path, tiny_clip_embedder):
    folder = tmp_path / "phone"
    folder.mkdir()
    upright = _sideways_heic(folder / "side.heic")
    assert _close(load_image(folder / "side.heic"), upright) < 6  # upright, and turned once only
    assert _close(load_service_image(folder / "side.heic"), upright) < 6
    meta = read_photo_metadata(folder / "side.heic")
    assert (meta.fields["width"], meta.fields["height"], meta.fields["camera"]) == (160, 120, "Apple iPhone 15")
    upright.save(tmp_path / "upright.png")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    (hit,) = gallery.search_image(load_image(tmp_path / "upright.png"), k=1)
    assert hit.metadata["name"] == "side.heic" and hit.score > 0.98, hit.score


def _declaring(path: Path, side: int) -> Path:
    """A small real HEIC whose header (its ``ispe`` box) declares ``side`` x ``side`` pixels: what a
    decompression bomb looks like from outside."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), "red").save(buffer, format="HEIF")
    data = bytearray(buffer.getvalue())
    at = data.find(b"ispe")
    assert at > 0
    data[at + 8: at + 16] = struct.pack(">II", side, side)
    path.write_bytes(bytes(data))
    return path


def test_a_heic_sent_to_a_server_is_decoded_within_its_budget(tmp_path):
    _sideways_heic(tmp_path / "ok.heic")
    assert load_service_image(tmp_path / "ok.heic").size == (160, 120)
    with pytest.raises(ImageTooLargeError, match="13000x13000"):
        load_service_image(_declaring(tmp_path / "bomb.heic", 13000))


def test_the_page_shows_a_heic_as_jpeg_and_searches_by_one(tmp_path, tiny_clip_embedder):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    from helpers.web_page import page_client

    from pictrieve.ui.app import create_app

    folder = tmp_path / "phone"
    folder.mkdir()
    upright = _sideways_heic(folder / "side.heic")
    for i in range(3):
        make_photo(folder / f"other{i}.png", seed=i, size=(160, 120))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    client = page_client(create_app(gallery, state_dir=tmp_path / "state"))
    heic_id = path_id(folder / "side.heic")
    shown = client.get(f"/api/image/{heic_id}")
    assert shown.status_code == 200 and shown.headers["content-type"] == "image/jpeg"
    with Image.open(io.BytesIO(shown.content)) as jpeg:
        assert jpeg.format == "JPEG" and _close(jpeg, upright) < 8  # upright, as the model saw it
    png = client.get(f"/api/image/{path_id(folder / 'other0.png')}")
    assert png.content == (folder / "other0.png").read_bytes()  # what browsers show goes as it is
    found = client.post("/api/search", files={"image": ("IMG_7.HEIC", (folder / "side.heic").read_bytes(),
                                                        "image/heic")}, data={"k": "2"})
    assert found.status_code == 200, found.text
    top = found.json()["hits"][0]
    assert top["id"] == heic_id and top["score"] > 0.99


_WITHOUT_HEIF = ("import sys; sys.modules['pillow_heif'] = None; "  # as if the extra were not installed
                 "from pictrieve.cli.main import main; sys.argv[0] = 'pictrieve'; main()")


def test_without_the_extra_a_heic_is_skipped_with_one_line_naming_it(tmp_path, tiny_clip_name):
    folder = tmp_path / "phone"
    folder.mkdir()
    _sideways_heic(folder / "side.heic")
    make_photo(folder / "fine.png", seed=1)
    result = subprocess.run([sys.executable, "-c", _WITHOUT_HEIF, "index", str(folder), "-g", str(tmp_path / "g"),
                             "-e", tiny_clip_name], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "indexed 1, unchanged 0, failed 1" in result.stdout
    skipped = [line for line in result.stderr.splitlines() if "side.heic" in line]
    assert len(skipped) == 1 and f"pip install '{HEIC_EXTRA}'" in skipped[0], result.stderr
    assert "Traceback" not in result.stderr
    with_extra = subprocess.run([*CLI, "index", str(folder), "-g", str(tmp_path / "g"), "-e", tiny_clip_name],
                                capture_output=True, text=True, timeout=600)
    assert "indexed 1, unchanged 1, failed 0" in with_extra.stdout, with_extra.stderr


def test_a_heic_that_does_not_decode_says_so_in_one_line(tmp_path):
    broken = tmp_path / "broken.heic"
    _sideways_heic(broken)
    broken.write_bytes(broken.read_bytes()[:200])
    with pytest.raises(ImageDecodeError, match="broken.heic: not a readable image"):
        load_image(broken)


@pytest.mark.server
async def test_mcp_gives_a_heic_as_jpeg_and_hits_say_when_where_and_with_what(tmp_path, tiny_clip_embedder):
    """An agent reading ``pictrieve://image/{id}`` of a HEIC gets a JPEG it can show (upright), and search hits
    carry the photo's capture time, place and camera, as the CLI and the page show them (issue 30)."""
    pytest.importorskip("mcp", reason="the MCP server needs the 'mcp' extra")
    from helpers.exif_photos import exif_block
    from helpers.mcp import stdio_session

    folder = tmp_path / "phone"
    folder.mkdir()
    upright = _sideways_heic(folder / "side.heic")
    _scene().save(folder / "lisbon.jpg", exif=exif_block(taken="2024:06:12 18:30:00", offset="+01:00",
                                                        gps=(38.7223, -9.1393), make="Apple", model="iPhone 13"))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    async with stdio_session(["--gallery", str(gallery.location), "--state-dir", str(tmp_path / "mcp")]) as session:
        photo = (await session.read_resource(f"pictrieve://image/{path_id(folder / 'side.heic')}")).contents[0]
        import base64

        with Image.open(io.BytesIO(base64.b64decode(photo.blob))) as jpeg:
            assert jpeg.format == "JPEG" and _close(jpeg, upright) < 8
        found = await session.call_tool("search_images", {"query": "a photo", "k": 2, "hybrid": False})
        hits = {hit["id"]: hit for hit in found.structuredContent["hits"]}
        dated = await session.call_tool("search_images", {"query": "a photo", "k": 2, "after": "2000-01-01",
                                                          "exif_dates_only": True})
        assert [hit["id"] for hit in dated.structuredContent["hits"]] == [path_id(folder / "lisbon.jpg")]
    lisbon = hits[path_id(folder / "lisbon.jpg")]
    assert lisbon["taken_at"].startswith("2024-06-12T18:30:00") and "Lisbon" in lisbon["place"]
    assert "iPhone 13" in lisbon["camera"] and lisbon["date"] == "2024-06-12"
    side = hits[path_id(folder / "side.heic")]  # no EXIF time: its file's date, said to be one
    assert not side.get("taken_at") and side["file_date"] and side["date"].endswith(" (file date)")
