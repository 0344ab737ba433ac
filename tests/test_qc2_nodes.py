"""QC2's nodes called alone, without a graph: ``complete`` with a tiny random model (untrained: its text
means nothing, only which request it was given) and ``retrieve`` on a tiny real gallery."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

torch = pytest.importorskip("torch")

from langgraph.runtime import Runtime  # noqa: E402
from helpers.qc2_fakes import load_tiny, one_thread  # noqa: E402,F401  (one_thread: autouse)
from helpers.galleries import tiny_gallery  # noqa: E402,F401  (a fixture: four captioned photos)

from pictrieve.agents.qc2.bundle import QC2Model  # noqa: E402
from pictrieve.agents.qc2.completion import CompletionRequest, complete_queries  # noqa: E402
from pictrieve.agents.qc2.errors import QC2ModelError  # noqa: E402
from pictrieve.agents.qc2.levels import AxisLevels  # noqa: E402
from pictrieve.agents.qc2.nodes import QC2Settings, complete, retrieve  # noqa: E402
from pictrieve.vectorstore.fusion import fuse_hits  # noqa: E402


def run(**settings) -> Runtime:
    return Runtime(context=QC2Settings(**settings))


@pytest.fixture(scope="module")
def tiny_model(tiny_checkpoint) -> QC2Model:
    model, tokenizer = load_tiny(tiny_checkpoint)
    scores = [0.1, 0.2, 0.5, 0.7, 0.9]
    axes = [AxisLevels.fit("Relevance", scores, score_key="relevance"), AxisLevels.fit("Quality", scores, score_key="brisque")]
    return QC2Model(model=model, tokenizer=tokenizer, base_model=tiny_checkpoint, axes=axes)


@contextmanager
def prompts_seen(qc2_model: QC2Model):
    """The text of the first sequence of every forward pass of the model (without padding), as it runs:
    the first is the prompt, the later ones the tokens sampled."""
    seen: list[str] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        seen.append(qc2_model.tokenizer.decode(ids[0], skip_special_tokens=True))

    handle = qc2_model.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def completions_of(model: QC2Model, levels: tuple[str, ...], settings: QC2Settings) -> list[str]:
    """What the completion library gives for this request, with the same seed and sampling."""
    return complete_queries(model.model, model.tokenizer, [CompletionRequest("a dog", levels)], model.axis_names,
                            samples=settings.samples, settings=settings.sampling(), seed=settings.seed)[0]


def test_complete_conditions_on_the_requested_levels_with_the_run_settings(tiny_model):
    settings = QC2Settings(samples=3, seed=0, max_new_tokens=4)
    out = complete({"query": "a dog", "levels": {"quality": "high"}}, Runtime(context=settings), model=tiny_model)
    assert out["resolved_levels"] == {"Relevance": "Medium", "Quality": "High"}  # an axis not named: Medium
    assert len(out["completions"]) == 3 and all(c.startswith("a dog") for c in out["completions"])
    assert out["completions"] == completions_of(tiny_model, ("Medium", "High"), settings)
    # what the model was given: the requested levels (an untrained model writes much the same for any)
    with prompts_seen(tiny_model) as prompts:
        complete({"query": "a dog", "levels": {"relevance": "low"}}, Runtime(context=settings), model=tiny_model)
    assert prompts[0] == "Relevance: Low, Quality: Medium, Query: a dog"
    longer = complete({"query": "a dog"}, run(samples=3, seed=0, max_new_tokens=12), model=tiny_model)
    assert longer["resolved_levels"] == {"Relevance": "Medium", "Quality": "Medium"}
    assert max(map(len, longer["completions"])) > max(map(len, completions_of(tiny_model, ("Medium", "Medium"), settings)))


def test_complete_is_repeatable_with_a_seed_and_refuses_an_axis_the_model_lacks(tiny_model):
    state = {"query": "a dog", "levels": {"relevance": "low"}}
    first = complete(state, run(samples=2, seed=7, max_new_tokens=6), model=tiny_model)
    assert complete(state, run(samples=2, seed=7, max_new_tokens=6), model=tiny_model) == first
    assert complete(state, run(samples=2, seed=8, max_new_tokens=6), model=tiny_model) != first
    with pytest.raises(QC2ModelError, match="no 'aesthetics' axis"):
        complete({"query": "a dog", "levels": {"aesthetics": "high"}}, run(), model=tiny_model)


def test_retrieve_searches_with_the_completion_or_fuses_several(tiny_gallery):
    gallery = tiny_gallery
    one = retrieve({"completions": ["a black dog runs"]}, run(k=2), index=gallery)["hits"]
    assert [(h.id, h.rank) for h in one] == [(h.id, h.rank) for h in gallery.search_text("a black dog runs", k=2)]
    texts = ["a black dog runs", "two children play", "a man rides a bike"]
    fused = retrieve({"completions": texts}, run(k=3), index=gallery)["hits"]
    expected = fuse_hits([gallery.search_text(text, k=50) for text in texts], k=3)
    assert [(h.id, h.rank) for h in fused] == [(h.id, h.rank) for h in expected]
    assert [h.score for h in fused] == pytest.approx([h.score for h in expected])  # RRF scores, not cosines
    with pytest.raises(ValueError, match="no completed query"):
        retrieve({"completions": ["  "]}, run(), index=gallery)
