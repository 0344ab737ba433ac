"""The GPU paths of issue 40 (items 1 and 2), run on the CPU with the same code: resized bytes scaled on the device,
JPEGs decoded by torchvision and turned upright as PIL turns them, and indexing handing the model JPEG bytes. No GPU
is needed or assumed; on one, the same functions pin host memory and copy without waiting."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from helpers import make_photo
from pictrieve.tools.core.images import ORIENTATION_TAG, load_image
from pictrieve.tools.models.embedders.device_pixels import PinnedUpload, upright_tensor
from pictrieve.vectorstore.chroma_store import path_id

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_tensor_is_turned_upright_as_pil_turns_the_photo(orientation):
    from pictrieve.tools.core.images import upright

    rng = np.random.default_rng(orientation)
    pixels = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)  # not square: a wrong turn changes the shape
    expected = np.asarray(upright(Image.fromarray(pixels), orientation))
    turned = upright_tensor(torch.from_numpy(pixels).permute(2, 0, 1), orientation).permute(1, 2, 0).numpy()
    assert np.array_equal(turned, expected)


def test_the_upload_stacks_a_batch_on_the_cpu():
    arrays = [np.full((4, 3, 3), i, dtype=np.uint8) for i in range(3)]
    uploaded = PinnedUpload("cpu").to_device(arrays)
    assert uploaded.dtype == torch.uint8 and tuple(uploaded.shape) == (3, 4, 3, 3)
    assert [int(uploaded[i].max()) for i in range(3)] == [0, 1, 2]


def _sideways_jpeg(path, seed):
    """A JPEG stored sideways with EXIF Orientation 6 (turned 90 degrees clockwise when shown)."""
    rng = np.random.default_rng(seed)
    pixels = np.kron(rng.integers(0, 256, size=(6, 9, 3)), np.ones((8, 8, 1))).astype(np.uint8)  # smooth blocks
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = 6
    Image.fromarray(pixels).save(path, quality=95, exif=exif)
    return path


def test_bytes_scaled_on_the_device_and_jpegs_decoded_there_give_the_cpu_vectors(tmp_path, tiny_clip_name):
    from pictrieve.tools.models.embedders.factory import create_embedder

    paths = [_sideways_jpeg(tmp_path / f"s{i}.jpg", i) for i in range(3)]
    embedder = create_embedder(tiny_clip_name, device="cpu")
    embedder.pixels_on_device = False
    images = [load_image(path) for path in paths]
    reference = embedder.embed_preprocessed([embedder._torch_parts().preprocess(image) for image in images])

    embedder.pixels_on_device = True  # resized bytes, scaled by torch on the device
    inputs = [embedder.preprocess(image) for image in images]
    assert inputs[0].dtype == np.uint8 and inputs[0].shape[-1] == 3
    np.testing.assert_allclose(embedder.embed_preprocessed(inputs), reference, atol=1e-5)

    embedder.decode_on_device = True  # the files' bytes, decoded and turned upright by torch
    encoded = [embedder.encoded_input(path, orientation=6) for path in paths]
    assert all(item is not None and item.orientation == 6 for item in encoded)
    decoded = embedder.embed_preprocessed(encoded)
    assert float((decoded * reference).sum(axis=1).min()) > 0.999  # another decoder and resize: rounding apart
    sideways = embedder.embed_preprocessed([embedder.encoded_input(path, orientation=1) for path in paths])
    assert float((decoded * sideways).sum(axis=1).min()) < float((decoded * reference).sum(axis=1).min())


def test_indexing_hands_jpeg_bytes_to_a_model_that_decodes_on_its_device(tmp_path, tiny_clip_name, monkeypatch):
    """With ``decode_on_device`` the decode threads only read a JPEG's bytes (and its hash from a small draft); a PNG
    in the same batch is decoded here as before; the stored vectors are the CPU pipeline's to rounding."""
    from pictrieve.tools.models.embedders.factory import create_embedder
    from pictrieve.vectorstore.gallery import Gallery

    photos = tmp_path / "photos"
    photos.mkdir()
    paths = [_sideways_jpeg(photos / f"s{i}.jpg", i) for i in range(3)] + [make_photo(photos / "p.png", seed=9)]
    plain = create_embedder(tiny_clip_name, device="cpu")
    plain.pixels_on_device = True
    expected = Gallery.open(tmp_path / "cpu", plain)
    expected.add(photos, progress=False)

    on_device = create_embedder(tiny_clip_name, device="cpu")
    on_device.decode_on_device = True
    seen: list[list[str]] = []
    real = on_device.embed_preprocessed

    def embed(batch):
        seen.append([type(item).__name__ for item in batch])
        return real(batch)

    monkeypatch.setattr(on_device, "embed_preprocessed", embed)
    gallery = Gallery.open(tmp_path / "gpu", on_device)
    report = gallery.add(photos, progress=False)
    assert (report.indexed, report.failed) == (4, [])
    handed = sorted(name for batch in seen for name in batch)
    assert handed[:3] == ["EncodedJpeg"] * 3 and handed[3] != "EncodedJpeg"  # the PNG: decoded here
    ids = [path_id(path) for path in paths]
    got, want = gallery.embeddings(ids), expected.embeddings(ids)
    assert float((got * want).sum(axis=1).min()) > 0.999
    assert gallery.metadata_of(ids) and all(meta["phash"] for meta in gallery.metadata_of(ids).values())
