"""The offline default's pixel recipe since issue 40.1: the indexer's decoded photos squashed to 224x224 by torch's
uint8 antialiased bicubic (:func:`~pictrieve.tools.models.embedders.backbone.squash_bytes`, ``preprocess_pixels``),
a query photo still by Pillow's ``resize(BICUBIC)`` (``preprocess``), and a whole batch scaled to the trunk's float32
input at once (``scaled_views``).

The torch resize is not Pillow's bit for bit, so these tests hold it to what was claimed: the aten operator called
directly gives ``F.interpolate``'s pixels (and the fallback is ``F.interpolate``), the pixels stay within a fraction of
a level of Pillow's on real flickr8k-dev photos, and the offline default's indexed vectors stay those of the Pillow
recipe (reproduced here as it was) to a cosine of 0.999. The rest is checked bit for bit: the query path against
Pillow's recipe, the torch path from pixels or from a PIL image, a batch against each photo alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from pictrieve.tools.core.images import load_image, load_pixels
from pictrieve.tools.models.embedders import backbone
from pictrieve.tools.models.embedders.backbone import IMAGE_SIZE, scaled_views, squash_bytes, squash_views
from pictrieve.tools.models.embedders.base import l2_normalize

OPERATOR = "_upsample_bicubic2d_aa"  # the aten operator F.interpolate(mode="bicubic", antialias=True) calls


def random_pixels(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def as_tensor(pixels: np.ndarray) -> torch.Tensor:
    """``(1, 3, h, w)`` uint8, channels-last in memory: how ``squash_bytes`` hands pixels to the resize."""
    return torch.from_numpy(pixels).permute(2, 0, 1).unsqueeze(0)


def pillow_bicubic(image: Image.Image) -> np.ndarray:
    """The resize before issue 40.1: Pillow's bicubic to 224x224, ``(224, 224, 3)`` uint8."""
    return np.asarray(image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC))


@pytest.fixture
def fresh_resize():
    """``_bicubic_antialiased`` chosen again in the test (it is cached per process), and again after it."""
    backbone._bicubic_antialiased.cache_clear()
    yield backbone._bicubic_antialiased
    backbone._bicubic_antialiased.cache_clear()


@pytest.fixture
def interpolate_calls(monkeypatch) -> list[tuple[int, int]]:
    """The output sizes ``F.interpolate`` was called for from now on (the fallback calls it, the operator not)."""
    calls: list[tuple[int, int]] = []
    real = F.interpolate

    def counted(pixels, *args, **kwargs):
        calls.append(tuple(kwargs.get("size") or args[0]))
        return real(pixels, *args, **kwargs)

    monkeypatch.setattr(F, "interpolate", counted)
    return calls


SIZES = [  # (input height, width) -> output (height, width)
    ((288, 384), (224, 224)),  # a flickr-sized photo, down
    ((500, 333), (224, 224)),  # portrait, odd width
    ((37, 51), (224, 224)),  # up
    ((1, 1), (224, 224)),  # a single pixel
    ((224, 224), (1, 1)),  # down to one pixel
    ((333, 217), (101, 57)),  # odd both ways
    ((3, 1000), (224, 224)),  # up one way, down the other
    ((224, 224), (224, 224)),  # the same size
]


@pytest.mark.parametrize("source, target", SIZES)
def test_the_operator_gives_interpolates_pixels(fresh_resize, interpolate_calls, source, target):
    if getattr(torch._C._nn, OPERATOR, None) is None:
        pytest.skip(f"this torch ({torch.__version__}) has no {OPERATOR}: the fallback test covers it")
    pixels = as_tensor(random_pixels(*source, seed=sum(source)))
    resized = fresh_resize()(pixels, target)
    assert not interpolate_calls  # the operator itself, not F.interpolate around it
    expected = F.interpolate(pixels, size=target, mode="bicubic", antialias=True)
    assert resized.dtype == torch.uint8 and resized.shape == (1, 3, *target)
    assert torch.equal(resized, expected)


def test_without_the_operator_the_resize_is_interpolates(fresh_resize, interpolate_calls, monkeypatch):
    """A torch without the private operator (it could be renamed) falls back to ``F.interpolate``: the same
    pixels, so ``squash_bytes`` gives the same photo either way."""
    photo = random_pixels(300, 451, seed=4)
    with_operator = squash_bytes(photo)
    backbone._bicubic_antialiased.cache_clear()
    with monkeypatch.context() as hidden:
        hidden.delattr(torch._C._nn, OPERATOR, raising=False)
        fallback = fresh_resize()  # chosen (and cached) while the operator is missing
    pixels = as_tensor(photo)
    for _source, target in SIZES:
        assert torch.equal(fallback(pixels, target),
                           F.interpolate(pixels, size=target, mode="bicubic", antialias=True)), target
    interpolate_calls.clear()
    assert np.array_equal(squash_bytes(photo), with_operator)
    assert interpolate_calls == [(IMAGE_SIZE, IMAGE_SIZE)]


def test_squash_bytes_stays_within_a_fraction_of_a_level_of_pillows_bicubic(flickr_dir):
    """Measured on these 20 flickr8k-dev photos: 0.029 of a level on average (each photo 0.002-0.20), at most 0.04%
    of a photo's values more than 2 levels off, the largest difference 11 (on all 500: 0.051 on average, largest 13,
    a rare overshoot near a hard edge). A wrong filter is far outside the bounds: bilinear without antialiasing
    averages 1.9 levels (0.8-4.3 a photo, up to 55% of values more than 2 off, largest 74), Pillow's Lanczos 0.96
    (largest 22), the right filter off by one level 0.99; torch's float bicubic rounded stays inside (0.18)."""
    photos = sorted((flickr_dir / "images").glob("*.jpg"))[::25]
    means = []
    for path in photos:
        image = load_image(path)
        resized = squash_bytes(image)
        assert resized.dtype == np.uint8 and resized.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and resized.flags.c_contiguous
        levels = np.abs(resized.astype(np.int16) - pillow_bicubic(image).astype(np.int16))
        means.append(levels.mean())
        assert levels.mean() <= 0.4, (path.name, levels.mean())
        assert (levels > 2).mean() <= 0.002, (path.name, (levels > 2).mean())
        assert levels.max() <= 16, (path.name, levels.max())
    assert np.mean(means) <= 0.25, means


@pytest.mark.parametrize("shape, dtype", [
    ((40, 30), np.uint8),  # greyscale
    ((40, 30, 1), np.uint8),
    ((40, 30, 4), np.uint8),  # RGBA
    ((1, 40, 30, 3), np.uint8),  # a batch
    ((40, 30, 3), np.float32),
    ((40, 30, 3), np.uint16),
    ((40, 30, 3), np.int64),
])
def test_squash_bytes_refuses_what_is_not_rgb_bytes(shape, dtype):
    with pytest.raises(ValueError, match=r"expected \(h, w, 3\) uint8 RGB pixels, got"):
        squash_bytes(np.zeros(shape, dtype=dtype))


def test_the_indexer_resizes_by_torch_where_torch_runs_the_trunk_and_a_query_by_pillow(
        default_offline, offline_on_gpu, flickr_dir):
    """On a GPU the indexer hands decoded pixels to ``preprocess_pixels``: torch's kernel, the same from pixels or from
    a PIL image. On a CPU there is none (importing torch for it costs more than it saves) and the indexer hands
    ``preprocess`` a PIL image; that, like a query photo, a tile and training anywhere, is Pillow's bicubic bit for
    bit. How far apart the two resizes are: the test above."""
    assert default_offline.preprocess_pixels is None
    for path in sorted((flickr_dir / "images").glob("*.jpg"))[3::60]:
        image = load_image(path)
        assert np.array_equal(offline_on_gpu.preprocess_pixels(load_pixels(path)), squash_bytes(image)), path
        for embedder in (default_offline, offline_on_gpu):
            assert np.array_equal(embedder.preprocess(image), pillow_bicubic(image)), path
    photo = random_pixels(97, 131, seed=5)
    expected = squash_bytes(Image.fromarray(photo))
    assert np.array_equal(offline_on_gpu.preprocess_pixels(photo), expected)
    read_only = photo.copy()
    read_only.flags.writeable = False  # what np.asarray of a PIL image gives
    assert np.array_equal(offline_on_gpu.preprocess_pixels(read_only), expected)
    grey = Image.fromarray(photo).convert("L")
    assert np.array_equal(squash_bytes(grey), offline_on_gpu.preprocess_pixels(np.asarray(grey.convert("RGB"))))
    assert np.array_equal(default_offline.preprocess(grey), pillow_bicubic(grey.convert("RGB")))


@pytest.mark.parametrize("view", ["mirrored", "upside down", "bgr to rgb", "cropped", "every other row", "fortran"])
def test_pixels_given_as_a_view_resize_as_their_copy(view):
    """Pixels a caller hands over as a numpy view (a mirror, OpenCV's BGR reversed to RGB, a crop) are the same photo
    as their contiguous copy; torch cannot wrap an array with a negative stride, so the resize copies it first."""
    photo = random_pixels(160, 120, seed=6)
    views = {"mirrored": photo[:, ::-1], "upside down": photo[::-1], "bgr to rgb": photo[..., ::-1],
             "cropped": photo[10:-7, 3:], "every other row": photo[::2], "fortran": np.asfortranarray(photo)}
    pixels = views[view]
    assert np.array_equal(squash_bytes(pixels), squash_bytes(np.ascontiguousarray(pixels)))


def test_a_batch_is_scaled_as_each_photo_alone():
    """``scaled_views`` of a batch: the per-photo ``squash_views`` stacked (each photo, then its mirror image), bit
    for bit, and those values are the recipe's arithmetic on the resized bytes: /255, -0.5, /0.5 in float32."""
    photos = [Image.fromarray(random_pixels(*size, seed=i)) for i, size in enumerate([(300, 400), (224, 224), (91, 333)])]
    resized = [pillow_bicubic(photo) for photo in photos]
    for flips in (True, False):
        batch = scaled_views(resized, flips)
        assert batch.dtype == np.float32 and batch.flags.c_contiguous
        assert batch.shape == (len(photos) * (2 if flips else 1), 3, IMAGE_SIZE, IMAGE_SIZE)
        each = np.concatenate([squash_views(photo, flips) for photo in photos])
        assert np.array_equal(batch, each), flips
        expected = []
        for pixels in resized:
            scaled = ((pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)).transpose(2, 0, 1)
            expected += [scaled, scaled[:, :, ::-1]] if flips else [scaled]
        assert np.array_equal(batch, np.stack(expected)), flips
    assert scaled_views([], True).shape == (0, 3, IMAGE_SIZE, IMAGE_SIZE)


def test_the_offline_defaults_indexed_vectors_stay_those_of_the_pillow_recipe(default_offline, offline_on_gpu,
                                                                               flickr_dir):
    """Eight flickr8k-dev photos embedded as the indexer embeds them on a GPU (``preprocess_pixels``, torch's resize;
    the trunk runs on the CPU here) against the recipe before issue 40.1 (Pillow's bicubic, scaled in float32, the
    photo and its mirror through the trunk, head and label bridge averaged as ``embed_preprocessed`` averages them):
    cosine 0.99994 at the least (the whole dev set: 0.9997). A resize with the wrong filter falls well below the bound (bilinear without antialiasing: 0.977
    here; nearest: 0.89), as do the mirror left out (0.975) or channels swapped (0.78). A query photo, or a photo
    indexed on a CPU (``embed_images``, Pillow's resize), gets the old recipe's vector itself."""
    photos = [load_image(path) for path in sorted((flickr_dir / "images").glob("*.jpg"))[::63]]
    views = []
    for image in photos:
        pixels = (pillow_bicubic(image).astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)
        pixels = pixels.transpose(2, 0, 1)
        views += [pixels, pixels[:, :, ::-1]]
    features, logits = default_offline.trunk_outputs(np.ascontiguousarray(np.stack(views)))
    before = l2_normalize(default_offline.head(features).reshape(len(photos), 2, -1).mean(axis=1))
    assert default_offline.label_weight > 0  # the shipped recipe: the ensemble with offline-labels
    before = l2_normalize(before + default_offline.label_weight
                          * default_offline.labels.vectors_from_logits(logits.reshape(len(photos), 2, -1)))
    indexed = default_offline.embed_preprocessed([offline_on_gpu.preprocess_pixels(np.asarray(image)) for image in photos])
    cosines = np.sum(indexed * before, axis=1)
    assert cosines.min() >= 0.999, cosines
    np.testing.assert_allclose(default_offline.embed_images(photos), before, atol=1e-5)
