"""``pictrieve search QUERY --method NAME``: run any registered method whose input takes a text query.

The method comes from the registry (:mod:`pictrieve.graphs.registry`): built-ins and installed plugins
alike, none named here. What the command gives it:

- its **needs**, from one option per need of the need registry (:mod:`pictrieve.cli.need_options`: each
  need's :attr:`~pictrieve.agents.needs.Need.cli_option`, e.g. ``--llm`` with ``--base-url``, ``--visualizer``
  repeatable, ``--qc2-model``) and ``--need NAME=VALUE`` for a need a method declares itself, each made by
  the need's resolver (:func:`~pictrieve.agents.needs.resolve_needs`); a checkpointer always, so a method that
  asks the person something (``interrupt()``) is answered at the terminal: it runs as a session of the runner every
  front end uses (:class:`~pictrieve.graphs.sessions.MethodSessions`), and each question is shown and its reply read
  from what the method declares it asks (:attr:`~pictrieve.agents.method.Method.asks`, :func:`ask_at_terminal`);
- its **input**: ``{"query": QUERY}``, plus ``topic`` from ``--topic`` when its input has one;
- its **run settings**: ``-k`` as ``k``, ``--set KEY=VALUE`` for any setting (typed by the method's
  settings class), and shortcuts for settings several methods share (``--guides``, ``--rank-with``,
  ``--tiles``, ``--feedback``), each refused for a method without that setting.

Plain search (the default) is the command's own: it searches the gallery directly, by text or ``--image``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import click

from pictrieve.cli.need_options import given_needs, need_option_list, own_need_option
from pictrieve.vectorstore.hits import ImageHit

PLAIN = "search"
"""The default method: plain search, run on the gallery directly (no graph), by text or --image."""

SETTING_SHORTCUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "guides": ("--guides", ("guides",)),
    "rank_with": ("--rank-with", ("embedders",)),
    "tiles": ("--tiles/--no-tiles", ("tiles",)),
    "feedback": ("--feedback", ("feedback",)),
}
"""Options that set a run setting: option -> (its flag, the setting names it may go to, first present)."""


class MethodChoice(click.ParamType):
    """A registered method (looked up when used, not at import); :func:`check_takes_query` checks that its
    input takes a text ``query`` once the command shows its steps."""

    name = "NAME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from pictrieve.graphs.registry import UnknownMethodError, get_method

        if value == PLAIN:
            return value
        try:
            get_method(str(value))
        except UnknownMethodError:
            self.fail(f"{value!r} is not a registered method; choose from {', '.join(query_methods())} "
                      "(`pictrieve methods` lists them)", param, ctx)
        # Whether it takes a text query is checked when it runs (check_takes_query): reading its input
        # imports its graph (LangGraph: seconds), which would pass silently before the first step line.
        return str(value)


class MethodOption(click.Option):
    """``--method``, whose help lists the registered methods that take a query when it is shown."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = ("Retrieval method: plain search (default), or any registered method whose input takes a "
                     f"text query: {', '.join(query_methods())}. `pictrieve methods` lists what each needs "
                     "and its settings.")
        return super().get_help_record(ctx)


def check_takes_query(spec: Any) -> None:
    """A usage error (one line) unless the method's input takes a text ``query``."""
    if not spec.takes("query"):
        raise click.UsageError(f"--method {spec.name} takes no text query (its input: {_input_names(spec)}); "
                               f"choose from {', '.join(query_methods())}")


def query_methods() -> list[str]:
    """Registered methods whose input has a ``query`` field (what ``--method`` accepts)."""
    from pictrieve.graphs.registry import methods

    return [method.name for method in methods() if method.takes("query")]


def method_options(function: Any) -> Any:
    """The options ``pictrieve search`` gains for methods other than plain search."""
    from pictrieve.agents.needs import NEEDS

    options = [
        click.option("--method", "method", cls=MethodOption, type=MethodChoice(), default=PLAIN, show_default=True),
        *need_option_list(NEEDS.values()),
        own_need_option,
        click.option("--rank-with", "rank_with", multiple=True, metavar="EMBEDDER",
                     help="Setting `embedders` (needle): embedders to rank with (repeatable; default: all the gallery holds)."),
        click.option("--guides", type=click.IntRange(min=1), default=None,
                     help="Setting `guides` (visret, needle): guide images per visualizer (visret default 3, "
                          "needle default 2)."),
        click.option("--tiles/--no-tiles", "tiles", default=None,
                     help="Setting `tiles` (needle): rank by tiles (default: when `pictrieve tile` made them)."),
        click.option("--feedback", type=click.Choice(["off", "guides", "results", "both"]), default=None,
                     help="Setting `feedback` (needle; default off): review the guide images before the search and/or "
                          "mark irrelevant results after it (teaches the embedders' trust weights, stored in the gallery)."),
        click.option("--topic", default=None, help="Input `topic` (needle): topic whose trust weights to use and teach."),
        click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
                     help="Any run setting of the method (repeatable), e.g. --set candidate_k=80; "
                          "`pictrieve methods NAME` lists them with their types and defaults."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def run_method(store: Any, method: str, query: str | None, *, k: int, rank_with: tuple[str, ...] = (),
               guides: int | None = None, tiles: bool | None = None, feedback: str | None = None,
               topic: str | None = None, settings: tuple[str, ...] = (), own_needs: tuple[str, ...] = (),
               **needs: Any) -> list[ImageHit]:
    """Hits of the registered method ``method`` for a text ``query`` over the opened gallery ``store``; ``needs``
    are the need options' values by need name (``llm="openai:m"``, ``base_url=...``, ``visualizers=(...)``)."""
    return run_method_showing_guides(store, method, query, k=k, rank_with=rank_with, guides=guides, tiles=tiles,
                                     feedback=feedback, topic=topic, settings=settings, own_needs=own_needs,
                                     **needs)[0]


def run_method_showing_guides(store: Any, method: str, query: str | None, *, k: int,
                              rank_with: tuple[str, ...] = (), guides: int | None = None,
                              tiles: bool | None = None, feedback: str | None = None, topic: str | None = None,
                              settings: tuple[str, ...] = (), clock: StepClock | None = None,
                              own_needs: tuple[str, ...] = (), **needs: Any,
                              ) -> tuple[list[ImageHit], list[dict[str, Any]]]:
    """:func:`run_method`'s hits and the guide pictures the method made (VisRet, NEEDLE; ``[]`` for the
    others): each as its state holds it (``id``, ``path``, ``visualizer``, ``generated``, ``status``), so a
    person sees what the search was guided by. Step lines go to stderr timed by ``clock`` (the command's,
    so the first line can come before the gallery opens), and so does each model loaded meanwhile
    ("  loading the MiniLM sentence encoder ...")."""
    if not query:
        raise click.UsageError(f"--method {method} searches with a text QUERY (not --image)")
    clock = clock or StepClock()
    with clock.announcing_model_loads():
        return _run_method(store, method, query, clock, k=k, rank_with=rank_with, guides=guides, tiles=tiles,
                           feedback=feedback, topic=topic, settings=settings, needs=given_needs(needs, own_needs))


def _run_method(store: Any, method: str, query: str, clock: "StepClock", *, k: int, rank_with: tuple[str, ...],
                guides: int | None, tiles: bool | None, feedback: str | None, topic: str | None,
                settings: tuple[str, ...], needs: dict[str, Any]) -> tuple[list[ImageHit], list[dict[str, Any]]]:
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.registry import get_method
    from pictrieve.graphs.sessions import MethodSessions

    clock.say(f"loading {method} ...")  # importing its graph and making its visualizers take seconds
    spec = get_method(method)
    check_takes_query(spec)
    # settings first: a bad one (or one whose extra is missing) is one line before any need makes a model
    context = _context(spec, k, settings, {"guides": guides, "rank_with": list(rank_with) or None,
                                            "tiles": tiles, "feedback": feedback})
    kwargs = _needs(spec, needs, store)
    inputs: dict[str, Any] = {"query": query}
    if topic:
        if not spec.takes("topic"):
            raise click.UsageError(f"--topic does not apply to --method {method} (its input: {_input_names(spec)})")
        inputs["topic"] = topic
    sessions = MethodSessions(spec, spec.build(store, checkpointer=memory_checkpointer(), **kwargs))
    stream = terminal_stream(clock)
    run = sessions.start(inputs, context, stream=stream)
    while run.pending is not None:
        reply = ask_at_terminal(run.pending)
        run = sessions.reply(run.session, reply, stream=stream)
    result = run.values
    if result.get("weights"):
        click.echo("trust weights: " + json.dumps({n: round(w, 3) for n, w in result["weights"].items()}), err=True)
    return run.hits, [dict(guide) for guide in result.get("guides") or []]


class StepClock:
    """Step lines on stderr, ``[  12.3s] what ...``, timed from one start (the command's, by default now)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def say(self, text: str) -> None:
        click.echo(f"[{time.perf_counter() - self.start:6.1f}s] {text}", err=True)

    def announcing_model_loads(self) -> Any:
        """A context in which each labelled model that starts loading is a line ("  loading ... ...")."""
        from pictrieve.tools.core.model_cache import announcing_model_loads

        return announcing_model_loads(lambda label: self.say(f"  loading {label} ..."))


def terminal_stream(clock: StepClock | None = None) -> Any:
    """How the command line streams a graph for :class:`~pictrieve.graphs.sessions.MethodSessions`: each step is a
    line on stderr as it starts, with the seconds since ``clock`` started (default: now), so a step that loads a
    model or encodes a folder for a while says so instead of leaving the terminal silent; each finished step is
    yielded as a LangGraph ``updates`` chunk."""
    clock = clock or StepClock()

    def stream(graph: Any, inputs: Any, config: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        shown = ""
        for event in graph.stream(inputs, config, stream_mode="tasks", **kwargs):
            name = event.get("name", "")
            if "result" in event:
                result = event["result"]
                yield {name: dict(result) if isinstance(result, (list, dict)) else result}
                continue
            if "error" in event or name == shown:  # a failure (raised by the stream), or parallel copies of one step
                continue
            clock.say(f"{name}...")
            shown = name

    return stream


def _needs(spec: Any, given: dict[str, Any], store: Any) -> dict[str, Any]:
    """The builder arguments for the method's needs, made by the need registry from what was given; an option
    the method has no need for is refused, and so is a required need nobody gave (one line each)."""
    from pictrieve.agents.needs import NEEDS, MissingNeedError, missing_needs, resolve_needs

    specs = spec.need_specs()
    option_of = {need.name: need.cli_option or f"--need {need.name}=..." for need in (*NEEDS.values(), *specs)}
    option_of.update({n.endpoint.key: n.endpoint.cli_option for n in NEEDS.values() if n.endpoint is not None})
    for need in specs:
        if need.endpoint is not None and given.get(need.endpoint.key) and not given.get(need.name):
            raise click.UsageError(f"{need.endpoint.cli_option} needs {need.cli_option} {need.example or 'NAME'}")
    takes = {need.name for need in specs} | {need.endpoint.key for need in specs if need.endpoint is not None}
    for key in given:
        if key not in takes:
            needs = ", ".join(need.name for need in specs if not need.brought_by_caller) or "none"
            raise click.UsageError(f"{option_of.get(key, key)} does not apply to --method {spec.name} "
                                   f"(its needs: {needs})")
    for need in missing_needs(spec, given):
        raise click.UsageError(f"--method {spec.name} needs {option_of[need.name]}, e.g. "
                               f"{option_of[need.name]} {need.example or 'VALUE'} ({need.description})")
    try:
        # The builders make what is not given (defaults=False); an endpoint is checked now, so a dead or
        # refusing one is one line before the guide pictures.
        return resolve_needs(spec, given, gallery=store, check=True, defaults=False)
    except MissingNeedError as exc:  # pragma: no cover - missing_needs said it first
        raise click.UsageError(str(exc)) from None


def _context(spec: Any, k: int, settings: tuple[str, ...], shortcuts: dict[str, Any]) -> dict[str, Any]:
    """The run settings: ``k``, the shortcut options given, then ``--set KEY=VALUE`` (checked by the
    method's settings class, so a bad value is one line naming the setting)."""
    from pictrieve.agents.settings import SettingsError, parse_setting

    cls = spec.settings_class()
    names = cls.names()
    context: dict[str, Any] = {"k": k} if "k" in names else {}
    for option, value in shortcuts.items():
        if value is None:
            continue
        flag, candidates = SETTING_SHORTCUTS[option]
        target = next((c for c in candidates if c in names), None)
        if target is None:
            raise click.UsageError(f"{flag} does not apply to --method {spec.name} (its settings: {', '.join(names)})")
        context[target] = value
    for item in settings:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--set takes KEY=VALUE, got {item!r}")
        try:
            context[key.strip()] = parse_setting(cls, key.strip(), text)
        except SettingsError as exc:
            raise click.UsageError(f"--set {item}: {exc}") from None
    cls.coerce(context)  # validated now, before a model loads
    return context


def _input_names(spec: Any) -> str:
    return ", ".join(f["name"] for f in spec.input_fields())


def ask_at_terminal(pending: Any) -> dict[str, Any]:
    """Put a method's question (a :class:`~pictrieve.graphs.sessions.Pending`) to the person at the terminal and read
    the reply its method declares, field by field: the items shown with it numbered; a list of ids as numbers or ids
    (Enter for none); a choice among its choices; yes or no; a line of text (its options offered). The runner
    checks the reply against the declaration again before the method reads it."""
    click.echo(pending.question, err=True)
    shown = pending.shown()
    for number, item in enumerate(shown, 1):
        about = (item.get("captions") or [""])[0] or item.get("path") or ""
        extra = ", ".join(f"{key} {value}" for key, value in item.items()
                          if key in ("visualizer", "generated", "status") and value not in (None, ""))
        click.echo(f"  {number:3d}  {item['id']}  {about}{f'  ({extra})' if extra else ''}".rstrip(), err=True)
    reply: dict[str, Any] = {}
    first_text = True
    for field in pending.ask.reply_fields():
        label = field["description"] or field["name"]
        if field["picks"]:
            reply[field["name"]] = _read_picks(f"{label} (numbers or ids separated by spaces, Enter for none)", shown)
        elif field.get("choices"):
            choices = [str(choice) for choice in field["choices"]]
            reply[field["name"]] = click.prompt(label, type=click.Choice(choices), err=True)
        elif field["type"] == "bool":
            reply[field["name"]] = click.confirm(label, default=False, err=True)
        elif field["type"] == "str" and (field["required"] or first_text):
            options = f" ({' / '.join(pending.options)})" if pending.options and first_text else ""
            reply[field["name"]] = click.prompt(f"{label}{options}", err=True)
            first_text = False
    return reply


def _read_picks(prompt: str, shown: list[dict[str, Any]]) -> list[str]:
    """Ids among ``shown`` typed as their numbers or their ids; asked again until each is one of them."""
    by_number = {str(number): item["id"] for number, item in enumerate(shown, 1)}
    ids = {item["id"] for item in shown}
    while True:
        answer = click.prompt(prompt, default="", show_default=False, err=True)
        chosen = answer.replace(",", " ").split()
        unknown = [c for c in chosen if c not in by_number and c not in ids]
        if not unknown:
            return [by_number.get(c, c) for c in chosen]
        click.echo(f"unknown: {' '.join(unknown)}; choose from 1-{len(shown)} or their ids", err=True)
