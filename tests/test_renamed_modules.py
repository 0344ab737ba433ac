"""The graph modules renamed to their method's one name keep their old import paths for one release, warning.

Issue 29: PlugIR, QC2 and VSA had a second name in graphs/ (``interactive_retrieval``, ``quality_retrieval``,
``vision_search``). The new modules are ``graphs/<method>.py``; the old paths are aliases that say so.
"""

import importlib
import sys
import warnings

import pytest

RENAMED = [
    ("interactive_retrieval", "plugir", "build_plugir_graph"),
    ("quality_retrieval", "qc2", "build_qc2_graph"),
    ("vision_search", "vsa", "build_vsa_graph"),
]


@pytest.mark.parametrize(("old", "new", "builder"), RENAMED)
def test_the_old_path_warns_and_gives_the_new_module_names(old, new, builder):
    sys.modules.pop(f"pictrieve.graphs.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"pictrieve.graphs.{new}"):
        legacy = importlib.import_module(f"pictrieve.graphs.{old}")
    renamed = importlib.import_module(f"pictrieve.graphs.{new}")
    assert getattr(legacy, builder) is getattr(renamed, builder)


def test_the_old_vsa_builder_name_warns_and_builds_the_same_graph():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        legacy = importlib.import_module("pictrieve.graphs.vision_search")
    from pictrieve.graphs import vsa

    calls = []
    original = vsa.build_vsa_graph
    try:
        vsa.build_vsa_graph = lambda *a, **k: calls.append((a, k)) or "graph"
        with pytest.warns(DeprecationWarning, match="build_vsa_graph"):
            assert legacy.build_vision_search_graph("gallery", llm="offline") == "graph"
    finally:
        vsa.build_vsa_graph = original
    assert calls == [(("gallery",), {"llm": "offline"})]


@pytest.mark.parametrize(("old", "new", "builder"), RENAMED)
def test_each_method_names_its_builder_in_its_own_graph_module(old, new, builder):
    from pictrieve.graphs.registry import get_method

    assert get_method(new).builder == f"pictrieve.graphs.{new}:{builder}"


def test_the_split_offline_questioner_keeps_its_old_path_for_one_release():
    from pictrieve.agents.plugir import offline_answers, offline_questions, offline_reranking

    sys.modules.pop("pictrieve.agents.plugir.offline_questioner", None)
    with pytest.warns(DeprecationWarning, match="offline_questions, offline_answers and offline_reranking"):
        legacy = importlib.import_module("pictrieve.agents.plugir.offline_questioner")
    assert legacy.Question is offline_questions.Question
    assert legacy.answered_facts is offline_answers.answered_facts
    assert legacy.answer_adjustments is offline_reranking.answer_adjustments
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        legacy.nothing_here


def test_the_old_settings_path_warns():
    from pictrieve.agents import settings

    sys.modules.pop("pictrieve.graphs.settings", None)
    with pytest.warns(DeprecationWarning, match="pictrieve.agents.settings"):
        legacy = importlib.import_module("pictrieve.graphs.settings")
    assert legacy.RunSettings is settings.RunSettings


def test_the_langchain_tools_moved_out_of_graphs_keep_their_old_path_for_one_release():
    from pictrieve.integrations import langchain_tools

    sys.modules.pop("pictrieve.graphs.vision_search_tools", None)
    with pytest.warns(DeprecationWarning, match="pictrieve.integrations.langchain_tools"):
        legacy = importlib.import_module("pictrieve.graphs.vision_search_tools")
    for name in ("image_search_tool", "ask_about_image_tool", "ask_gallery_tool", "hit_rows", "gallery_image_lookup"):
        assert getattr(legacy, name) is getattr(langchain_tools, name)
