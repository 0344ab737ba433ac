"""A tiny random QC2 base model and its training captions, shared by the QC2, contract and server tests.

The model is a 2-layer Llama with random weights and a byte-level BPE tokenizer trained on a few
captions, saved as a local checkpoint: real code paths in seconds, without network. Its outputs mean
nothing; no test reads quality from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pictrieve.agents.qc2.prompt_format import QC2Example, clean_caption, format_instruction

CAPTIONS = [
    "A black dog runs through the green grass .",
    "A brown dog jumps over a fence .",
    "Two children play on the sandy beach .",
    "A man rides a bike down a dirt road .",
    "A girl in a pink dress is smiling .",
    "A white dog swims in a blue lake .",
    "A group of people stand in the snow .",
    "A boy throws a red ball to a dog .",
]
AXES = ("Relevance", "Quality")
LEVELS = [("Low", "High"), ("High", "Low"), ("Medium", "Medium"), ("High", "High")]


def build_tiny_checkpoint(directory: Path, *, hidden_size: int = 32, layers: int = 2) -> str:
    """Save a random 2-layer Llama and a small byte-level BPE tokenizer (trained on :data:`CAPTIONS`
    and the level prompts) into ``directory``, a local checkpoint any loader takes; returns its path.
    ``hidden_size`` / ``layers``: a wider or deeper one, for tests that need a model slow enough to time."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    corpus = [clean_caption(c) for c in CAPTIONS] + [format_instruction(AXES, lv) for lv in LEVELS] * 3
    backend.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=max(2, hidden_size // 32),
        num_key_value_heads=max(1, hidden_size // 64), max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    # Pretrained embeddings are large; the tiny default init (std 0.02) would cap every logit near 0
    # through the frozen, tied output layer, so nothing could be learned by the top layers.
    model.model.embed_tokens.weight.data.normal_(0.0, 0.3)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread; several threads on a shared CPU only contend.

    Autouse in a module that imports it."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def load_tiny(checkpoint: str):
    """``(model, tokenizer)`` of a checkpoint, on the CPU."""
    from pictrieve.tools.models.causal_lm import load_causal_lm

    return load_causal_lm(checkpoint, device="cpu")


def examples() -> list[QC2Example]:
    """:data:`CAPTIONS` with the levels of :data:`LEVELS` in turn."""
    return [QC2Example(c, LEVELS[i % len(LEVELS)]) for i, c in enumerate(CAPTIONS)]


def train_tiny_qc2(gallery, folder: Path) -> None:
    """A tiny QC2 model trained for ``gallery`` (BRISQUE-annotated, one epoch of a 2-layer checkpoint made in
    ``folder``), saved as ``<gallery>/qc2`` where every front end's default ``qc2_model`` looks."""
    from pictrieve.agents.qc2.annotation import annotate_gallery
    from pictrieve.agents.qc2.pipeline import train_on_gallery
    from pictrieve.agents.qc2.training import QC2TrainConfig
    from pictrieve.tools.models.quality_scorers import create_quality_scorer

    annotate_gallery(gallery, [create_quality_scorer("brisque")], progress=False)
    checkpoint = build_tiny_checkpoint(folder)
    train_on_gallery(gallery, base_model=checkpoint, progress=False,
                     config=QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1))
