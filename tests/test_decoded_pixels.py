"""The indexer's photos as pixels (issue 40.1): :func:`~pictrieve.tools.core.images.load_pixels` (the guarded loader's
upright RGB array, a JPEG OpenCV decodes never made a PIL image), ``upright_pixels`` (EXIF Orientation on an array),
the perceptual hash of pixels, and ``prepare_file`` decoding a photo once, as pixels for an embedder that offers
``preprocess_pixels`` (the offline default where torch runs its trunk: a GPU) and the hash, and as a PIL image only
for an embedder without it or the text reader.

Each new array path is held to the PIL path it stands beside, bit for bit: ``load_pixels`` to ``load_image`` (the
same pixels, the same errors), ``upright_pixels`` to Pillow's transposes, the hash of pixels to the hash of the image.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import make_photo
from helpers.exif_photos import exif_block
from pictrieve.tools.core import images
from pictrieve.tools.core.images import (
    ImageDecodeError, ImageTooLargeError, file_sha256, load_image, load_pixels, upright_pixels,
)
from pictrieve.tools.core.perceptual_hash import _median, perceptual_hash
from pictrieve.tools.core.photo_metadata import read_photo_metadata
from pictrieve.vectorstore import indexing
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.indexing import DRAFT_SIZE, PHASH_KEY, PlannedFile, prepare_file

PILLOW_TRANSPOSES = {  # EXIF Orientation -> Pillow's transposes that turn the stored photo upright
    2: [Image.Transpose.FLIP_LEFT_RIGHT], 3: [Image.Transpose.ROTATE_180], 4: [Image.Transpose.FLIP_TOP_BOTTOM],
    5: [Image.Transpose.TRANSPOSE], 6: [Image.Transpose.ROTATE_270], 7: [Image.Transpose.TRANSVERSE],
    8: [Image.Transpose.ROTATE_90],
}


def random_pixels(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, channels), dtype=np.uint8)


def save_turned(path: Path, orientation: int, size: tuple[int, int] = (96, 64)) -> Path:
    """A JPEG stored sideways or mirrored, as a phone writes it: the pixels as stored, EXIF Orientation saying how to
    show them."""
    Image.fromarray(random_pixels(size[1], size[0], seed=orientation)).save(
        path, "JPEG", quality=90, exif=exif_block(orientation))
    return path


@pytest.fixture(params=["opencv", "pillow"])
def decoder(request, monkeypatch) -> str:
    """Each test twice: JPEGs decoded by OpenCV as the loader prefers, then every file by Pillow (an install where
    OpenCV's decode differs from Pillow's, or is missing)."""
    if request.param == "opencv":
        assert images._opencv_jpeg() is not None, "OpenCV's JPEG decode does not match Pillow's on this install"
    else:
        monkeypatch.setattr(images, "_opencv_jpeg", lambda: None)
    return request.param


def same_pixels(path: Path | images.ImageBytes, **options) -> np.ndarray:
    """``load_pixels`` of ``path``, checked against ``load_image`` of it."""
    pixels = load_pixels(path, **options)
    assert pixels.dtype == np.uint8 and pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.flags.c_contiguous
    assert np.array_equal(pixels, np.asarray(load_image(path, **options))), path
    return pixels


# -- load_pixels: load_image's pixels and errors -----------------------------------------------------------------
def test_flickr_photos_load_as_the_images_pixels(flickr_dir, decoder):
    for path in sorted((flickr_dir / "images").glob("*.jpg"))[::25]:  # 20 photos across the folder
        same_pixels(path)
        same_pixels(path, draft_size=DRAFT_SIZE)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_is_applied_as_load_image_applies_it(tmp_path, decoder, orientation):
    path = save_turned(tmp_path / f"turned-{orientation}.jpg", orientation)
    pixels = same_pixels(path)
    assert pixels.shape == ((96, 64, 3) if orientation >= 5 else (64, 96, 3))
    with Image.open(path) as stored:  # Pillow alone, as a viewer turns it
        upright = stored.convert("RGB")
    for step in PILLOW_TRANSPOSES.get(orientation, []):
        upright = upright.transpose(step)
    assert np.array_equal(pixels, np.asarray(upright))
    same_pixels(images.ImageBytes(path.read_bytes(), "sent.jpg"))


def test_other_formats_and_a_reduced_big_jpeg_load_as_the_images_pixels(tmp_path, decoder):
    png = make_photo(tmp_path / "photo.png", seed=1, size=(80, 60))
    rgba = tmp_path / "alpha.png"
    Image.fromarray(random_pixels(50, 70, channels=4, seed=2), "RGBA").save(rgba)
    photo = Image.open(make_photo(tmp_path / "photo.jpg", seed=3, size=(80, 60))).convert("RGB")
    grey, cmyk, big = tmp_path / "grey.jpg", tmp_path / "print.jpg", tmp_path / "big.jpg"
    photo.convert("L").save(grey, "JPEG")
    photo.convert("CMYK").save(cmyk, "JPEG")
    photo.resize((2100, 2060), Image.Resampling.BILINEAR).save(big, "JPEG", quality=85)
    for path in (png, rgba, grey, cmyk, tmp_path / "photo.jpg"):
        same_pixels(path)
    assert same_pixels(big, draft_size=DRAFT_SIZE).shape == (1030, 1050, 3)  # JPEG draft: decoded at 1/2
    assert same_pixels(big, draft_size=(256, 256)).shape == (258, 263, 3)  # at 1/8


def test_a_jpeg_that_opencv_decodes_never_becomes_a_pil_image(tmp_path, monkeypatch):
    """``load_pixels`` hands OpenCV's array on (turned upright), without the round trip through a PIL image that
    ``load_image`` makes."""
    assert images._opencv_jpeg() is not None
    photos = [save_turned(tmp_path / f"turned-{orientation}.jpg", orientation) for orientation in (1, 6)]
    made: list[tuple[int, ...]] = []
    real = Image.fromarray
    monkeypatch.setattr(Image, "fromarray", lambda array, *args, **kwargs: made.append(array.shape) or real(array, *args, **kwargs))
    for path in photos:
        load_pixels(path)
    assert made == []
    load_image(photos[1])
    assert made == [(96, 64, 3)]  # the test would see one: load_image's


def bad_files(folder: Path) -> dict[str, Path]:
    whole = make_photo(folder / "whole.jpg", seed=4, size=(120, 90)).read_bytes()
    files = {"empty.jpg": b"", "truncated.jpg": whole[: len(whole) // 2], "text.jpg": b"this is not a photo\n",
             "broken.png": make_photo(folder / "whole.png", seed=4).read_bytes()[:60]}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {name: folder / name for name in files}


def raised(load, *args, **kwargs) -> ImageDecodeError:
    with pytest.raises(ImageDecodeError) as caught:
        load(*args, **kwargs)
    return caught.value


def test_a_bad_or_too_large_file_is_refused_as_load_image_refuses_it(tmp_path, decoder):
    for name, path in bad_files(tmp_path).items():
        expected, got = raised(load_image, path), raised(load_pixels, path)
        assert (type(got), str(got)) == (type(expected), str(expected)), name
        assert "\n" not in str(got) and path.name in str(got)
    big = make_photo(tmp_path / "big.jpg", seed=5, size=(400, 300))
    for options in ({"max_pixels": 100_000}, {"max_pixels": 20_000, "draft_size": (200, 150)}):
        expected, got = raised(load_image, big, **options), raised(load_pixels, big, **options)
        assert isinstance(got, ImageTooLargeError) and str(got) == str(expected)
        assert (got.size, got.cap) == (expected.size, expected.cap)
    assert same_pixels(big, max_pixels=40_000, draft_size=(200, 150)).shape == (150, 200, 3)


@pytest.mark.parametrize("orientation", range(0, 10))
@pytest.mark.parametrize("channels", [3, 4])
def test_upright_pixels_turns_an_array_as_pillows_transposes_turn_the_image(orientation, channels):
    stored = random_pixels(5, 7, channels, seed=orientation)
    expected = Image.fromarray(stored)
    for step in PILLOW_TRANSPOSES.get(orientation, []):  # 0 and 9 are not orientations: left as they are
        expected = expected.transpose(step)
    turned = upright_pixels(stored, orientation)
    assert turned.flags.c_contiguous and np.array_equal(turned, np.asarray(expected))
    if orientation not in PILLOW_TRANSPOSES:
        assert turned is stored  # nothing to turn: no copy
    else:
        assert not np.shares_memory(turned, stored)


# -- the perceptual hash of pixels -----------------------------------------------------------------------------
def test_the_hash_of_the_pixels_is_the_hash_of_the_image(flickr_dir):
    for path in sorted((flickr_dir / "images").glob("*.jpg"))[5::25]:
        pixels = load_pixels(path, draft_size=DRAFT_SIZE)
        assert perceptual_hash(pixels) == perceptual_hash(Image.fromarray(pixels)) == \
            perceptual_hash(load_image(path, draft_size=DRAFT_SIZE)), path
    for height, width in ((20, 30), (31, 200), (1, 1)):  # smaller than the 32x32 sample: the bilinear branch
        pixels = random_pixels(height, width, seed=height)
        assert perceptual_hash(pixels) == perceptual_hash(Image.fromarray(pixels))


@pytest.mark.parametrize("length", [1, 2, 3, 4, 62, 63, 64, 101])
def test_median_is_numpys_median(length):
    rng = np.random.default_rng(length)
    for values in (rng.normal(scale=300.0, size=length), rng.integers(-3, 3, size=length).astype(np.float64),
                   np.full(length, 7.25), np.sort(rng.normal(size=length))[::-1].copy()):
        before = values.copy()
        assert _median(values) == float(np.median(values)), values
        assert np.array_equal(values, before)  # the caller's array is left as it was


# -- prepare_file: one decode, pixels unless a PIL image is asked for -----------------------------------------
@pytest.fixture
def decodes(monkeypatch) -> Counter:
    """What ``prepare_file`` decodes and makes from now on: calls of the indexer's ``load_pixels`` and ``load_image``,
    and the PIL images the indexer itself makes of pixels (``Image.fromarray`` called from its module; the hash
    makes its own for the grey conversion)."""
    made: Counter = Counter()
    for name in ("load_pixels", "load_image"):
        real = getattr(indexing, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            made[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(indexing, name, counted)
    real_fromarray = Image.fromarray

    def fromarray(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__") == indexing.__name__:
            made["Image.fromarray"] += 1
        return real_fromarray(*args, **kwargs)

    monkeypatch.setattr(Image, "fromarray", fromarray)
    return made


@pytest.fixture(params=["sideways.jpg", "photo.png"])
def photo(request, tmp_path) -> Path:
    """A JPEG stored sideways (EXIF Orientation 6: OpenCV decodes it) and a PNG (Pillow decodes it)."""
    if request.param.endswith(".jpg"):
        return save_turned(tmp_path / request.param, 6, size=(300, 200))
    return make_photo(tmp_path / request.param, seed=8, size=(300, 200))


def planned(path: Path, *embedders: str, read_text: bool = False) -> PlannedFile:
    return PlannedFile(str(path), path_id(path), list(embedders), read_text=read_text)


def expected_phash(path: Path) -> str:
    return perceptual_hash(load_image(path, draft_size=DRAFT_SIZE))


def test_an_embedder_with_preprocess_pixels_gets_pixels_and_no_pil_image_is_made(photo, offline_on_gpu, decodes):
    expected = offline_on_gpu.preprocess_pixels(np.asarray(load_image(photo, draft_size=DRAFT_SIZE)))
    decodes.clear()
    prepared = prepare_file(planned(photo, "offline"), {"offline": offline_on_gpu})
    assert decodes == {"load_pixels": 1}
    assert np.array_equal(prepared.inputs["offline"], expected)
    assert prepared.metadata[PHASH_KEY] == expected_phash(photo)


@pytest.mark.parametrize("which", ["tiny clip", "offline on a cpu"])
def test_an_embedder_without_preprocess_pixels_gets_a_pil_image(photo, tiny_clip_embedder, default_offline, decodes,
                                                                  which):
    """open_clip has no ``preprocess_pixels``; the offline default on a CPU offers none (``None``: Pillow's resize)."""
    embedder = tiny_clip_embedder if which == "tiny clip" else default_offline
    assert getattr(embedder, "preprocess_pixels", None) is None
    expected = embedder.preprocess(load_image(photo, draft_size=DRAFT_SIZE))
    decodes.clear()
    prepared = prepare_file(planned(photo, "e"), {"e": embedder})
    assert decodes == {"load_image": 1}
    assert np.array_equal(np.asarray(prepared.inputs["e"]), np.asarray(expected))
    assert prepared.metadata[PHASH_KEY] == expected_phash(photo)


@pytest.mark.parametrize("order", [("offline", "clip"), ("clip", "offline")])
def test_both_kinds_of_embedder_share_one_decode(photo, offline_on_gpu, tiny_clip_embedder, decodes, order):
    image = load_image(photo, draft_size=DRAFT_SIZE)
    expected = {"offline": offline_on_gpu.preprocess_pixels(np.asarray(image)), "clip": tiny_clip_embedder.preprocess(image)}
    decodes.clear()
    prepared = prepare_file(planned(photo, *order), {"offline": offline_on_gpu, "clip": tiny_clip_embedder})
    assert decodes["load_pixels"] + decodes["load_image"] == 1, decodes
    assert decodes["Image.fromarray"] == (order[0] == "offline")  # the image made of the pixels when asked after them
    assert np.array_equal(prepared.inputs["offline"], expected["offline"])
    assert torch.equal(prepared.inputs["clip"], expected["clip"])
    assert prepared.metadata[PHASH_KEY] == expected_phash(photo)


def test_the_text_reader_gets_a_pil_image_of_the_same_decode(photo, offline_on_gpu, decodes, monkeypatch):
    read: list[Image.Image] = []
    monkeypatch.setattr(indexing, "read_photo_text", lambda image: read.append(image) or "EXIT 12")
    decodes.clear()
    prepared = prepare_file(planned(photo, "offline", read_text=True), {"offline": offline_on_gpu})
    assert decodes == {"load_pixels": 1, "Image.fromarray": 1}
    assert len(read) == 1 and isinstance(read[0], Image.Image)
    assert np.array_equal(np.asarray(read[0]), np.asarray(load_image(photo, draft_size=DRAFT_SIZE)))
    assert prepared.text_read and prepared.metadata["photo_text"] == "EXIT 12"
    assert prepared.metadata[PHASH_KEY] == expected_phash(photo)


def test_the_header_is_read_once_for_the_metadata_and_the_decode_and_always_closed(photo, offline_on_gpu,
                                                                                   default_offline, monkeypatch):
    """``prepare_file`` opens the file once: the metadata and the decode read the same opened header (Pillow parses
    a JPEG's header in Python, with the GIL held), and it is closed whether or not the photo was decoded."""
    from pictrieve.tools.core import images

    opened: list = []
    real = images._open_header

    def counted(path):
        header = real(path)
        opened.append(header)
        return header

    monkeypatch.setattr(images, "_open_header", counted)
    for embedder in (offline_on_gpu, default_offline):  # the pixels route, and Pillow's image
        opened.clear()
        prepared = prepare_file(planned(photo, "e"), {"e": embedder})
        assert len(opened) == 1, embedder
        assert prepared.metadata["width"] == read_photo_metadata(photo).fields["width"]
        assert prepared.metadata[PHASH_KEY] == expected_phash(photo)
        assert opened[0].fp is None  # closed
    stored = {"e": {"sha256": file_sha256(photo), "reader": 1, PHASH_KEY: "ab"}}
    opened.clear()
    untouched = prepare_file(PlannedFile(str(photo), path_id(photo), ["e"], stored=stored), {"e": default_offline})
    assert untouched.touched == ["e"] and not untouched.inputs  # nothing to decode
    assert len(opened) == 1 and opened[0].fp is None
