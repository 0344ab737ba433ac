"""What a caller sends to `pictrieve serve` is bounded (issue 38, Why 4 and 5): text as on the page, every run
setting with an upper bound on every run (a resume too), bodies on every route inside one cap.

The server tests run the real `pictrieve serve`; the graph-level ones build the served graph's guard in
process (the same code the server runs), with a graph that pauses so a resume can be sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, TypedDict

import httpx
import pytest
from pydantic import Field

from helpers.serve import sdk_client, served_gallery, wait_for_warm_up

TEN_MIB = 10 * 2**20


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_clip_name):
    with served_gallery(tmp_path_factory.mktemp("serve-bounds"), tiny_clip_name) as server:
        yield server


def _server_rss(process) -> int:
    """Resident memory of `pictrieve serve` and everything it started (langgraph dev is a child)."""
    import psutil

    parent = psutil.Process(process.pid)
    total = 0
    for proc in [parent, *parent.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


@pytest.mark.server
def test_a_10_mib_query_is_refused_at_once_and_the_server_keeps_its_memory(served):
    """Why 4: a 10 MiB query ran 17 s and took 1.2 GB. Now it is refused before a run is stored: three in a row,
    each answered well inside a generous bound, the server's memory within 150 MiB of where it was."""
    from pictrieve.agents.settings import MAX_TEXT

    wait_for_warm_up(served["root"])  # the models it loads in the background are not the queries' memory
    with httpx.Client(base_url=served["url"], timeout=120, trust_env=False) as http:
        http.post("/runs/wait", json={"assistant_id": "search", "input": {"query": "a"}, "context": {"k": 1}})
        before = _server_rss(served["process"])
        for _ in range(3):
            started = time.monotonic()
            answer = http.post("/runs/wait", json={"assistant_id": "search", "input": {"query": "a" * TEN_MIB}})
            assert answer.status_code == 413, answer.text[:300]
            assert f"longer than {MAX_TEXT} characters" in answer.json()["detail"]
            assert time.monotonic() - started < 30  # generous: the refusal reads the body and nothing else
        after = _server_rss(served["process"])
        assert after - before < 150 * 2**20, (before, after)
        small = http.post("/runs/wait", json={"assistant_id": "search", "input": {"query": "a"}, "context": {"k": 1}})
        assert small.status_code == 200 and len(small.json()["hits"]) == 1


@pytest.mark.server
@pytest.mark.parametrize("where", ["input.query", "input.description", "input.question", "resume", "context"])
def test_text_past_the_pages_bound_is_refused_wherever_a_run_carries_it(served, where):
    from pictrieve.agents.settings import MAX_TEXT

    long = "b" * (MAX_TEXT + 1)
    run = {"assistant_id": "search"}
    if where.startswith("input."):
        run["input"] = {where.split(".")[1]: long}
    elif where == "resume":
        run["command"] = {"resume": {"answer": long}}
    else:
        run["input"], run["context"] = {"query": "a"}, {"prompt_prefix": long}
    thread = sdk_client(served["url"]).threads.create()["thread_id"]
    with httpx.Client(base_url=served["url"], timeout=120, trust_env=False) as http:
        answer = http.post(f"/threads/{thread}/runs", json=run)
    assert answer.status_code == 413 and f"longer than {MAX_TEXT}" in answer.json()["detail"], answer.text[:300]


@pytest.mark.server
def test_text_at_the_bound_is_searched(served):
    from pictrieve.agents.settings import MAX_TEXT

    result = sdk_client(served["url"]).runs.wait(None, "search", input={"query": "a" * MAX_TEXT}, context={"k": 1})
    assert len(result["hits"]) == 1


@pytest.mark.server
def test_the_store_routes_are_inside_the_body_cap(served):
    """Why 6: ``PUT /store/items`` took 4 x 50 MB past the 64 MiB guard, each kept for the server's life. The store
    (like every route that starts no run) now takes at most 1 MiB a body: one byte more is refused."""
    from pictrieve.graphs.serving_http import MAX_OTHER_BODY_BYTES

    head, tail = b'{"namespace": ["a"], "key": "k", "value": {"v": "', b'"}}'
    body = head + b"x" * (MAX_OTHER_BODY_BYTES + 1 - len(head) - len(tail)) + tail
    with httpx.Client(base_url=served["url"], timeout=300, trust_env=False) as http:
        answer = http.put("/store/items", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 413 and "too large" in answer.text, answer.text[:300]
        fifty = http.post("/threads", json={"metadata": {"m": "x" * (50 * 2**20)}})
        assert fifty.status_code == 413, fifty.text[:300]
        small = http.put("/store/items", json={"namespace": ["a"], "key": "k", "value": {"v": "small"}})
        assert small.status_code in (200, 204), small.text[:300]


# --- in process: the served graph's own checks -----------------------------------------------------------


@pytest.mark.parametrize("key", ["query", "description", "question", "topic", "prompt"])
def test_the_served_input_step_refuses_long_text(key):
    """The graph's own first step (a Python caller of served_graph has no HTTP guard in front of it)."""
    from pictrieve.agents.settings import MAX_TEXT
    from pictrieve.graphs.serving import ServingConfigError, check_run_input

    assert check_run_input({key: "q" * MAX_TEXT}, None, None) == {}
    with pytest.raises(ServingConfigError, match=f"input.{key} is longer than {MAX_TEXT} characters"):
        check_run_input({key: "q" * (MAX_TEXT + 1)}, None, None)


def _pausing_graph():
    """A served graph (the guard of graphs/serving.py around it) that pauses once for an answer."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from pictrieve.agents.settings import RunSettings
    from pictrieve.graphs.serving import _guard_input

    @dataclass
    class Settings(RunSettings):
        shown_k: Annotated[int, Field(description="images shown")] = 10

    class State(TypedDict, total=False):
        query: str
        answer: str

    def ask(state: State) -> dict:
        return {"answer": interrupt("which?")}

    builder = StateGraph(State, context_schema=Settings)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    graph = _guard_input(builder.compile(), None)
    return graph.builder.compile(checkpointer=InMemorySaver())


def test_a_setting_refused_on_a_fresh_run_is_refused_on_a_resume():
    """Why 5: ``shown_k: 5000`` was refused fresh and taken on a resume (the input step runs only at the start).
    The served graph's settings are checked whenever LangGraph builds a run's context, a resume included."""
    from langgraph.types import Command

    from pictrieve.graphs.serving import MAX_CANDIDATES, ServingConfigError

    graph = _pausing_graph()
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(ServingConfigError, match=f"shown_k must be at most {MAX_CANDIDATES}"):
        graph.invoke({"query": "a"}, {"configurable": {"thread_id": "fresh"}}, context={"shown_k": 5000})
    graph.invoke({"query": "a"}, config, context={"shown_k": 5})
    assert graph.get_state(config).next == ("ask",)
    with pytest.raises(ServingConfigError, match=f"shown_k must be at most {MAX_CANDIDATES}"):
        graph.invoke(Command(resume="the red one"), config, context={"shown_k": 5000})
    assert graph.get_state(config).next == ("ask",)  # still paused: the refused resume changed nothing
    graph.invoke(Command(resume="the red one"), config, context={"shown_k": 5})
    assert graph.get_state(config).values["answer"] == "the red one"


# Settings that cost nothing per unit, or whose bound is the server's (``k``: MAX_K on every front end).
UNBOUNDED_BY_DESIGN = {"seed", "k"}


def test_every_count_a_method_takes_has_an_upper_bound():
    """Why 5: ``filter_attempts: 1000``, ``questions_per_round: 200`` and ``reformulation_max_tokens: 100000`` kept a
    PlugIR run going for minutes. Every whole-number setting of every built-in method declares its bound
    (``Field(le=...)``), checked whenever the settings are made: a new count without one fails here."""
    import types
    import typing

    from pictrieve.agents.settings import _field_bounds, _type_hints
    from pictrieve.graphs.registry import builtin_methods, get_method

    for method in builtin_methods():
        cls = get_method(method).settings_class()
        bounds = _field_bounds(cls)
        for name, hint in _type_hints(cls).items():
            whole = hint is int or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                                    and int in typing.get_args(hint))
            if whole and name not in UNBOUNDED_BY_DESIGN:
                assert any(kind in ("le", "lt") for kind, _ in bounds.get(name, [])), f"{method}.{name} has no bound"


@pytest.mark.parametrize("setting,value", [("filter_attempts", 1000), ("questions_per_round", 200),
                                           ("reformulation_max_tokens", 100_000), ("max_rounds", 10_000)])
def test_plugirs_costly_settings_are_refused_past_their_bound(setting, value):
    from pictrieve.agents.plugir.settings import PlugIRSettings
    from pictrieve.agents.settings import SettingsError

    with pytest.raises(SettingsError, match=f"{setting} must be at most"):
        PlugIRSettings.coerce({setting: value})


@pytest.mark.server
def test_a_served_plugir_run_with_why_5s_settings_is_refused_before_it_starts(served):
    client = sdk_client(served["url"])
    thread = client.threads.create()["thread_id"]
    run = client.runs.create(thread, "plugir", input={"description": "a red square"},
                             context={"filter_attempts": 1000, "questions_per_round": 200,
                                      "reformulation_max_tokens": 100000})
    error = client.runs.join(thread, run["run_id"])["__error__"]
    assert "must be at most" in error["message"] and "\n" not in error["message"], error
