"""The generic tab: any registered method without a view of its own (a plugin, say), run from its description.

The page builds the tab from :meth:`~pictrieve.agents.method.Method.describe`: a text box per text field
of the method's input (its ``text_input`` first and required) and a box per run setting (empty: the
default). A run is a job (:mod:`pictrieve.ui.jobs`) that lists each graph step as it finishes and ends
with the method's ``hits`` (shown as the grid every tab uses) and its other plain output values (shown
as text, never markup). A method that pauses for a person (``interrupt()``) stops with one line saying
the page cannot answer it: that needs a view of its own.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from pictrieve.agents.settings import MAX_TEXT, SettingsError, parse_setting
from pictrieve.agents.steps import step_line
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import available_methods, get_method, method_origin
from pictrieve.ui.forms import UIError, form_or_json
from pictrieve.ui.jobs import Job
from pictrieve.ui.state import PageState, page_state
from pictrieve.ui.visualize import PAGE_METHODS
from pictrieve.vectorstore.hits import as_hit



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
    return inputs, context


def run_method(job: Job, method: Any, graph: Any, inputs: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Run ``graph`` to its end as the job, one step line per finished node (worded by the method's step table,
    :attr:`~pictrieve.agents.method.Method.steps`; ``<node>: done`` without one); the page's result:
    ``hits`` (JSON) and ``output`` (the other output values that are plain text, numbers or lists of them)."""
    outputs = {f["name"] for f in method.output_fields()}
    steps = method.step_table()
    state: dict[str, Any] = {}
    config = {"configurable": {"thread_id": job.id}}
    for update in job.stream(graph, inputs, config, context=context):
        for node, change in update.items():
            if node == "__interrupt__":
                raise MethodRunError(f"{method.name} paused for an answer, which this page cannot give yet; "
                                     "run it from Python or the command line")
            if isinstance(change, dict):
                state.update({key: value for key, value in change.items() if key in outputs})
            job.step(step_line(steps, node, change, detail=True))
    hits = [as_hit(hit).to_json() for hit in state.get("hits") or []]
    shown = {key: value for key, value in state.items() if key != "hits" and _plain(value)}
    return {"hits": hits, "output": shown}


def _plain(value: Any) -> bool:
    """Text, a number, or a list/dict of them (JSON without objects): what the tab shows as text."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (str, int, float, bool)) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items())
    return False


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


def method_run_now(page: PageState, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Start a generic tab's run (a method without a view of its own) as a job."""
    if name not in available_methods() or name in PAGE_TABS:
        raise UIError(f"no generic tab for {name!r}"
                             + (f"; it has its own: {PAGE_TABS[name]}" if name in PAGE_TABS else ""))
    method = get_method(name)
    inputs, context = prepare_run(method, body)
    page.missing_need(method)  # said at once, not by the job

    def work(job: Any) -> dict[str, Any]:
        from pictrieve.graphs.checkpoints import memory_checkpointer

        job.step(f"building {name}…")
        pauses = "checkpointer" in method.needs
        built = page.graph(name, **({"checkpointer": memory_checkpointer()} if pauses else {}))
        return run_method(job, method, built, inputs, context)

    return page.jobs.start(name, work).view()
