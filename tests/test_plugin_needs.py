"""A need a plugin declares itself reaches its builder through every front end that runs it, made by the need's
own resolver: the page (``create_app(needs=...)``), the LangGraph server (the need's variable, and a run's
``configurable`` only when the operator allowed the value) and ``pictrieve search --need``. The method here is
the toy plugin's graph (``tests/data/toy_pictrieve_method``, which takes a ``label``) registered with a ``label``
need of its own."""

from __future__ import annotations

import pytest
from helpers.galleries import tiny_gallery  # noqa: F401  (fixture)
from helpers.method_plugins import install_toy, installed_in_process
from pictrieve.agents.method import Method
from pictrieve.agents.needs import Need

RESOLVED: list[object] = []


def label_of(value, context):
    """The toy's label, made by the need's resolver (which sees the gallery it will search)."""
    RESOLVED.append(value)
    return f"{value or 'unlabelled'} over {context.gallery.count()} photos"


LABEL = Need("label", "the words the toy's note starts with", label_of, env_var="TOY_NEED_LABEL",
             cli_option="--label", config_key="label")


@pytest.fixture(scope="module")
def labelled_toy(tmp_path_factory):
    from pictrieve.graphs.registry import register_method, unregister_method

    folder = install_toy(tmp_path_factory.mktemp("plugins"))
    with installed_in_process(folder):
        graph = "toy_pictrieve_method.graph"
        method = Method(name="labelled_toy", description="the toy, its label a need of its own",
                        builder=f"{graph}:build_toy_graph", settings=f"{graph}:ToySettings",
                        input_schema=f"{graph}:ToyInput", output_schema=f"{graph}:ToyOutput", needs=(LABEL,))
        register_method(method)
        yield method
        unregister_method("labelled_toy")


def test_the_page_gives_the_need_it_was_started_with(labelled_toy, tiny_gallery, tmp_path):  # noqa: F811
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    from helpers.web_page import finished, page_client
    from pictrieve.ui.app import create_app

    app = create_app(tiny_gallery, state_dir=tmp_path / "state", needs={"label": "the page's"})
    client = page_client(app, raise_server_exceptions=False)
    started = client.post("/api/methods/labelled_toy/run", json={"input": {"query": "a dog"}, "settings": {"k": "2"}})
    view = finished(client, started.json())
    assert not view["error"], view
    assert view["result"]["output"]["note"] == "the page's over 4 photos ranked 2 images for 'a dog'"


def test_the_langgraph_server_gives_the_operators_value_and_a_runs_allowed_choice(labelled_toy, tiny_gallery,  # noqa: F811
                                                                                 monkeypatch):
    from pictrieve.graphs import serving

    monkeypatch.setenv(serving.ENV_GALLERY, str(tiny_gallery.location))
    monkeypatch.setenv("TOY_NEED_LABEL", "the operator's")
    monkeypatch.delenv(serving.ENV_ALLOW, raising=False)
    graph = serving.served_graph("labelled_toy")
    note = graph.invoke({"query": "a dog"}, context={"k": 1})["note"]
    assert note == "the operator's over 4 photos ranked 1 images for 'a dog'"
    chosen = {"configurable": {"label": "a run's"}}
    with pytest.raises(serving.ServingConfigError, match="configurable.label=\"a run's\" is not allowed"):
        serving.served_graph("labelled_toy", chosen)
    monkeypatch.setenv(serving.ENV_ALLOW, '{"label": ["a run\'s"]}')
    note = serving.served_graph("labelled_toy", chosen).invoke({"query": "a dog"}, context={"k": 1})["note"]
    assert note.startswith("a run's over 4 photos")


def test_pictrieve_search_gives_it_with_need(labelled_toy, tiny_gallery):  # noqa: F811
    from pictrieve.cli.method_search import run_method

    RESOLVED.clear()
    hits = run_method(tiny_gallery, "labelled_toy", "a dog", k=2, own_needs=("label=mine",))
    assert RESOLVED == ["mine"]  # made by the need's resolver from --need label=mine
    assert [h.id for h in hits] == [h.id for h in tiny_gallery.search_text("a dog", k=2)]
