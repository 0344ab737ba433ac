"""A third-party method, installed from a test fixture through the ``pictrieve.methods`` entry point group,
shows up everywhere with no change to pictrieve: ``pictrieve methods``, ``pictrieve search --method``,
the web page (a generic tab, in headless Chromium) and the real ``langgraph dev`` (configured by
``pictrieve serve --write-config``). A broken plugin is logged once and skipped.

The toy method (tests/data/toy_pictrieve_method) ranks by the gallery's text search, optionally reversed,
so each run is checked against plain search over the same gallery.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import make_photo
from helpers.method_plugins import install_toy, installed_in_process, plugin_env
from helpers.web_page import browser  # noqa: F401  (the headless Chromium fixture)

from pictrieve.graphs.registry import available_methods, refresh_methods, skipped_methods


def pictrieve(folder: Path, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, with ``folder``'s plugins installed (on its PYTHONPATH)."""
    result = subprocess.run([sys.executable, "-m", "pictrieve.cli.main", *args], capture_output=True, text=True,
                            timeout=600, env=plugin_env(folder), input=input)
    if check and result.returncode != 0:
        raise AssertionError(f"pictrieve {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def plugins(tmp_path_factory) -> Path:
    """A folder holding the toy method and a broken plugin, installed as distributions."""
    return install_toy(tmp_path_factory.mktemp("plugins"), broken=True)


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("plugin-gallery")
    for i in range(6):
        make_photo(root / "photos" / f"img{i}.png", seed=i)
    (root / "photos" / "img0.txt").write_text("a red square\n")
    opened = Gallery.open(root / "g.gallery", tiny_clip_name)
    opened.add(root / "photos", progress=False)
    return opened


def test_methods_json_lists_the_plugin_with_its_settings_and_skips_the_broken_one(plugins):
    result = pictrieve(plugins, "methods", "--json")
    listing = json.loads(result.stdout)
    toy = next(m for m in listing["methods"] if m["name"] == "toy")
    assert toy["origin"] == "entry point toy (toy-pictrieve-method)"
    assert toy["input"] == [{"name": "query", "type": "str", "description": "", "required": True}]
    assert toy["settings"] == [
        {"name": "k", "type": "int", "description": "How many images to return.", "default": 3},
        {"name": "reverse", "type": "bool", "description": "Return the k best images worst first.", "default": False}]
    assert {"name", "type", "required"} <= set(toy["output"][0]) and toy["output"][0]["name"] == "hits"
    assert {m["name"] for m in listing["methods"]} == {*available_methods(), "toy"}
    (skipped,) = listing["skipped"]
    assert skipped["entry_point"].startswith("broken = ") and "no_such_module_for_pictrieve" in skipped["error"]
    # Logged once, with its name; the other methods are listed all the same.
    assert result.stderr.count("skipping the method plugin broken") == 1
    text = pictrieve(plugins, "methods").stdout
    assert "toy  (entry point toy (toy-pictrieve-method))" in text and "reverse: bool = false" in text
    assert "--method NAME` runs: " in text and "toy" in text.rsplit("runs: ", 1)[1]


def test_search_runs_the_plugin_with_its_settings(plugins, gallery):
    args = ["search", "a red square", "-g", str(gallery.location), "-k", "4", "--json"]
    # The toy ranks by vectors alone; plain search is hybrid by default (img0's caption says the words).
    plain = [h["id"] for h in json.loads(pictrieve(plugins, *args, "--no-hybrid").stdout)["hits"]]
    toy = json.loads(pictrieve(plugins, *args, "--method", "toy", "--set", "reverse=true").stdout)["hits"]
    assert [h["id"] for h in toy] == plain[::-1] and [h["rank"] for h in toy] == [1, 2, 3, 4]
    assert "toy" in pictrieve(plugins, "search", "--help").stdout  # the help lists it
    wrong = pictrieve(plugins, *args, "--method", "toy", "--set", "reverse=maybe", check=False)
    assert wrong.returncode == 2 and "reverse must be true or false" in wrong.stderr
    unknown = pictrieve(plugins, *args, "--method", "toy", "--set", "depth=3", check=False)
    assert unknown.returncode == 2 and "unknown setting 'depth'" in unknown.stderr
    guides = pictrieve(plugins, *args, "--method", "toy", "--guides", "2", check=False)
    assert guides.returncode == 2 and "--guides does not apply to --method toy" in guides.stderr


def test_without_the_plugin_toy_is_unknown(gallery, tmp_path):
    result = pictrieve(tmp_path, "search", "a", "-g", str(gallery.location), "--method", "toy", check=False)
    assert result.returncode == 2 and "'toy' is not a registered method" in result.stderr


def test_a_broken_plugin_is_logged_once_and_skipped_in_process(plugins, caplog):
    with caplog.at_level(logging.WARNING, logger="pictrieve.graphs.registry"), installed_in_process(plugins):
        names = available_methods()
        available_methods()  # found once: no second warning
        assert "toy" in names and "broken" not in names
        assert [s["distribution"] for s in skipped_methods()] == ["broken-pictrieve-plugin"]
    warnings = [r for r in caplog.records if "skipping the method plugin" in r.getMessage()]
    assert len(warnings) == 1 and "broken = no_such_module_for_pictrieve:METHOD" in warnings[0].getMessage()
    assert "toy" not in available_methods()


def test_a_plugin_cannot_take_a_built_in_name(tmp_path, caplog):
    from helpers.method_plugins import write_distribution

    write_distribution(tmp_path, "shadow-pictrieve-plugin", {"search": "pictrieve.agents.search:METHOD"})
    sys.path.insert(0, str(tmp_path))
    refresh_methods()
    try:
        with caplog.at_level(logging.WARNING, logger="pictrieve.graphs.registry"):
            from pictrieve.graphs.registry import method_origin

            assert method_origin("search") == "built-in"
        assert "taken by another method" in skipped_methods()[0]["error"]
    finally:
        sys.path.remove(str(tmp_path))
        refresh_methods()


# --- the web page -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_app(plugins, gallery, tmp_path_factory):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    from pictrieve.ui.app import create_app

    with installed_in_process(plugins):
        yield create_app(gallery, state_dir=tmp_path_factory.mktemp("ui-state"))


def test_page_api_runs_the_plugin_as_a_generic_tab(toy_app, gallery):
    from helpers.web_page import page_client

    from helpers.web_page import finished

    client = page_client(toy_app, raise_server_exceptions=False)
    status = client.get("/api/status").json()
    assert [m["name"] for m in status["generic"]] == ["toy"] and "toy" in status["methods"]
    tabs = {m["name"]: m["tab"] for m in client.get("/api/methods").json()}
    assert tabs["toy"] == "generic" and tabs["plugir"] == "chat" and tabs["search"] == "search"
    started = client.post("/api/methods/toy/run", json={"input": {"query": "a red square"},
                                                         "settings": {"k": "3", "reverse": "true"}}).json()
    view = finished(client, started)
    assert not view["error"] and view["steps"] == ["building toy…", "rank: done"]
    expected = [h.id for h in gallery.search_text("a red square", k=3)][::-1]
    assert [h["id"] for h in view["result"]["hits"]] == expected
    assert view["result"]["output"] == {"note": "toy ranked 3 images for 'a red square'"}
    bad = client.post("/api/methods/toy/run", json={"input": {"query": "x"}, "settings": {"k": "0"}})
    assert bad.status_code == 400 and bad.json()["error"] == "k must be a whole number >= 1, got 0"
    empty = client.post("/api/methods/toy/run", json={"input": {"query": " "}})
    assert empty.status_code == 400 and "type the query" in empty.json()["error"]
    own = client.post("/api/methods/plugir/run", json={"input": {"description": "x"}})
    assert own.status_code == 400 and "it has its own: chat" in own.json()["error"]


@pytest.mark.browser
def test_page_shows_the_plugin_tab_and_runs_it(toy_app, gallery, browser):
    from helpers.web_page import serve

    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    try:
        with serve(toy_app) as url:
            page.goto(url)
            page.wait_for_selector("#tabs button[data-tab=m-toy]")
            assert page.text_content("#tabs button[data-tab=m-toy]") == "toy"
            page.click("#tabs button[data-tab=m-toy]")
            page.wait_for_selector("#tab-m-toy:not([hidden])")
            assert "a plugin installed by a test fixture" in page.text_content("#tab-m-toy .help")
            page.fill("#m-toy-in-query", "a red square")
            page.click("#m-toy-settings summary")
            page.fill("#m-toy-set-k", "3")
            page.select_option("#m-toy-set-reverse", "true")
            page.click("#m-toy-form button[type=submit]")
            page.wait_for_function("() => document.querySelectorAll('#m-toy-grid .card').length === 3")
            shown = page.eval_on_selector_all("#m-toy-grid .card", "cards => cards.map(c => c.dataset.id)")
            assert shown == [h.id for h in gallery.search_text("a red square", k=3)][::-1]
            assert page.text_content("#m-toy-output") == "note: toy ranked 3 images for 'a red square'"
            assert page.eval_on_selector_all("#m-toy-steps li", "items => items.map(i => i.textContent)") == [
                "building toy…", "rank: done"]
            page.reload()  # the hash brings the visitor back to the plugin's tab
            page.wait_for_selector("#tab-m-toy:not([hidden])")
    finally:
        context.close()


# --- the LangGraph server -----------------------------------------------------------------------------


@pytest.mark.server
def test_langgraph_dev_serves_the_plugin_from_the_written_config(plugins, gallery, tmp_path):
    """`pictrieve serve --write-config` (with the plugins installed) names the toy; the real `langgraph dev`
    started on that file serves it beside the built-ins, and runs it with its settings as context."""
    from langgraph_sdk import get_sync_client

    from helpers.langgraph_dev import start, stop

    config = tmp_path / "langgraph.json"
    written = pictrieve(plugins, "serve", "--write-config", str(config), "-g", str(gallery.location))
    assert "toy" in written.stdout
    spec = json.loads(config.read_text())
    assert set(spec["graphs"]) == {*available_methods(), "toy"} and spec["env"]["PICTRIEVE_GALLERY"]
    env = plugin_env(plugins, {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
                               "PICTRIEVE_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"})
    process, url = start(config, env, tmp_path)
    try:
        client = get_sync_client(url=url)
        assert {a["graph_id"] for a in client.assistants.search(limit=100)} == {*available_methods(), "toy"}
        plain = client.runs.wait(None, "search", input={"query": "a red square", "hybrid": False}, context={"k": 3})
        toy = client.runs.wait(None, "toy", input={"query": "a red square"}, context={"k": 3, "reverse": True})
        assert [h["id"] for h in toy["hits"]] == [h["id"] for h in plain["hits"]][::-1]
        assert toy["note"] == "toy ranked 3 images for 'a red square'"
        assert [h["rank"] for h in toy["hits"]] == [1, 2, 3]
        # The method's own served arguments (Method.served), from the assistant's config:
        assistant = client.assistants.create("toy", config={"configurable": {"toy_label": "the served toy"}})
        labelled = client.runs.wait(None, assistant["assistant_id"], input={"query": "a red square"}, context={"k": 2})
        assert labelled["note"] == "the served toy ranked 2 images for 'a red square'"
    finally:
        stop(process)


def test_a_method_registered_later_is_served_by_name(plugins, gallery, monkeypatch):
    """A method registered in a running program gets a factory through the module's ``__getattr__``,
    under ``<name>_graph`` when its name is taken by something else of serving.py."""
    import asyncio
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from pictrieve.graphs import serving
    from pictrieve.graphs.registry import register_method, unregister_method

    with installed_in_process(plugins):
        from toy_pictrieve_method import METHOD

        register_method(dataclasses.replace(METHOD, name="os"))  # serving.py imports os
        try:
            assert serving.factory_name("os") == "os_graph" and serving.served_graphs(["os"]) == {
                "os": f"{serving.__file__}:os_graph"}
            monkeypatch.setenv("PICTRIEVE_GALLERY", str(gallery.location))  # the operator's, never a run's
            config = {"configurable": {"toy_label": "late"}}
            # The factory is async, as the server awaits it (in a thread of our own: the browser tests'
            # Playwright keeps an event loop running in this one).
            with ThreadPoolExecutor(1) as pool:
                graph = pool.submit(asyncio.run, serving.os_graph(config)).result()
            assert graph.name == "os"
            result = graph.invoke({"query": "a red square"}, context={"k": 2})
            assert result["note"] == "late ranked 2 images for 'a red square'" and len(result["hits"]) == 2
        finally:
            unregister_method("os")
    assert "os" not in available_methods()


def test_unregistering_a_method_removes_it_at_once():
    """A method added in the program and removed again is gone from the loaded registry straight away
    (not only after something else refreshes it)."""
    import dataclasses

    from pictrieve.graphs.registry import get_method, register_method, unregister_method

    available_methods()  # the registry is loaded before the method comes and goes
    register_method(dataclasses.replace(get_method("search"), name="short_lived"))
    try:
        assert "short_lived" in available_methods()
    finally:
        unregister_method("short_lived")
    assert "short_lived" not in available_methods()
    assert "search" in available_methods()


def test_a_method_s_step_table_words_its_generic_tab(toy_app, gallery):
    """A method that names its steps (``Method.steps``) has them worded on the page's generic tab, as PlugIR's are
    in the Chat tab and over MCP; without a table each step is ``<node>: done`` (above)."""
    from dataclasses import replace
    from functools import partial

    from pictrieve.agents.steps import Step
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.registry import get_method
    from pictrieve.graphs.sessions import MethodSessions
    from pictrieve.ui.jobs import Jobs
    from pictrieve.ui.methods import run_step

    method = replace(get_method("toy"), steps={"rank": Step("rank", "ranked the gallery",
                                                            found=lambda update: f"{len(update['hits'])} photos")})
    sessions = MethodSessions(method, method.build(gallery, checkpointer=memory_checkpointer()))
    job = Jobs().start("toy", lambda job: run_step(job, sessions, partial(sessions.start, {"query": "a red square"},
                                                                           {"k": 2})))
    assert job.finished.wait(60)
    view = job.view()
    assert not view["error"] and view["steps"] == ["ranked the gallery: 2 photos"]
