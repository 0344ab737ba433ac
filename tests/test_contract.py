"""The method contract's shared pieces: the hit type, rank fusion of hits, run settings, the registry."""

import json

import pytest

from pictrieve.graphs.registry import UnknownMethodError, available_methods, get_method
from pictrieve.graphs.settings import SettingsError
from pictrieve.vectorstore.fusion import fuse_hits, reciprocal_rank_fusion
from pictrieve.vectorstore.hits import ImageHit, as_hit


def hits(*ids):
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
    a, b = hits("x", "y", "z"), hits("y", "w")
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
