"""Every registered method keeps the contract (:mod:`pictrieve.agents.method`): a builder taking the
gallery first and the rest by keyword (one argument per need), the input/output/context schemas its
Method names declared on the graph, ``hits`` in every output, no implicit checkpointer, a fixed graph
shape, and a run on a tiny real gallery that returns ImageHit results.

The shape snapshots are deliberate: an accidental rewiring of a method shows up here. When a change
to a graph's wiring is intended, update its line below in the same commit.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plugir_fakes import ScriptedChatModel  # noqa: E402

from pictrieve.graphs.registry import available_methods, get_method  # noqa: E402
from pictrieve.graphs.settings import RunSettings  # noqa: E402
from pictrieve.vectorstore.gallery import Gallery  # noqa: E402
from pictrieve.vectorstore.hits import ImageHit  # noqa: E402

SHAPES = {
    "search": {("__start__", "retrieve"), ("retrieve", "__end__")},
    "plugir": {("__start__", "reformulate"), ("reformulate", "retrieve"), ("retrieve", "extract_context"),
               ("retrieve", "__end__"), ("extract_context", "generate_questions"),
               ("generate_questions", "filter_and_select"), ("filter_and_select", "ask"), ("ask", "reformulate"),
               ("ask", "__end__")},
    "qc2": {("__start__", "complete"), ("complete", "retrieve"), ("retrieve", "__end__")},
    "vsa": {("__start__", "retrieve"), ("retrieve", "regions"), ("regions", "describe"), ("describe", "plan"),
            ("plan", "search"), ("plan", "summarize"), ("search", "plan"), ("summarize", "answer"),
            ("answer", "__end__")},
    "visret": {("__start__", "rewrite"), ("rewrite", "visualize"), ("visualize", "retrieve"), ("retrieve", "__end__"),
               ("retrieve", "read"), ("read", "__end__")},
    "needle": {("__start__", "refine"), ("refine", "visualize"), ("visualize", "review_guides"),
               ("visualize", "screen_guides"), ("review_guides", "regenerate"), ("review_guides", "rank"),
               ("regenerate", "review_guides"), ("regenerate", "rank"), ("screen_guides", "rank"),
               ("rank", "review_results"), ("rank", "__end__"), ("review_results", "learn"), ("learn", "__end__")},
}


@pytest.fixture(scope="module")
def tiny_gallery(tmp_path_factory, tiny_clip_embedder):
    from conftest import make_photo

    root = tmp_path_factory.mktemp("contract")
    for i, caption in enumerate(["a black dog runs", "a brown dog jumps", "two children play", "a man rides a bike"]):
        make_photo(root / "photos" / f"p{i}.png", seed=i)
        (root / "photos" / f"p{i}.txt").write_text(caption + "\n")
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery


@pytest.fixture(scope="module")
def builder_kwargs(tiny_gallery, tmp_path_factory):
    """What each method needs besides the gallery, built small and local."""
    kwargs = {"search": {}, "plugir": {"llm": ScriptedChatModel(questions=["Is the dog black?"]),
                                        "answerer": lambda question, state: "yes"}}
    if "vsa" in available_methods():
        from test_vsa import _WholeImage, _Words

        kwargs["vsa"] = {"llm": ScriptedChatModel(questions=["a dog"]), "vlm": _Words(), "detector": _WholeImage()}
    kwargs["visret"] = {"visualizers": [_PhotoGuides(tiny_gallery)], "cache_dir": tmp_path_factory.mktemp("visret-guides")}
    kwargs["needle"] = {"visualizers": [_PhotoGuides(tiny_gallery)], "cache_dir": tmp_path_factory.mktemp("guides")}
    if "qc2" in available_methods():
        from pictrieve.agents.qc2.annotation import annotate_gallery
        from pictrieve.agents.qc2.pipeline import train_on_gallery
        from pictrieve.agents.qc2.training import QC2TrainConfig
        from pictrieve.tools.models.quality_scorers import create_quality_scorer

        annotate_gallery(tiny_gallery, [create_quality_scorer("brisque")], progress=False)
        checkpoint = _tiny_checkpoint(tmp_path_factory)
        model, _, _ = train_on_gallery(tiny_gallery, base_model=checkpoint, save=False, progress=False,
                                       config=QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1))
        kwargs["qc2"] = {"qc2_model": model}
    return kwargs


class _PhotoGuides:
    """A visualizer returning the gallery's own photos (control flow only)."""

    name, generates = "photos", False

    def __init__(self, gallery):
        self.paths = [hit.path for hit in gallery.search_text("a dog", k=4)]

    def visualize(self, prompt, *, n=1, seed=None):
        from PIL import Image

        return [Image.open(p).convert("RGB") for p in self.paths[:n]]


def _tiny_checkpoint(tmp_path_factory):
    from qc2_fakes import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama"))


INPUTS = {"search": {"query": "a dog"}, "plugir": {"description": "a dog"}, "qc2": {"query": "a dog"},
          "vsa": {"question": "which photo shows a dog?"}, "visret": {"query": "a dog"},
          "needle": {"query": "a dog"}}
CONTEXTS = {"search": {"k": 2}, "plugir": {"max_rounds": 1, "shown_k": 2, "candidate_k": 4, "clusters": 2},
            "qc2": {"k": 2, "max_new_tokens": 2, "seed": 0}, "vsa": {"candidate_k": 2}, "visret": {"k": 2, "guides": 2},
            "needle": {"k": 2, "guides": 2}}


def test_every_method_has_a_shape_snapshot_and_an_input():
    assert set(available_methods()) == set(SHAPES) == set(INPUTS)


@pytest.mark.parametrize("name", available_methods())
def test_every_output_carries_hits(name):
    """One output shape: ``hits`` (a list of ImageHit, possibly empty) in every method's output schema,
    read from the Method without building a graph."""
    fields = {f["name"]: f for f in get_method(name).output_fields()}
    assert "hits" in fields and fields["hits"]["type"] == "list[ImageHit]"


@pytest.mark.parametrize("name", available_methods())
def test_method_describes_itself_as_json(name):
    import json

    method = get_method(name)
    described = json.loads(json.dumps(method.describe()))
    assert described["name"] == name and described["description"] == method.description
    assert [n["name"] for n in described["needs"]] == list(method.needs)
    assert [s["name"] for s in described["settings"]] == method.settings_class().names()
    assert all("default" in s and s["type"] for s in described["settings"])
    assert described["text_input"] in {f["name"] for f in described["input"]}
    assert set(method.example_input) <= {f["name"] for f in described["input"]}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_method_keeps_the_contract(name, tiny_gallery, builder_kwargs):
    method = get_method(name)
    builder = method.load_builder()
    params = list(inspect.signature(builder).parameters.values())
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    keywords = {p.name for p in params[1:]}
    assert {"checkpointer", "name"} <= keywords
    assert set(method.needs) - {"checkpointer"} <= keywords, "each need is the builder argument of its name"
    assert issubclass(method.settings_class(), RunSettings) and method.description

    graph = method.build(tiny_gallery, **builder_kwargs[name])
    assert graph.checkpointer is None and graph.name == name
    assert graph.builder.input_schema is method.input_class()
    assert graph.builder.output_schema is method.output_class()
    assert graph.builder.context_schema is method.settings_class()
    assert graph.get_input_jsonschema()["properties"] and "hits" in graph.get_output_jsonschema()["properties"]
    assert set(graph.get_context_jsonschema()["properties"]) == set(method.settings_class().names())
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    assert edges == SHAPES[name]

    result = graph.invoke(INPUTS[name], context=CONTEXTS[name])
    hits = result["hits"]
    assert hits and all(isinstance(hit, ImageHit) for hit in hits)
    assert [hit.rank for hit in hits] == list(range(1, len(hits) + 1))


def test_hits_are_in_the_output_even_when_nothing_was_searched(tiny_gallery, builder_kwargs):
    """VSA asked about a given photo searches no gallery: its output still carries ``hits``, empty."""
    photo = tiny_gallery.search_text("a dog", k=1)[0].path
    graph = get_method("vsa").build(tiny_gallery, **builder_kwargs["vsa"])
    result = graph.invoke({"question": "what is in this photo?", "image": photo}, context=CONTEXTS["vsa"])
    assert result["hits"] == [] and result["image"] == photo
