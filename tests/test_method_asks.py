"""A plugin method that asks the person a question works on the page, over MCP and in the command line with no
edit of any of them (issue 39, item 4: pausing in the method contract). MCP's side, with a real client:
test_mcp_method_asks.py.

The toy (tests/data/toy_asking_method, installed the way pip would, as the sixth-method plugin of
test_method_plugins.py is) ranks by the gallery's text search, then pauses with ``interrupt()`` to ask the order
and which photos to drop; it declares that question and its reply (``Method.asks``) and nothing else. Each front
end shows the question and reads the reply from that declaration alone, through the one session runner
(:class:`pictrieve.graphs.sessions.MethodSessions`), and each run is checked against the gallery's own ranking.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.method_plugins import asking_toy_gallery, install_asking_toy, installed_in_process, plugin_env
from helpers.web_page import browser  # noqa: F401  (the headless Chromium fixture)

QUERY = "a red square"


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    return install_asking_toy(tmp_path_factory.mktemp("asking-plugins"))


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name):
    return asking_toy_gallery(tmp_path_factory.mktemp("asking-gallery"), tiny_clip_name)


def expected(gallery, drop_first: bool = True) -> list[str]:
    """The toy's answer to 'worst first', dropping the best photo: the gallery's own ranking, reversed."""
    ranked = [hit.id for hit in gallery.search_text(QUERY, k=3)]
    return (ranked[1:] if drop_first else ranked)[::-1]


def test_the_runner_reads_the_question_and_checks_the_reply_as_declared(plugins, gallery):
    from pictrieve.agents.asks import ReplyError
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.registry import get_method
    from pictrieve.graphs.sessions import MethodSessions, SessionError

    with installed_in_process(plugins):
        method = get_method("toy_ask")
        described = method.describe()
        assert described["pauses"] and [f["name"] for f in described["asks"][0]["reply"]] == ["order", "drop"]
        sessions = MethodSessions(method, method.build(gallery, checkpointer=memory_checkpointer()))
        run = sessions.start({"query": QUERY}, {"k": 3})
        assert not run.done and run.pending.options == ["best first", "worst first"]
        shown = [item["id"] for item in run.pending.shown()]
        assert shown == [hit.id for hit in gallery.search_text(QUERY, k=3)]
        for bad, says in [({"order": "sideways", "drop": []}, "order: Input should be"),
                          ({"order": "best first"}, "the reply needs drop"),
                          ({"order": "best first", "drop": ["not-shown"]}, "unknown id(s) not-shown"),
                          ({"order": "best first", "drop": [], "extra": 1}, "takes no extra"),
                          ({"order": "best first", "drop": ["x" * 2001]}, "at most 2000 characters"),
                          ({"order": "best first", "drop": [shown[0]] * 101}, "at most 100 items"),
                          ("worst first", "reply with a JSON object")]:
            with pytest.raises(ReplyError, match=says.replace("(", r"\(").replace(")", r"\)")):
                sessions.reply(run.session, bad)
        done = sessions.reply(run.session, {"order": "worst first", "drop": [shown[0]]})
        assert done.done and [hit.id for hit in done.hits] == expected(gallery)
        assert done.to_json()["output"] == {"note": "asked once: worst first, 1 dropped"}
        # an ended session's thread is not kept, but a reply to it is told it has ended (an unknown one: no such)
        assert not sessions.graph.get_state({"configurable": {"thread_id": run.session}}).values
        with pytest.raises(SessionError, match="this toy_ask session has ended"):
            sessions.reply(run.session, {"order": "best first", "drop": []})
        with pytest.raises(SessionError, match="no such toy_ask session"):
            sessions.reply("0" * 32, {"order": "best first", "drop": []})


# --- the page: its generic tab, through the page's HTTP API -----------------------------------------------------

@pytest.fixture(scope="module")
def asking_app(plugins, gallery, tmp_path_factory):
    pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
    from pictrieve.ui.app import create_app

    with installed_in_process(plugins):
        yield create_app(gallery, state_dir=tmp_path_factory.mktemp("ui-state"))


def test_the_page_asks_the_plugins_question_and_takes_the_reply(asking_app, gallery):
    from helpers.web_page import finished, page_client

    client = page_client(asking_app, raise_server_exceptions=False)
    assert "toy_ask" in [m["name"] for m in client.get("/api/status").json()["generic"]]
    huge = client.post("/api/methods/toy_ask/run", json={"input": {"query": QUERY}, "settings": {"k": "1000000000"}})
    assert huge.status_code >= 400 and "k must be a whole number from 1 to 100" in huge.text, huge.text  # no own bound
    started = client.post("/api/methods/toy_ask/run", json={"input": {"query": QUERY}, "settings": {"k": "3"}}).json()
    view = finished(client, started)
    assert not view["error"], view["error"]
    result = view["result"]
    assert not result["done"] and result["question"]["options"] == ["best first", "worst first"]
    assert view["steps"][-1].startswith("waiting for you: In which order")
    reply_fields = {f["name"]: f for f in result["question"]["reply"]}
    assert reply_fields["drop"]["picks"] and reply_fields["order"]["choices"] == ["best first", "worst first"]
    shown = [item["id"] for item in result["question"]["shown"]]
    url = "/api/methods/toy_ask/reply"
    bad = client.post(url, json={"session": result["session"], "reply": {"order": "sideways", "drop": []}})
    assert bad.status_code == 400 and "order: Input should be" in bad.json()["error"]
    unknown = client.post(url, json={"session": "0" * 32, "reply": {"order": "best first", "drop": []}})
    assert unknown.status_code == 400 and "no such toy_ask session" in unknown.json()["error"]
    answered = finished(client, client.post(url, json={"session": result["session"],
                                                       "reply": {"order": "worst first", "drop": [shown[0]]}}).json())
    assert not answered["error"], answered["error"]
    assert answered["result"]["done"] and answered["result"]["question"] is None
    assert [hit["id"] for hit in answered["result"]["hits"]] == expected(gallery)
    assert answered["result"]["output"] == {"note": "asked once: worst first, 1 dropped"}


@pytest.mark.browser
def test_the_page_shows_the_question_in_the_generic_tab_and_sends_the_reply(asking_app, gallery, browser):  # noqa: F811
    from helpers.web_page import serve

    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    try:
        with serve(asking_app) as url:
            page.goto(url)
            page.click("#tabs button[data-tab=m-toy_ask]")
            page.fill("#m-toy_ask-in-query", QUERY)
            page.click("#m-toy_ask-settings summary")
            page.fill("#m-toy_ask-set-k", "3")
            page.click("#m-toy_ask-form button[type=submit]")
            page.wait_for_selector("#m-toy_ask-question:not([hidden]) .card")
            assert page.text_content("#m-toy_ask-question .asked").startswith("In which order should the photos")
            shown = page.eval_on_selector_all("#m-toy_ask-question .card", "cards => cards.map(c => c.dataset.id)")
            assert shown == [hit.id for hit in gallery.search_text(QUERY, k=3)]
            page.select_option("#m-toy_ask-reply-order", "worst first")
            page.check(f"#m-toy_ask-question .card[data-id='{shown[0]}'] input.m-toy_ask-pick-drop")
            page.click("#m-toy_ask-question button[type=submit]")
            page.wait_for_function("() => document.querySelectorAll('#m-toy_ask-grid .card').length === 2")
            assert page.eval_on_selector_all("#m-toy_ask-grid .card", "cards => cards.map(c => c.dataset.id)") == \
                expected(gallery)
            assert page.is_hidden("#m-toy_ask-question")
            assert page.text_content("#m-toy_ask-output") == "note: asked once: worst first, 1 dropped"
    finally:
        context.close()


# --- the command line -------------------------------------------------------------------------------------------

def test_the_command_line_asks_at_the_terminal(plugins, gallery):
    done = subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "search", QUERY, "-g", str(gallery.location),
                           "--method", "toy_ask", "-k", "3", "--json"], input="sideways\nworst first\n9 1\n1\n",
                          capture_output=True, text=True, timeout=600, env=plugin_env(plugins))
    assert done.returncode == 0, done.stderr
    assert "In which order should the photos for 'a red square' come" in done.stderr
    assert "unknown: 9" in done.stderr  # a number of no photo shown is asked again
    assert [hit["id"] for hit in json.loads(done.stdout)["hits"]] == expected(gallery)
