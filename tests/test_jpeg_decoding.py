"""JPEGs decoded by OpenCV give Pillow's pixels, bit for bit, wherever the loader uses it (issue 40).

:func:`~pictrieve.tools.core.images.load_image` decodes ordinary JPEGs with OpenCV (half Pillow's time, the GIL
released) and everything else with Pillow. Indexing and every image query go through it, so a gallery and a query
see the same pixels; these tests hold those pixels equal to what Pillow alone decodes (the loader's answer before
OpenCV), EXIF Orientation applied, JPEG draft reduction included, and check that OpenCV really decoded them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.exif_photos import exif_block
from pictrieve.tools.core import images
from pictrieve.tools.core.images import ImageBytes, ImageDecodeError, load_image, load_service_image

DRAFT = (1024, 1024)  # indexing's JPEG draft (vectorstore.indexing.DRAFT_SIZE)
TRANSPOSE = {2: (Image.Transpose.FLIP_LEFT_RIGHT,), 3: (Image.Transpose.ROTATE_180,),
             4: (Image.Transpose.FLIP_TOP_BOTTOM,), 5: (Image.Transpose.TRANSPOSE,),
             6: (Image.Transpose.ROTATE_270,), 7: (Image.Transpose.TRANSVERSE,), 8: (Image.Transpose.ROTATE_90,)}


def pillow_pixels(path: Path, draft: tuple[int, int] | None = None) -> np.ndarray:
    """What Pillow alone decodes: the draft set as the loader sets it, converted to RGB, turned upright."""
    with Image.open(path) as image:
        if draft is not None and image.format == "JPEG":
            image.draft("RGB", draft)
        orientation = image.getexif().get(0x0112, 1)
        rgb = image.convert("RGB")
    for step in TRANSPOSE.get(orientation, ()):
        rgb = rgb.transpose(step)
    return np.asarray(rgb)


@pytest.fixture
def opencv_decodes(monkeypatch) -> list[str]:
    """The photos the loader decoded with OpenCV (so a test knows they did not all fall back to Pillow)."""
    assert images._opencv_jpeg() is not None, "OpenCV's JPEG decode does not match Pillow's on this install"
    decoded: list[str] = []
    real = images._decode_jpeg_with_opencv

    def counting(image):
        pixels = real(image)
        if pixels is not None:
            decoded.append(image.filename)
        return pixels

    monkeypatch.setattr(images, "_decode_jpeg_with_opencv", counting)
    return decoded


def textured(size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A photo-like picture: smooth gradients with noise on half of it (so chroma upsampling and the IDCT matter)."""
    width, height = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], axis=2)
    noise = rng.integers(-40, 40, size=(height, width, 3))
    pixels = np.where((x < width // 2)[..., None], base + noise, base)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def test_flickr_photos_decode_to_pillows_pixels(flickr_dir, opencv_decodes):
    photos = sorted((flickr_dir / "images").glob("*.jpg"))[::25]  # 20 photos across the folder
    for path in photos:
        assert np.array_equal(load_image(path, draft_size=DRAFT), pillow_pixels(path, DRAFT)), path
        assert np.array_equal(load_image(path), pillow_pixels(path)), path
    assert len(opencv_decodes) == 2 * len(photos)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_once_as_pillow_applies_it(tmp_path, opencv_decodes, orientation):
    path = tmp_path / f"turned-{orientation}.jpg"
    textured((96, 64), seed=orientation).save(path, "JPEG", quality=90, exif=exif_block(orientation))
    decoded = load_image(path)
    assert decoded.size == ((64, 96) if orientation >= 5 else (96, 64))
    assert np.array_equal(np.asarray(decoded), pillow_pixels(path))
    assert np.array_equal(np.asarray(load_image(ImageBytes(path.read_bytes(), "sent.jpg"))), pillow_pixels(path))
    assert opencv_decodes


@pytest.fixture(scope="module")
def big_photo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.jpg"
    textured((2100, 2060), seed=1).save(path, "JPEG", quality=85)
    return path


@pytest.mark.parametrize("draft, scale", [((1024, 1024), 2), ((512, 512), 4), ((256, 256), 8)])
def test_a_big_photo_is_reduced_as_pillows_draft_reduces_it(big_photo, opencv_decodes, draft, scale):
    path = big_photo
    with Image.open(path) as header:
        header.draft("RGB", draft)
        assert header.decoderconfig[0] == scale
    decoded = load_image(path, draft_size=draft)
    assert decoded.size == (-(-2100 // scale), -(-2060 // scale))
    assert np.array_equal(np.asarray(decoded), pillow_pixels(path, draft))
    assert len(opencv_decodes) == 1


@pytest.mark.parametrize("mode, options", [
    ("L", {}), ("L", {"progressive": True}), ("RGB", {"progressive": True}), ("RGB", {"subsampling": 0}),
    ("RGB", {"subsampling": 1}), ("RGB", {"optimize": True, "quality": 97}),
])
def test_greyscale_progressive_and_other_samplings_decode_alike(tmp_path, opencv_decodes, mode, options):
    path = tmp_path / "photo.jpg"
    textured((150, 110), seed=2).convert(mode).save(path, "JPEG", **options)
    for draft in (None, (64, 48)):
        assert np.array_equal(np.asarray(load_image(path, draft_size=draft)), pillow_pixels(path, draft))
    assert len(opencv_decodes) == 2


def test_other_formats_and_cmyk_stay_with_pillow(tmp_path, opencv_decodes):
    cmyk = tmp_path / "print.jpg"
    textured((80, 60)).convert("CMYK").save(cmyk, "JPEG")
    png = tmp_path / "photo.png"
    textured((80, 60)).save(png)
    for path in (cmyk, png):
        assert np.array_equal(np.asarray(load_image(path)), pillow_pixels(path))
    assert not opencv_decodes


def test_a_truncated_or_corrupt_jpeg_is_refused_as_before(tmp_path, monkeypatch):
    whole = tmp_path / "whole.jpg"
    textured((200, 150), seed=4).save(whole, "JPEG")
    data = whole.read_bytes()
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageDecodeError, match=r"truncated\.jpg: not a readable image \(image file is truncated"):
        load_image(truncated)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(data[:400] + b"\xff\xd9")  # ends with the end marker, yet the scan is cut short
    with pytest.raises(ImageDecodeError, match=r"broken\.jpg: not a readable image"):
        load_image(broken)
    class Lenient:  # an older OpenCV: libjpeg fills a truncated scan with grey and says nothing
        def __getattr__(self, name):
            return getattr(images._opencv_jpeg.__wrapped__(), name)

        @staticmethod
        def imdecode(buffer, flags):
            with Image.open(io.BytesIO(buffer.tobytes())) as header:
                return np.full((header.height, header.width, 3), 128, dtype=np.uint8)

    with monkeypatch.context() as patch:
        patch.setattr(images, "_opencv_jpeg", lambda: Lenient())
        with pytest.raises(ImageDecodeError, match="truncated"):
            load_image(truncated)
    trailing = tmp_path / "trailing.jpg"
    trailing.write_bytes(data + b"appended by some camera")
    assert np.array_equal(np.asarray(load_image(trailing)), pillow_pixels(trailing))


def test_indexing_and_a_query_by_image_see_the_same_pixels(flickr_dir, opencv_decodes):
    path = sorted((flickr_dir / "images").glob("*.jpg"))[7]
    indexed = load_image(path, draft_size=DRAFT)
    sent = load_service_image(ImageBytes(path.read_bytes(), "query.jpg"))
    assert np.array_equal(np.asarray(indexed), np.asarray(sent))
    assert np.array_equal(np.asarray(indexed), pillow_pixels(path))
    assert len(opencv_decodes) == 2


def test_opencv_is_used_only_where_it_matches_pillow(monkeypatch, tmp_path):
    import cv2

    assert images._opencv_decodes_as_pillow(cv2)
    real = cv2.imdecode

    class OffByOne:  # an OpenCV whose libjpeg rounds differently
        def __getattr__(self, name):
            return getattr(cv2, name)

        @staticmethod
        def imdecode(buffer, flags):
            pixels = real(buffer, flags)
            return np.where(pixels[..., :1] > 128, pixels - 1, pixels).astype(np.uint8)

    assert not images._opencv_decodes_as_pillow(OffByOne())
    monkeypatch.setattr(images, "_opencv_jpeg", lambda: None)  # what such an install gets: Pillow decodes
    path = tmp_path / "photo.jpg"
    textured((90, 70)).save(path, "JPEG")
    assert np.array_equal(np.asarray(load_image(path)), pillow_pixels(path))

    class Refusing:  # OpenCV refuses what Pillow may decode (its own 1 GP limit, with --max-pixels above it)
        def __getattr__(self, name):
            return getattr(cv2, name)

        @staticmethod
        def imdecode(buffer, flags):
            raise cv2.error("imdecode: image size is too large")

    monkeypatch.setattr(images, "_opencv_jpeg", lambda: Refusing())
    assert np.array_equal(np.asarray(load_image(path)), pillow_pixels(path))


def test_a_jpeg_bomb_is_refused_from_its_header_before_opencv_sees_it(tmp_path, opencv_decodes):
    path = tmp_path / "bomb.jpg"
    textured((400, 300)).save(path, "JPEG")
    with pytest.raises(images.ImageTooLargeError):
        load_image(path, max_pixels=100_000)
    assert not opencv_decodes
    buffer = io.BytesIO()
    textured((400, 300)).save(buffer, "JPEG")
    assert load_image(ImageBytes(buffer.getvalue(), "ok.jpg"), max_pixels=120_000).size == (400, 300)
