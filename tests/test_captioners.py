"""Captioners: the registry, the Captioner protocol (images or paths, prompt), offline and BLIP."""

from __future__ import annotations

import pytest
from PIL import Image

from pictrieve.tools.models.captioners import (
    CAPTIONERS,
    BlipCaptioner,
    OfflineCaptioner,
    UnknownCaptionerError,
    caption_files,
    create_captioner,
)
from pictrieve.tools.models.captioner_base import CaptionerUnavailableError
from pictrieve.tools.core.registry import UnknownNameError
from pictrieve.tools.models.protocols import Captioner


class SeeingEmbedder:
    def describe(self, image):
        return f"a photo {image.width}x{image.height}"


def test_offline_captioner_takes_images_and_paths(tmp_path):
    captioner = create_captioner("offline", embedder=SeeingEmbedder())
    assert isinstance(captioner, Captioner) and isinstance(captioner, OfflineCaptioner)
    assert captioner.name == "offline" and CAPTIONERS.create(captioner.name, embedder=SeeingEmbedder())
    Image.new("RGB", (5, 6)).save(tmp_path / "x.png")
    mixed = [Image.new("RGB", (4, 3)), tmp_path / "x.png", str(tmp_path / "x.png")]
    assert captioner.caption(mixed) == ["a photo 4x3", "a photo 5x6", "a photo 5x6"]
    assert captioner.caption(mixed, prompt="what is the dog doing?")[0] == "a photo 4x3"  # ignored
    assert captioner([Image.new("RGB", (2, 2))]) == ["a photo 2x2"]  # callable, as QC2 calls it
    assert captioner.caption([]) == []
    assert caption_files(captioner)([tmp_path / "x.png"]) == ["a photo 5x6"]  # older callers


def test_offline_captioner_needs_a_describing_embedder():
    with pytest.raises(CaptionerUnavailableError, match=r"embedder=create_embedder\('offline'\)") as caught:
        create_captioner("offline", embedder=object())
    assert "--" not in str(caught.value)  # library errors say the Python fix


def test_unknown_names_and_missing_models_say_what_to_do(tmp_path):
    with pytest.raises(UnknownCaptionerError, match="known: blip, offline") as caught:
        create_captioner("ofline")
    assert isinstance(caught.value, UnknownNameError)
    with pytest.raises(CaptionerUnavailableError, match="captions.jsonl or NAME.txt"):
        create_captioner(f"blip:{tmp_path / 'no-such-blip'}")
    with pytest.raises(CaptionerUnavailableError, match="captions.jsonl or NAME.txt"):
        create_captioner(str(tmp_path / "no-such-blip"))  # a bare path or hub id means BLIP


@pytest.fixture(scope="module")
def tiny_blip(tmp_path_factory) -> str:
    """A local BLIP checkpoint: random 1-layer vision and text towers, a 13-word BERT vocabulary."""
    torch = pytest.importorskip("torch")
    from transformers import (
        BertTokenizerFast,
        BlipConfig,
        BlipForConditionalGeneration,
        BlipImageProcessor,
        BlipProcessor,
    )

    directory = tmp_path_factory.mktemp("tiny-blip")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "dog", "photo", "of", "cat", "red", "the"]
    (directory / "vocab.txt").write_text("\n".join(words))
    tokenizer = BertTokenizerFast(vocab_file=str(directory / "vocab.txt"))
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    processor = BlipProcessor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                              tokenizer=tokenizer)
    tower = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    config = BlipConfig(
        text_config=dict(tower, vocab_size=len(tokenizer), max_position_embeddings=64,
                         bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
                         sep_token_id=tokenizer.sep_token_id),
        vision_config=dict(tower, image_size=32, patch_size=16), projection_dim=16,
    )
    torch.manual_seed(0)
    BlipForConditionalGeneration(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return str(directory)


def test_blip_captioner_runs_on_a_local_checkpoint(tiny_blip, tmp_path):
    captioner = create_captioner(f"blip:{tiny_blip}", max_new_tokens=4)
    assert isinstance(captioner, BlipCaptioner) and isinstance(captioner, Captioner)
    assert captioner.name == f"blip:{tiny_blip}" and captioner.device == "cpu"
    red = Image.new("RGB", (40, 30), "red")
    red.save(tmp_path / "red.png")
    captions = captioner.caption([red, tmp_path / "red.png", Image.new("L", (20, 20), 30)])
    assert len(captions) == 3 and all(isinstance(c, str) for c in captions)
    assert captions[0] == captions[1]  # the path is decoded to the same image
    # The loaded model is shared: a second captioner for the same folder reuses it.
    assert create_captioner(tiny_blip).model is captioner.model
