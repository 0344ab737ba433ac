"""Every registered method keeps the contract (:mod:`pictrieve.agents.method`): a builder taking the
gallery first and the rest by keyword (one argument per need), the input/output/context schemas its
Method names declared on the graph, ``hits`` in every output, no implicit checkpointer, a fixed graph
shape, and a run on a tiny real gallery that returns ImageHit results. Then the contract's shared pieces: the
hit type, rank fusion of hits, run settings, the registry.

The shape snapshots are deliberate: an accidental rewiring of a method shows up here. When a change
to a graph's wiring is intended, update its line below in the same commit.
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass

import pytest
from pydantic import Field

from helpers.galleries import tiny_gallery, tiny_store  # noqa: F401  (fixtures)
from helpers.plugir_fakes import ScriptedChatModel

from pictrieve.graphs.registry import UnknownMethodError, available_methods, get_method
from pictrieve.agents.settings import RunSettings, SettingsError, describe_fields
from pictrieve.vectorstore.fusion import fuse_hits, reciprocal_rank_fusion
from pictrieve.vectorstore.hits import ImageHit, as_hit

JSON_HITS = {"plugir"}
"""Methods whose ``hits`` are ImageHit's JSON (:meth:`ImageHit.to_json`; :func:`as_hit` reads one back), not
ImageHit objects: PlugIR's state is checkpointed between a question and its answer, and LangGraph's serializer
warns that it will refuse classes it was not told of, so PlugIR keeps plain data there (issue 28)."""

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
def builder_kwargs(tiny_gallery, tmp_path_factory):
    """What each method needs besides the gallery, built small and local."""
    kwargs = {"search": {}, "plugir": {"llm": ScriptedChatModel(questions=["Is the dog black?"]),
                                        "answerer": lambda question, state: "yes"}}
    if "vsa" in available_methods():
        from helpers.vsa_fakes import WholeImage, Words

        kwargs["vsa"] = {"llm": ScriptedChatModel(questions=["a dog"]), "vlm": Words(), "detector": WholeImage()}
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
    from helpers.qc2_fakes import build_tiny_checkpoint

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
    assert "hits" in fields and fields["hits"]["type"] == ("list[dict[str, Any]]" if name in JSON_HITS else "list[ImageHit]")


@pytest.mark.parametrize("name", available_methods())
def test_method_describes_itself_as_json(name):
    method = get_method(name)
    described = json.loads(json.dumps(method.describe()))
    assert described["name"] == name and described["description"] == method.description
    assert [n["name"] for n in described["needs"]] == list(method.needs)
    assert [s["name"] for s in described["settings"]] == method.settings_class().names()
    assert all("default" in s and s["type"] for s in described["settings"])
    assert described["text_input"] in {f["name"] for f in described["input"]}
    assert set(method.example_input) <= {f["name"] for f in described["input"]}


@pytest.mark.parametrize("name", available_methods())
def test_every_setting_says_what_it_is_in_its_type(name):
    """Issue 29: a setting's description is part of its type (``Annotated[int, Field(description=...)]``),
    not parsed from source, so LangGraph's context schema (what Studio and the server show) carries it and
    ``describe_fields`` reads the same words."""
    method = get_method(name)
    described = {s["name"]: s["description"] for s in method.settings_fields()}
    assert all(described.values()), f"settings without a description: {[n for n, d in described.items() if not d]}"
    annotated = typing.get_type_hints(method.settings_class(), include_extras=True)
    for field in described:
        assert any(getattr(meta, "description", None) for meta in getattr(annotated[field], "__metadata__", ())), field


@pytest.mark.parametrize("name", available_methods())
def test_every_input_field_is_described_for_studio(name):
    method = get_method(name)
    assert all(f["description"] for f in method.input_fields()), [f["name"] for f in method.input_fields()]


def test_descriptions_come_from_the_type_never_from_source():
    """A class without source (made by exec, as a notebook or a REPL would) is described all the same; a
    docstring under a field is not read."""
    namespace = {"Annotated": typing.Annotated, "Field": Field, "dataclass": dataclass, "RunSettings": RunSettings}
    source = ("@dataclass\nclass Made(RunSettings):\n    k: Annotated[int, Field(description='How many.')] = 3\n"
              "    plain: int = 1\n    '''A docstring is not read.'''\n")
    exec(compile(source, "<made at run time>", "exec", dont_inherit=True), namespace)
    assert describe_fields(namespace["Made"]) == [
        {"name": "k", "type": "int", "description": "How many.", "default": 3},
        {"name": "plain", "type": "int", "description": "", "default": 1}]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_method_keeps_the_contract(name, tiny_store, builder_kwargs):
    """On each store (``tiny_store``: Chroma, and the exact in-memory one): the seam under the methods holds."""
    method = get_method(name)
    builder = method.load_builder()
    params = list(inspect.signature(builder).parameters.values())
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    keywords = {p.name for p in params[1:]}
    assert {"checkpointer", "name"} <= keywords
    assert set(method.needs) - {"checkpointer"} <= keywords, "each need is the builder argument of its name"
    assert issubclass(method.settings_class(), RunSettings) and method.description

    graph = method.build(tiny_store, **builder_kwargs[name])
    assert graph.checkpointer is None and graph.name == name
    assert graph.builder.input_schema is method.input_class()
    assert graph.builder.output_schema is method.output_class()
    assert graph.builder.context_schema is method.settings_class()
    assert graph.get_input_jsonschema()["properties"] and "hits" in graph.get_output_jsonschema()["properties"]
    assert set(graph.get_context_jsonschema()["properties"]) == set(method.settings_class().names())
    described = {s["name"]: s["description"] for s in method.settings_fields()}
    shown = {field: spec.get("description") for field, spec in graph.get_context_jsonschema()["properties"].items()}
    assert shown == described, "the server's context schema (what Studio shows) has each setting's description"
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    assert edges == SHAPES[name]

    result = graph.invoke(INPUTS[name], context=CONTEXTS[name])
    hits = result["hits"]
    if name in JSON_HITS:  # plain data in the checkpointed state, read back with as_hit
        assert hits and all(isinstance(hit, dict) for hit in hits)
        hits = [as_hit(hit) for hit in hits]
    assert hits and all(isinstance(hit, ImageHit) for hit in hits)
    assert [hit.rank for hit in hits] == list(range(1, len(hits) + 1))


def test_hits_are_in_the_output_even_when_nothing_was_searched(tiny_gallery, builder_kwargs):
    """VSA asked about a given photo searches no gallery: its output still carries ``hits``, empty."""
    photo = tiny_gallery.search_text("a dog", k=1)[0].path
    graph = get_method("vsa").build(tiny_gallery, **builder_kwargs["vsa"])
    result = graph.invoke({"question": "what is in this photo?", "image": photo}, context=CONTEXTS["vsa"])
    assert result["hits"] == [] and result["image"] == photo


# --- the contract's shared pieces: the hit type, rank fusion of hits, run settings, the registry -------


def ranked(*ids):
    """ImageHits of these ids, ranked in this order."""
    return [ImageHit(id=i, path=f"/p/{i}.jpg", score=0.5, rank=r) for r, i in enumerate(ids, start=1)]


def test_image_hit_is_json_ready_and_round_trips():
    hit = ImageHit(id="a", path="/p/a.jpg", score=float("nan"), rank=1, captions=["a dog"], metadata={"w": 3})
    data = json.loads(json.dumps(hit.to_json()))
    assert data["score"] == 0.0  # JSON has no NaN
    assert as_hit(data) == hit.model_copy(update={"score": 0.0})
    assert hit.caption == "a dog" and hit.label == "a dog"
    with pytest.raises(Exception):
        hit.rank = 2  # frozen: fusion must copy, never mutate


def test_fuse_hits_hand_computed_with_weights_and_k():
    a, b = ranked("x", "y", "z"), ranked("y", "w")
    fused = fuse_hits([a, b], rrf_k=1)
    # x: 1/2; y: 1/3 + 1/2; z: 1/4; w: 1/3
    assert [(h.id, round(h.score, 6), h.rank) for h in fused] == [
        ("y", round(1 / 3 + 1 / 2, 6), 1), ("x", 0.5, 2), ("w", round(1 / 3, 6), 3), ("z", 0.25, 4)]
    weighted = fuse_hits([a, b], weights=[3.0, 1.0], rrf_k=1, k=2)
    # x: 3/2; y: 3/3 + 1/2 = 1.5 -> tie with x, x seen first
    assert [(h.id, h.score) for h in weighted] == [("x", 1.5), ("y", 1.5)]
    assert [h.rank for h in a] == [1, 2, 3] and a[0].score == 0.5  # inputs untouched


def test_fusion_counts_a_repeated_id_once_per_ranking_at_its_best_rank():
    assert reciprocal_rank_fusion([["a", "b", "a"]], k=0) == [("a", 1.0), ("b", 0.5)]
    with pytest.raises(ValueError, match="weights"):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])


def test_registry_lists_methods_and_refuses_unknown_names():
    assert "search" in available_methods()
    method = get_method("search")
    settings = method.settings_class()
    assert settings.coerce({"k": 3}).k == 3
    with pytest.raises(SettingsError, match="known: k"):
        settings.coerce({"kk": 3})
    with pytest.raises(UnknownMethodError, match="known: .*search"):
        get_method("nope")
