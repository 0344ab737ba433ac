"""Stand-ins and small real parts for the Vision Search Assistant's tests (control flow only, never answer
quality): the example pages searched offline, a detector that finds nothing, a describer with fixed words,
scripted chat models, a dictionary search backend, and a tiny random OWL-ViT as the zero-shot detector.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from PIL import Image

from helpers import REPO_ROOT
from pictrieve.tools.web.results import SearchResult

PAGES = REPO_ROOT / "examples" / "vsa-offline" / "pages"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The example pages (examples/vsa-offline/pages) as the offline ``local:`` search backend."""
    from pictrieve.tools.web.search import SEARCH_BACKENDS

    before = os.environ.get("PICTRIEVE_CACHE")
    os.environ["PICTRIEVE_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # the page index goes here
    try:
        backend = SEARCH_BACKENDS.create(f"local:{PAGES}")
    finally:
        if before is None:
            os.environ.pop("PICTRIEVE_CACHE", None)
        else:
            os.environ["PICTRIEVE_CACHE"] = before
    return backend


class WholeImage:
    """A detector that finds nothing: the whole photo is the one region."""

    name = "none"

    def detect(self, image, *, labels=None, min_score=None):
        return []


class Words:
    """A describer that says the same words of every image."""

    name = "words"

    def caption(self, images, *, prompt=None):
        return ["a brown horse standing in snow"] * len(images)


def scripted(calls):
    """A chat model planning two sub-questions (horse teeth, dog temperature) and answering each; records
    each prompt in ``calls``."""
    def reply(msgs):
        text = msgs[0].content
        calls.append(text)
        if "JSON only" in text:
            return AIMessage(content='{"sub_questions": [{"question": "adult horse number of teeth", "region": 1},'
                                     ' {"question": "dog body temperature", "region": 1}]}')
        if "Sub-question: adult horse" in text:
            return AIMessage(content="36 to 44 teeth [1].")
        if "Sub-question" in text:
            return AIMessage(content="38.3 to 39.2 C [1].")
        return AIMessage(content="An adult horse has 36 to 44 teeth [1].")
    return RunnableLambda(reply)


@pytest.fixture()
def photo(tmp_path):
    """A plain brown 64x48 photo; its path."""
    path = tmp_path / "p.jpg"
    Image.new("RGB", (64, 48), (120, 80, 40)).save(path)
    return str(path)


def tiny_owlvit():
    """A tiny random OWL-ViT built from a config, with its processor (seeded: the same weights each time)."""
    from transformers import (CLIPTokenizer, OwlViTConfig, OwlViTForObjectDetection, OwlViTImageProcessor,
                              OwlViTProcessor)

    pytest.importorskip("transformers")
    config = OwlViTConfig(
        text_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "vocab_size": 49408, "max_position_embeddings": 16},
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    import torch

    torch.manual_seed(0)
    model = OwlViTForObjectDetection(config)
    vocab_dir = tiny_clip_tokenizer_dir()
    processor = OwlViTProcessor(
        image_processor=OwlViTImageProcessor(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=CLIPTokenizer.from_pretrained(vocab_dir),
    )
    return model, processor


def tiny_owlvit_detector():
    """The zero-shot detector on a tiny random OWL-ViT built from a config (boxes mean nothing)."""
    from pictrieve.tools.models.detectors import ZeroShotDetector

    model, processor = tiny_owlvit()
    return ZeroShotDetector(model=model, processor=processor, box_threshold=0.0)


def save_tiny_owlvit(folder: Path) -> Path:
    """A tiny random OWL-ViT saved as a folder, loadable as the ``zeroshot:<folder>`` detector."""
    model, processor = tiny_owlvit()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def tiny_clip_tokenizer_dir() -> str:
    """A CLIP tokenizer's files with a handful of tokens ("dog", "horse"), in a new temporary folder."""
    folder = tempfile.mkdtemp()
    tokens = ["!", "a", "d", "e", "g", "h", "o", "r", "s", "do", "ho", "dog</w>", "horse</w>", "<|startoftext|>",
              "<|endoftext|>"] + [c + "</w>" for c in "adeghors"]
    Path(folder, "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    Path(folder, "merges.txt").write_text("#version: 0.2\nd o\nh o\n")
    return folder


HORSE_FACT = "An adult horse has 36 to 44 teeth."
DOG_FACT = "An adult dog has 42 teeth."


def no_llm(msgs):
    """A chat model reply that fails the test: for graphs that must not call the chat model."""
    raise AssertionError("the extractive answerer must not call the chat model")


class Pages:
    """A search backend over a dict: query words -> results (control flow tests only)."""

    name = "dict"

    def __init__(self, table):
        self.table, self.queries = table, []

    def search(self, query, *, k=6):
        self.queries.append(query)
        return [r for key, rs in self.table.items() if key in query.lower() for r in rs][:k]


HORSES = SearchResult(url="https://example.org/horses", title="Horses", text=HORSE_FACT)
DOGS = SearchResult(url="https://example.org/dogs", title="Dogs", text=DOG_FACT)
