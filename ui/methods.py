"""The generic tab: any registered method without a view of its own (a plugin, say), run from its description.

The page builds the tab from :meth:`~pictrieve.agents.method.Method.describe`: a text box per text field
of the method's input (its ``text_input`` first and required) and a box per run setting (empty: the
default). A run is a session of the one runner every front end uses
(:class:`~pictrieve.graphs.sessions.MethodSessions`, its graph kept with an in-memory checkpointer), each step a
job (:mod:`pictrieve.ui.jobs`) that lists each graph step as it finishes and ends with the generic view
(:meth:`~pictrieve.graphs.sessions.MethodRun.to_json`): the method's ``hits`` (shown as the grid every tab uses),
its other plain output values (shown as text, never markup), and, when the method asks the person something
(``interrupt()``), the ``question`` as its method declares it (:attr:`~pictrieve.agents.method.Method.asks`): the
text, its choices, the items shown with it and the reply's fields, which the page turns into a form. The reply
(``POST /api/methods/{name}/reply``) is checked against the declared shape before the session is resumed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from pictrieve.agents.settings import MAX_TEXT, SettingsError, parse_setting
from pictrieve.agents.steps import step_line
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import available_methods, get_method, method_origin
from pictrieve.graphs.sessions import MethodRun, MethodSessions
from pictrieve.ui.forms import UIError, form_or_json
from pictrieve.ui.jobs import Job
from pictrieve.ui.state import PageState, page_state
from pictrieve.ui.visualize import PAGE_METHODS

SESSION_ID = re.compile(r"[0-9a-f]{32}\Z")


class MethodRunError(PictrieveError, ValueError):
    """A generic tab's request that cannot be run as given (shown on the page as one line)."""


def text_fields(method: Any) -> list[str]:
    """The input fields the tab offers: text ones, the method's ``text_input`` first."""
    described = method.describe()
    names = [f["name"] for f in described["input"] if f["type"] == "str"]
    first = described["text_input"]
    return [first, *[n for n in names if n != first]] if first else names


def prepare_run(method: Any, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(inputs, context)`` from the page's ``{"input": {...}, "settings": {...}}``, checked now.

    Only the method's text input fields are taken; its ``text_input`` must not be empty. Settings come
    as text (empty: the default) and are read by the settings class's field types, then validated.
    """
    given = body.get("input") or {}
    raw_settings = body.get("settings") or {}
    if not isinstance(given, dict) or not isinstance(raw_settings, dict):
        raise MethodRunError("expected input and settings as JSON objects")
    allowed = text_fields(method)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise MethodRunError(f"{method.name} takes no input {', '.join(unknown)}; it takes {', '.join(allowed)}")
    inputs = {name: str(given[name]).strip()[:MAX_TEXT] for name in allowed if str(given.get(name) or "").strip()}
    first = allowed[0] if allowed else None
    if first is None or first not in inputs:
        raise MethodRunError(f"type the {first or 'text'} to run {method.name} with")
    cls = method.settings_class()
    context: dict[str, Any] = {}
    for name, value in raw_settings.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        try:
            context[str(name)] = parse_setting(cls, str(name), value) if isinstance(value, str) else value
        except SettingsError as exc:
            raise MethodRunError(str(exc)) from exc
    cls.coerce(context)  # validated before the job starts: a bad value is one line at once
    from pictrieve.graphs.serving import ServingConfigError, check_served_settings

    try:  # and held to what a server gives one caller, as served runs are (a plugin's k may declare no bound)
        check_served_settings(context)
    except ServingConfigError as exc:
        raise MethodRunError(str(exc)) from None
    return inputs, context


def run_step(job: Job, sessions: MethodSessions, step: Callable[..., MethodRun]) -> dict[str, Any]:
    """Run one step of a session as the job (``step``: a :class:`~pictrieve.graphs.sessions.MethodSessions` call
    taking ``on_step`` and ``stream``), one step line per finished node (worded by the method's step table,
    :attr:`~pictrieve.agents.method.Method.steps`; ``<node>: done`` without one); the page's result is the
    generic view."""
    steps = sessions.method.step_table()
    run = step(on_step=lambda node, change: job.step(step_line(steps, node, change, detail=True)), stream=job.stream)
    if run.pending is not None:
        job.step(f"waiting for you: {run.pending.question}"[:300])
    return run.to_json()


# --- the generic tab's routes, and which tab shows each method ---------------------------------------------

PAGE_TABS: dict[str, str] = {"search": "search", "plugir": "chat", "qc2": "steer", "vsa": "ask",
                             **{name: "visualize" for name in PAGE_METHODS}}
"""Methods with a view of their own on the page (``static/index.html``); every other registered method
that takes a line of text gets a generic tab."""

router = APIRouter()


def method_views(page: PageState, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Registered methods (``names``: only those) described for the page, with their ``tab`` (``generic``: one
    made from the description; ``none``: no line of text to start it from, so not on the page). Each is described
    once (that reads its schemas' source) while the registry stays the same."""
    registered = available_methods()
    with page.lock:
        if page.described["methods"] != registered:
            page.described.update(methods=registered, views={})
        views = page.described["views"]
        for name in registered if names is None else names:
            if name not in views:
                view = get_method(name).describe()
                tab = PAGE_TABS.get(name) or ("generic" if view["text_input"] else "none")
                views[name] = {**view, "origin": method_origin(name), "tab": tab}
        return [views[name] for name in (registered if names is None else names)]


def generic_views(page: PageState) -> list[dict[str, Any]]:
    """The methods the page shows in generic tabs. Only methods without a view of their own are described here:
    the built-ins' schemas (and the graph modules that hold them) are not loaded for the page's frequent status
    requests."""
    others = [name for name in available_methods() if name not in PAGE_TABS]
    return [v for v in method_views(page, others) if v["tab"] == "generic"] if others else []


@router.get("/api/methods")
def methods_view(page: Annotated[PageState, Depends(page_state)]) -> list[dict[str, Any]]:
    return method_views(page)


@router.post("/api/methods/{name}/run")
async def method_run(name: str, request: Request, page: Annotated[PageState, Depends(page_state)]) -> dict[str, Any]:
    return await run_in_threadpool(method_run_now, page, name, await form_or_json(request))


def generic_method(name: str) -> Any:
    """The registered method ``name`` when it has a generic tab; one line otherwise."""
    if name not in available_methods() or name in PAGE_TABS:
        raise UIError(f"no generic tab for {name!r}"
                             + (f"; it has its own: {PAGE_TABS[name]}" if name in PAGE_TABS else ""))
    return get_method(name)


def method_run_now(page: PageState, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Start a generic tab's run (a method without a view of its own): a new session, its first step a job."""
    method = generic_method(name)
    inputs, context = prepare_run(method, body)
    page.missing_need(method)  # said at once, not by the job

    def work(job: Any) -> dict[str, Any]:
        job.step(f"building {name}…")
        sessions = page.method_sessions(name)
        return run_step(job, sessions, functools.partial(sessions.start, inputs, context))

    return page.jobs.start(name, work).view()


@router.post("/api/methods/{name}/reply")
async def method_reply(name: str, request: Request, page: Annotated[PageState, Depends(page_state)]) -> dict[str, Any]:
    return await run_in_threadpool(method_reply_now, page, name, await form_or_json(request))


def method_reply_now(page: PageState, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Answer the question a generic tab's session waits on (``{"session", "reply": {...}}``), or run on a session
    whose page went away between steps (``{"session", "continue": true}``), as a job. The reply is checked against
    what the method declares before the job starts: a bad one is one line at once."""
    method = generic_method(name)
    session = str(body.get("session") or "")
    if not SESSION_ID.match(session):
        raise UIError(f"no such {name} session; start a new run")
    sessions = page.method_sessions(method.name)
    if sessions.busy(session):
        raise UIError(f"this {name} session is still working on its last step; wait for it")
    if body.get("continue"):
        step = functools.partial(sessions.run_on, session)
    else:
        sessions.check_reply(session, body.get("reply"))
        step = functools.partial(sessions.reply, session, body.get("reply"))
    return page.jobs.start(name, lambda job: run_step(job, sessions, step)).view()
