import pytest
from PIL import Image

from pictrieve.tools.captioners import CaptionerUnavailableError, caption_files, create_captioner


class SeeingEmbedder:
    def describe(self, image):
        return f"a photo {image.width}x{image.height}"


def test_offline_captioner_uses_what_the_embedder_sees(tmp_path):
    captioner = create_captioner("offline", embedder=SeeingEmbedder())
    assert captioner([Image.new("RGB", (4, 3)), Image.new("RGB", (2, 2))]) == ["a photo 4x3", "a photo 2x2"]
    Image.new("RGB", (5, 6)).save(tmp_path / "x.png")
    assert caption_files(captioner)([tmp_path / "x.png"]) == ["a photo 5x6"]


def test_offline_captioner_needs_a_describing_embedder():
    with pytest.raises(CaptionerUnavailableError, match="offline embedder"):
        create_captioner("offline", embedder=object())


def test_unavailable_blip_model_says_what_to_do(tmp_path):
    with pytest.raises(CaptionerUnavailableError, match="captions.jsonl or NAME.txt"):
        create_captioner(str(tmp_path / "no-such-blip"))
