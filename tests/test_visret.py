"""VisRet: the graph's wiring, reciprocal rank fusion with the authors' constant, rewrite, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from helpers.visret_fakes import PhotoVisualizer, RecordingChat, gallery, hand_fused, photos  # noqa: F401  (fixtures)
from pictrieve.agents.settings import SettingsError
from pictrieve.agents.visret.nodes import VisRetSettings
from pictrieve.graphs.visret import build_visret_graph
from pictrieve.vectorstore.gallery import Gallery


def _id(gallery, path):
    return next(h.id for h in gallery.search_image(str(path), k=1))


def test_each_guide_finds_itself_and_rrf_uses_constant_one(gallery, photos):
    guides = [photos / "p3.png", photos / "p1.png"]
    graph = build_visret_graph(gallery, visualizers=PhotoVisualizer(guides))
    out = graph.invoke({"query": "a bike"}, context={"k": 5, "guides": 2, "text_weight": 0})
    hits = out["hits"]
    assert out["prompt"] == "a bike"  # no llm: the query is visualized as is
    assert [(g["id"], g["path"], g["generated"], g["status"]) for g in out["guides"]] == [
        ("g1", str(guides[0]), False, "used"), ("g2", str(guides[1]), False, "used")]
    assert [h.id for h in hits[:2]] == [_id(gallery, guides[0]), _id(gallery, guides[1])]
    # Hand-computed: each guide ranks itself first: 1/(1+1) + 1/(1+r_other) with rrf_k = 1.
    per_guide = [[h.id for h in gallery.search_image(str(g), k=100)] for g in guides]
    expected = {}
    for ranking in per_guide:
        for rank, id_ in enumerate(ranking, start=1):
            expected[id_] = expected.get(id_, 0.0) + 1.0 / (1.0 + rank)
    assert {h.id: pytest.approx(expected[h.id]) for h in hits} == {h.id: h.score for h in hits}
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]


def test_m_limits_guides_and_text_fusion_adds_the_text_ranking(gallery, photos):
    visualizer = PhotoVisualizer([photos / "p0.png", photos / "p2.png", photos / "p4.png"])
    graph = build_visret_graph(gallery, visualizers=visualizer)
    assert graph.invoke({"query": "x"}, context={"guides": 1, "k": 1, "text_weight": 0})["hits"][0].id == _id(gallery, photos / "p0.png")
    plain = graph.invoke({"query": "a red square"}, context={"guides": 1, "k": 5, "text_weight": 0})["hits"]
    fused = graph.invoke({"query": "a red square"}, context={"guides": 1, "k": 5, "text_weight": 5.0})["hits"]
    assert fused[0].id == gallery.search_text("a red square", k=1)[0].id
    assert [h.score for h in fused] != [h.score for h in plain]


@pytest.mark.parametrize("weight", [0.0, 0.5, 4.0])
def test_text_weight_scales_the_text_ranking_in_the_fusion(gallery, photos, weight):
    guides = [photos / "p0.png", photos / "p2.png"]
    graph = build_visret_graph(gallery, visualizers=PhotoVisualizer(guides))
    hits = graph.invoke({"query": "a red square"}, context={"guides": 2, "k": 5, "text_weight": weight})["hits"]
    expected = hand_fused(gallery, guides, "a red square", weight)
    assert [h.score for h in hits] == pytest.approx([score for _, score in expected])
    assert {h.id for h in hits} == {id_ for id_, _ in expected}
    if weight == 4.0:  # trusted enough, the text's own best image leads however the guides rank it
        assert hits[0].id == gallery.search_text("a red square", k=1)[0].id


def test_text_weight_default_follows_the_guides_family(gallery, photos):
    from pictrieve.agents.visret.nodes import EXEMPLAR_TEXT_WEIGHT, GENERATED_TEXT_WEIGHT

    assert EXEMPLAR_TEXT_WEIGHT > 0 and GENERATED_TEXT_WEIGHT == 0
    guides = [photos / "p0.png", photos / "p2.png"]
    for generates, weight in ((False, EXEMPLAR_TEXT_WEIGHT), (True, GENERATED_TEXT_WEIGHT)):
        visualizer = PhotoVisualizer(guides)
        visualizer.generates = generates
        hits = build_visret_graph(gallery, visualizers=visualizer).invoke(
            {"query": "a red square"}, context={"guides": 2, "k": 5})["hits"]
        assert [h.score for h in hits] == pytest.approx([s for _, s in hand_fused(gallery, guides, "a red square",
                                                                                   weight)])


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), True, "2"])
def test_text_weight_is_validated(bad):
    with pytest.raises(SettingsError, match="text_weight"):
        VisRetSettings(text_weight=bad)
    assert VisRetSettings(text_weight=None).text_weight is None and VisRetSettings(text_weight=0).text_weight == 0


def test_llm_rewrites_the_query_into_the_visualization_prompt(gallery, photos):
    visualizer = PhotoVisualizer([photos / "p1.png"])
    llm = FakeListChatModel(responses=['"A brown dog in mid-jump over grass."\nextra line'])
    out = build_visret_graph(gallery, llm=llm, visualizers=visualizer).invoke({"query": "jumping dog"}, context={"guides": 1})
    assert out["prompt"] == "A brown dog in mid-jump over grass."
    assert visualizer.prompts == [out["prompt"]]


def test_exemplar_visualizer_end_to_end(gallery, photos, tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    graph = build_visret_graph(gallery, visualizers=f"exemplar:{photos}")
    hits = graph.invoke({"query": "a man riding a bicycle"}, context={"guides": 1, "k": 3, "text_weight": 0})["hits"]
    assert hits[0].id == _id(gallery, photos / "p3.png")


def test_bad_settings_and_missing_visualizer(gallery):
    with pytest.raises(SettingsError):
        VisRetSettings(guides=0)
    with pytest.raises(SettingsError):
        VisRetSettings(rrf_k=-1)
    with pytest.raises(SettingsError, match="visualizer"):
        build_visret_graph(gallery).invoke({"query": "a dog"})


def test_cli_search_method_visret(gallery, photos, tmp_path, monkeypatch):
    from pictrieve.cli.main import cli

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    # The tiny test embedder has random weights per instance: make the CLI use this gallery's instance.
    monkeypatch.setattr(Gallery, "open", classmethod(lambda cls, *args, **kwargs: gallery))
    runner = CliRunner()
    args = ["search", "a man riding a bicycle", "-g", str(gallery.location), "-k", "2", "--json"]
    result = runner.invoke(cli, args + ["--method", "visret", "--visualizer", f"exemplar:{photos}"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]  # stderr carries the progress
    # Each step is announced as it starts, so a slow one (a model loading) never leaves the terminal silent.
    steps = set(build_visret_graph(gallery, visualizers=f"exemplar:{photos}").get_graph().nodes) - {"__start__", "__end__"}
    announced = set(re.findall(r"^\[ *[\d.]+s\] (\w+)\.\.\.$", result.stderr, re.M))  # "[   0.1s] retrieve..."
    assert {"rewrite", "visualize", "retrieve"} <= announced <= steps, result.stderr  # `read` runs for a question
    expected = build_visret_graph(gallery, visualizers=f"exemplar:{photos}").invoke(
        {"query": "a man riding a bicycle"}, context={"k": 2})["hits"]
    assert [h["id"] for h in hits] == [h.id for h in expected] and len(hits) == 2
    missing = runner.invoke(cli, args + ["--method", "visret"])
    assert missing.exit_code != 0 and "--visualizer" in missing.output


def test_cli_visret_shows_its_guide_pictures(gallery, photos, tmp_path, monkeypatch):
    """The guide pictures VisRet searched with are listed in the text output and --json, and the --html
    contact sheet shows them above the results."""
    from click.testing import CliRunner

    from pictrieve.cli.main import cli
    from pictrieve.vectorstore.gallery import Gallery

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(Gallery, "open", classmethod(lambda cls, *args, **kwargs: gallery))
    runner = CliRunner()
    args = ["search", "a man riding a bicycle", "-g", str(gallery.location), "-k", "2", "--method", "visret",
            "--visualizer", f"exemplar:{photos}", "--guides", "2"]
    sheet = tmp_path / "sheet.html"
    as_json = runner.invoke(cli, args + ["--json", "--html", str(sheet)])
    assert as_json.exit_code == 0, as_json.output
    guides = json.loads(as_json.stdout)["guides"]
    assert len(guides) == 2 and all(g["status"] == "used" and not g["generated"] for g in guides)
    assert all(Path(g["path"]).parent == photos and g["id"] for g in guides)
    page = sheet.read_text()
    assert page.index("guide pictures the search used") < page.index("<figure")  # the guides come first
    assert page.count("exemplar photo, used") == 2
    text = runner.invoke(cli, args)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0] == "guide pictures:" and lines[3] == "results:", text.stdout
    assert all(g["path"] in text.stdout for g in guides) and "exemplar photo, used" in lines[1]


# ---------------------------------------------------------------------- visual RAG: reader and judge


def test_reader_sends_pictures_to_a_vlm_and_descriptions_to_a_text_model(gallery, photos):
    visualizer = PhotoVisualizer([photos / "p1.png"])
    vlm = RecordingChat("### Reasoning: the second picture shows it\n### Answer: **brown**")
    graph = build_visret_graph(gallery, visualizers=visualizer, reader=vlm)
    out = graph.invoke({"query": "a dog", "question": "What colour is the dog?"}, context={"guides": 1, "reader_k": 2, "text_weight": 0})
    assert out["answer"] == "brown" and out["reasoning"] == "the second picture shows it"
    content = vlm.calls[0][1].content
    pictures = [part for part in content if part["type"] == "image_url"]
    assert len(pictures) == 2 and pictures[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert pictures[0]["image_url"]["detail"] == "high"  # the field the API reads (the authors sent "quality")
    text_only = RecordingChat("no format at all: black", refuse_images=True)
    out = build_visret_graph(gallery, visualizers=visualizer, reader=text_only).invoke(
        {"query": "a dog", "question": "What colour?"}, context={"guides": 1, "reader_k": 1, "text_weight": 0})
    assert out["answer"] == "no format at all: black"
    prompt = text_only.calls[0][1].content
    assert isinstance(prompt, str) and "Picture 1: a brown dog jumps" in prompt  # the stored caption
    # Without a question the graph only retrieves; with one but no reader it says what to pass.
    assert "answer" not in build_visret_graph(gallery, visualizers=visualizer).invoke({"query": "a dog"}, context={"guides": 1})
    with pytest.raises(SettingsError, match="reader"):
        build_visret_graph(gallery, visualizers=visualizer).invoke({"query": "a dog", "question": "?"}, context={"guides": 1})


@pytest.mark.parametrize("reply, score", [
    ("Score: 1 | correct", 1.0), ("Score: 0.5 | one of two features", 0.5), ("Score: -0.5 | Likely hallucination", 0.0),
    ("I think Score: 0.75 and later Score: 0.1", 0.75), ("no score here", 0.0), ("Score: 3", 1.0),
])
def test_judge_scores_are_parsed_like_the_papers_and_clamped(reply, score):
    from pictrieve.agents.judge import judge_answer

    judge = RecordingChat(reply)
    got, raw = judge_answer(judge, "What colour are the wings?", ["red", "crimson"], "They are red.")
    assert got == score and raw == reply
    assert judge.bound == [{"temperature": 0}]  # deterministic grading
    prompt = judge.calls[0][0].content
    assert "Reference answer: red, or crimson" in prompt and "Student answer: They are red." in prompt
