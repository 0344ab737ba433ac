"""VisRet's nodes, each called alone with a state and what it is bound to (no graph): rewrite, visualize,
retrieve, the branch after it, read; and the builder's one-visualizer rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import END
from langgraph.runtime import Runtime
from PIL import Image

from helpers.visret_fakes import PhotoVisualizer, RecordingChat, gallery, hand_fused, photos  # noqa: F401  (fixtures)

from pictrieve.agents.guided import GalleryViews
from pictrieve.agents.visret.nodes import (
    EXEMPLAR_TEXT_WEIGHT,
    GENERATED_TEXT_WEIGHT,
    after_retrieve,
    default_text_weight,
    read,
    retrieve,
    rewrite,
    visualize,
)
from pictrieve.agents.settings import SettingsError
from pictrieve.graphs.visret import build_visret_graph


def settings(**values):
    return Runtime(context=values)


def guide(path, number=1, generated=False, status="new"):
    return {"id": f"g{number}", "path": str(path), "visualizer": "photos", "generated": generated, "seed": 0,
            "status": status}


class Painter:
    """Paints one flat colour per picture and counts calls (a generator stand-in)."""

    name, generates = "painter", True

    def __init__(self, fail=False):
        self.calls, self.fail = 0, fail

    def visualize(self, prompt, *, n=1, seed=None):
        self.calls += 1
        if self.fail:
            raise RuntimeError("generator down")
        return [Image.new("RGB", (16, 16), (10 * i, seed or 0, 0)) for i in range(n)]


def test_rewrite_keeps_the_query_without_an_llm_and_takes_the_llms_first_line():
    assert rewrite({"query": "  a dog  "}) == {"prompt": "a dog"}
    llm = FakeListChatModel(responses=['"A brown dog jumping."\nmore'])
    assert rewrite({"query": "dog"}, llm=llm) == {"prompt": "A brown dog jumping."}
    with pytest.raises(SettingsError, match="query"):
        rewrite({"query": "  "})


def test_visualize_makes_guide_records_of_found_and_generated_pictures(photos, tmp_path):
    found = PhotoVisualizer([photos / "p1.png", photos / "p2.png", photos / "p3.png"])
    out = visualize({"prompt": "a dog"}, settings(guides=2, seed=7), visualizer=found)
    assert out == {"guides": [guide(photos / "p1.png", 1) | {"seed": 7}, guide(photos / "p2.png", 2) | {"seed": 7}]}
    assert found.prompts == ["a dog"]
    painter = Painter()
    made = visualize({"prompt": "a dog"}, settings(guides=3), visualizer=painter, cache_dir=tmp_path)["guides"]
    assert [g["id"] for g in made] == ["g1", "g2", "g3"] and all(g["generated"] for g in made)
    assert all(Path(g["path"]).is_file() and Path(g["path"]).is_relative_to(tmp_path) for g in made)
    again = visualize({"prompt": "a dog"}, settings(guides=3), visualizer=painter, cache_dir=tmp_path)["guides"]
    assert again == made and painter.calls == 1  # kept on disk: not painted twice
    with pytest.raises(SettingsError, match="needs a visualizer"):
        visualize({"prompt": "a dog"}, visualizer=None)
    with pytest.raises(RuntimeError, match="generator down"):  # one visualizer: its failure is the run's
        visualize({"prompt": "a cat"}, visualizer=Painter(fail=True), cache_dir=tmp_path)


def test_retrieve_fuses_each_guides_ranking_with_the_text_ranking_at_its_weight(gallery, photos):
    guides = [photos / "p0.png", photos / "p2.png"]
    state = {"query": "a red square", "guides": [guide(p, n) for n, p in enumerate(guides, 1)]}
    views = GalleryViews(gallery)
    for weight in (0.0, 3.0):
        out = retrieve(state, settings(k=5, text_weight=weight), views=views)
        assert [(h.id, pytest.approx(h.score)) for h in out["hits"]] == [
            (id_, pytest.approx(score)) for id_, score in hand_fused(gallery, guides, "a red square", weight)]
        assert [g["status"] for g in out["guides"]] == ["used", "used"]
    # Unset, the weight follows the guides' family: found photos here.
    default = retrieve(state, settings(k=5), views=views)["hits"]
    expected = hand_fused(gallery, guides, "a red square", EXEMPLAR_TEXT_WEIGHT)
    assert [h.score for h in default] == pytest.approx([score for _, score in expected])
    # No guide at all: the text ranking alone.
    alone = retrieve({"query": "a red square", "guides": []}, settings(k=3, text_weight=0), views=views)["hits"]
    assert [h.id for h in alone] == [h.id for h in gallery.search_text("a red square", k=3)]


def test_default_text_weight_follows_the_guides_family(photos):
    assert default_text_weight([guide(photos / "p0.png")]) == EXEMPLAR_TEXT_WEIGHT
    assert default_text_weight([guide(photos / "p0.png", generated=True)]) == GENERATED_TEXT_WEIGHT
    assert default_text_weight([]) == GENERATED_TEXT_WEIGHT


def test_after_retrieve_reads_only_when_asked_a_question():
    assert after_retrieve({"query": "a dog", "question": "What colour?"}) == "read"
    assert after_retrieve({"query": "a dog", "question": "  "}) == END
    assert after_retrieve({"query": "a dog"}) == END


def test_read_answers_from_the_top_hits_with_the_reader(gallery):
    hits = gallery.search_text("a brown dog jumps", k=3)
    reader = RecordingChat("### Reasoning: it is brown\n### Answer: brown")
    out = read({"question": "What colour is the dog?", "hits": hits}, settings(reader_k=2, reader_images=False),
               reader=reader)
    assert out == {"answer": "brown", "reasoning": "it is brown"}
    prompt = reader.calls[0][1].content
    assert "Picture 2:" in prompt and "Picture 3:" not in prompt  # reader_k images, no more
    with pytest.raises(SettingsError, match="reader"):
        read({"question": "?", "hits": hits}, reader=None)


def test_visret_takes_one_visualizer_under_either_name(gallery, photos):
    found = PhotoVisualizer([photos / "p3.png"])
    for kwargs in ({"visualizers": found}, {"visualizers": [found]}, {"visualizer": found}):
        out = build_visret_graph(gallery, **kwargs).invoke({"query": "a bike"}, context={"guides": 1, "k": 1})
        assert out["guides"][0]["path"] == str(photos / "p3.png")
    with pytest.raises(SettingsError, match="one visualizer"):
        build_visret_graph(gallery, visualizers=[found, PhotoVisualizer([photos / "p1.png"])])
    with pytest.raises(TypeError, match="once"):
        build_visret_graph(gallery, visualizers=found, visualizer=found)
