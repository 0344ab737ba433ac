"""QC2 prompt format, loss mask, training, save/load and completion on a tiny random causal LM.

The model is a 2-layer Llama with random weights and a byte-level BPE tokenizer trained here on a
few captions, saved as a local checkpoint: the real code paths run in seconds, without network.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pictrieve.agents.qc2.completion import (  # noqa: E402
    CompletionRequest,
    SamplingSettings,
    complete_queries,
    first_sentence,
    prompt_ids,
    sample_continuations,
)
from pictrieve.agents.qc2.levels import AxisLevels  # noqa: E402
from pictrieve.agents.qc2.prompt_format import (  # noqa: E402
    IGNORE_INDEX,
    QC2Example,
    clean_caption,
    encode_example,
    format_instruction,
)
from pictrieve.agents.qc2.errors import GalleryMismatchError, QC2ModelError  # noqa: E402
from pictrieve.agents.qc2.bundle import QC2Model, gallery_fingerprint, load_qc2_model  # noqa: E402
from pictrieve.agents.qc2.training import QC2TrainConfig, mean_caption_loss, train_completion_model  # noqa: E402
from helpers.qc2_fakes import AXES, CAPTIONS, LEVELS, one_thread  # noqa: E402,F401  (one_thread: autouse)
from helpers.qc2_fakes import examples as _examples  # noqa: E402
from helpers.qc2_fakes import load_tiny as _load  # noqa: E402


def test_instruction_and_caption_format():
    assert format_instruction(("Relevance", "Aesthetic"), ("High", "Low")) == "Relevance: High, Aesthetic: Low, Query:"
    assert clean_caption("A man lays on a bench while his dog sits by him .") == (
        "a man lays on a bench while his dog sits by him."
    )
    assert clean_caption("  Café   scene ") == "cafe scene."
    with pytest.raises(ValueError):
        format_instruction(("Relevance",), ("High", "Low"))


def test_loss_mask_covers_caption_and_end_token_only(tiny_checkpoint):
    _, tokenizer = _load(tiny_checkpoint)
    instruction = format_instruction(AXES, ("High", "Low"))
    ids, labels = encode_example(tokenizer, instruction, "a dog runs.")
    prefix = [tokenizer.bos_token_id] + tokenizer(instruction, add_special_tokens=False)["input_ids"]
    body = tokenizer(" a dog runs.", add_special_tokens=False)["input_ids"]
    assert ids == prefix + body + [tokenizer.eos_token_id]
    assert labels == [IGNORE_INDEX] * len(prefix) + body + [tokenizer.eos_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == instruction + " a dog runs."
    # too long: cut, and no end token is taught
    ids, labels = encode_example(tokenizer, instruction, "a dog " * 40, max_length=len(prefix) + 5)
    assert len(ids) == len(prefix) + 5 and tokenizer.eos_token_id not in ids[len(prefix):]


@pytest.mark.parametrize("cached", [True, False])
def test_training_reduces_caption_loss(tiny_checkpoint, cached):
    model, tokenizer = _load(tiny_checkpoint)
    examples = _examples()
    config = QC2TrainConfig(epochs=30, batch_size=4, learning_rate=3e-2, warmup_steps=2, lora_rank=8,
                            train_layers=1, cache_frozen_layers=cached, restrict_vocab=cached)
    untrained, _ = _load(tiny_checkpoint)
    model, report, allowed = train_completion_model(model, tokenizer, examples, AXES, config, progress=False)
    before = mean_caption_loss(untrained, tokenizer, examples, AXES, allowed_token_ids=allowed)
    after = mean_caption_loss(model, tokenizer, examples, AXES, allowed_token_ids=allowed)
    assert report.cached_trunk is cached
    assert report.steps == 60 and report.trainable_parameters > 0
    assert after < before - 1.0, (before, after)
    if cached:
        assert tokenizer.eos_token_id in allowed and len(allowed) < len(tokenizer)


def test_only_top_layers_learn(tiny_checkpoint):
    model, tokenizer = _load(tiny_checkpoint)
    bottom = {k: v.clone() for k, v in model.model.layers[0].state_dict().items()}
    config = QC2TrainConfig(epochs=2, batch_size=4, learning_rate=1e-2, lora_rank=0, train_layers=1)
    model, report, _ = train_completion_model(model, tokenizer, _examples(), AXES, config, progress=False)
    after = model.model.layers[0].state_dict()
    assert all(torch.equal(bottom[k], after[k]) for k in bottom)
    assert report.trainable_parameters == sum(p.numel() for p in model.model.layers[1].parameters())


def _trained_bundle(checkpoint, fingerprint="images__x:8:abc"):
    model, tokenizer = _load(checkpoint)
    config = QC2TrainConfig(epochs=2, batch_size=4, lora_rank=4, train_layers=1)
    model, report, allowed = train_completion_model(model, tokenizer, _examples(), AXES, config, progress=False)
    axes = [
        AxisLevels.fit("Relevance", [0.1, 0.2, 0.3, 0.4], score_key="relevance"),
        AxisLevels.fit("Quality", [30.0, 20.0, 10.0, 5.0], score_key="brisque", higher_is_better=False),
    ]
    return QC2Model(model, tokenizer, checkpoint, axes, fingerprint, allowed, report.to_dict())


def test_save_load_round_trip_and_refusal_for_another_gallery(tiny_checkpoint, tmp_path):
    bundle = _trained_bundle(tiny_checkpoint)
    bundle.save(tmp_path / "qc2")
    meta = json.loads((tmp_path / "qc2" / "qc2.json").read_text())
    assert meta["base_model"] == tiny_checkpoint and meta["fingerprint"] == "images__x:8:abc"
    loaded = load_qc2_model(tmp_path / "qc2", fingerprint="images__x:8:abc")
    assert [a.thresholds for a in loaded.axes] == [a.thresholds for a in bundle.axes]
    assert loaded.axes[1].higher_is_better is False and loaded.allowed_token_ids == bundle.allowed_token_ids
    # merged LoRA weights give the same next-token logits as the trained adapter model
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        assert torch.allclose(loaded.model(ids).logits, bundle.model(ids).logits, atol=1e-4)
    with pytest.raises(GalleryMismatchError, match="retrain"):
        load_qc2_model(tmp_path / "qc2", fingerprint="images__x:9:def")
    with pytest.raises(QC2ModelError, match="quality train"):
        load_qc2_model(tmp_path / "missing")


def test_fingerprint_depends_on_ids_not_order():
    a = gallery_fingerprint("images__offline", ["b", "a", "c"])
    assert a == gallery_fingerprint("images__offline", ["a", "b", "c"])
    assert a != gallery_fingerprint("images__offline", ["a", "b"])
    assert a != gallery_fingerprint("images__other", ["a", "b", "c"])


def test_requested_axes_and_levels_are_checked(tiny_checkpoint):
    bundle = _trained_bundle(tiny_checkpoint)
    assert bundle.resolve_levels({"relevance": "high", "quality": "L"}) == ("High", "Low")
    assert bundle.resolve_levels({"brisque": "h"}) == ("Medium", "High")
    with pytest.raises(QC2ModelError, match="no 'Aesthetic' axis"):
        bundle.resolve_levels({"Aesthetic": "high"})
    with pytest.raises(ValueError, match="Low, Medium, High"):
        bundle.resolve_levels({"relevance": "very high"})


def test_completion_starts_with_query_and_respects_token_limit(tiny_checkpoint):
    bundle = _trained_bundle(tiny_checkpoint)
    settings = SamplingSettings(max_new_tokens=6)
    requests = [CompletionRequest("A dog", ("High", "Low")), CompletionRequest("two children", ("Low", "High"))]
    outputs = complete_queries(bundle.model, bundle.tokenizer, requests, AXES, samples=3, settings=settings,
                               allowed_token_ids=bundle.allowed_token_ids, seed=0)
    assert [len(o) for o in outputs] == [3, 3]
    for request, completions in zip(requests, outputs):
        for text in completions:
            continuation = text[len(request.query):]  # the query itself is always kept as typed
            # re-tokenising decoded text can split it a little differently: allow two tokens of slack
            assert len(bundle.tokenizer(continuation, add_special_tokens=False).input_ids) <= settings.max_new_tokens + 2
            assert "\n" not in text and first_sentence(text) == text


def test_generation_respects_the_new_token_limit(tiny_checkpoint):
    model, tokenizer = _load(tiny_checkpoint)  # untrained: rarely stops by itself
    prompt = prompt_ids(tokenizer, CompletionRequest("a dog", ("High", "Low")), AXES)
    assert tokenizer.decode(prompt, skip_special_tokens=True) == "Relevance: High, Quality: Low, Query: a dog"
    torch.manual_seed(0)
    for limit in (1, 5):
        results = sample_continuations(model, tokenizer, [prompt, prompt[:-1]], samples=4,
                                       settings=SamplingSettings(max_new_tokens=limit))
        assert len(results) == 8 and all(1 <= n <= limit for _, n in results)


def test_first_sentence():
    assert first_sentence(" runs. Then it sleeps.") == " runs."
    assert first_sentence(" is on the 3.5 m wall") == " is on the 3.5 m wall"
    assert first_sentence(" jumps!\nnext") == " jumps!"


def test_cached_trunk_path_matches_the_models_own_forward(tiny_checkpoint):
    from pictrieve.agents.qc2.decoder_internals import _decoder_parts, _run_layers

    model, _ = _load(tiny_checkpoint)
    parts = _decoder_parts(model)
    ids = torch.randint(3, 300, (2, 9))
    with torch.no_grad():
        reference = model(ids).logits
        bottom = _run_layers(parts, parts["layers"][:1], parts["embed"](ids))  # what the cache stores
        mine = parts["head"](parts["norm"](_run_layers(parts, parts["layers"][1:], bottom)))
    assert torch.allclose(mine, reference, atol=1e-5)


def test_gpt2_style_model_trains_through_the_generic_path(tiny_checkpoint, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tokenizer = _load(tiny_checkpoint)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.transformer.wte.weight.data.normal_(0.0, 0.3)
    untrained = GPT2LMHeadModel(config)
    untrained.load_state_dict(model.state_dict())
    train_config = QC2TrainConfig(epochs=30, batch_size=4, learning_rate=3e-2, warmup_steps=2, lora_rank=8, train_layers=1)
    model, report, allowed = train_completion_model(model, tokenizer, _examples(), AXES, train_config, progress=False)
    assert report.cached_trunk is False
    before = mean_caption_loss(untrained, tokenizer, _examples(), AXES, allowed_token_ids=allowed)
    after = mean_caption_loss(model, tokenizer, _examples(), AXES, allowed_token_ids=allowed)
    assert after < before - 1.0, (before, after)


def test_completion_joins_the_query_as_the_model_saw_it():
    from pictrieve.agents.qc2.completion import _assemble

    assert _assemble("a dog.", " runs on the grass. Then more") == "a dog runs on the grass."
    assert _assemble("A dog", " runs.") == "A dog runs."  # the user's own casing is kept
    assert _assemble("a dog", "s run.") == "a dogs run."  # a word continued without a space


def test_generation_stops_after_a_finished_sentence_not_inside_a_number():
    from pictrieve.agents.qc2.completion import _FirstSentenceStop

    texts = {0: " a dog 3.", 1: " a dog runs. The", 2: " a dog runs\n"}

    class RowTokenizer:
        def decode(self, row, skip_special_tokens=True):
            return texts[int(row[-1])]

    ids = torch.tensor([[7, 0], [7, 1], [7, 2]])
    assert _FirstSentenceStop(RowTokenizer(), prompt_length=1)(ids, None).tolist() == [False, True, True]


def test_generated_words_reach_the_completion(tiny_checkpoint):
    """A tiny model taught one caption says its continuation: completions must carry the generated
    words, not just echo the typed query (an empty continuation passes every startswith check).

    The caption is taught to convergence (loss near 0): a half-taught model (~1 nat per token) gives a
    greedy continuation that flips with float rounding (AVX2 vs AVX-512 kernels), which is no test."""
    model, tokenizer = _load(tiny_checkpoint)
    taught = "A brown dog jumps over a fence ."
    examples = [QC2Example(clean_caption(taught), levels) for levels in LEVELS]
    config = QC2TrainConfig(epochs=100, batch_size=4, learning_rate=1e-2, warmup_steps=2, lora_rank=8,
                            train_layers=2, restrict_vocab=True)
    model, report, allowed = train_completion_model(model, tokenizer, examples, AXES, config, progress=False)
    assert report.final_loss < 0.1, report.losses[-5:]  # the caption is learned, not half-learned
    greedy = SamplingSettings(temperature=1.0, top_k=1, max_new_tokens=12, repetition_penalty=1.0, no_repeat_ngram_size=0)
    ((completion,),) = complete_queries(model, tokenizer, [CompletionRequest("a brown dog", ("High", "High"))], AXES,
                                        settings=greedy, allowed_token_ids=allowed, seed=0)
    # the taught words follow the typed query, up to and including the end of the sentence
    assert completion == "a brown dog jumps over a fence.", completion


def test_the_heartbeat_says_a_long_step_goes_on_every_few_seconds():
    from pictrieve.cli.quality import Heartbeat

    now = [0.0]
    lines: list[str] = []
    beat = Heartbeat(lines.append, clock=lambda: now[0])
    beat.tick()
    assert lines == []  # nothing said yet: nothing to go on with
    beat.say("loading the QC2 model ...")
    for now[0] in (1.0, 2.9):
        beat.tick()
    assert lines == ["loading the QC2 model ..."]
    for now[0] in (3.0, 4.0, 6.0, 7.0, 9.5):
        beat.tick()
    assert lines[1:] == ["... still loading the QC2 model"] * 3  # at 3, 6 and 9.5 s: never 3 s without a line
    beat.say("searching ...")
    now[0] = 12.0
    beat.tick()
    assert lines[-1] == "searching ..."
