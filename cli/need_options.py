"""The command-line options that give a method its needs, made from the :class:`~pictrieve.agents.needs.Need`
objects alone: nothing here (nor in a command using it) declares or names a need.

Each need with a :attr:`~pictrieve.agents.needs.Need.cli_option` is one option (``--llm``), its endpoint another
(``--base-url``), a :attr:`~pictrieve.agents.needs.Need.many` need's repeats; ``--need NAME=VALUE`` gives any need
by name, a plugin's own included. A command takes either

- every need of the house (:func:`need_options`: ``pictrieve search --method``, ``serve``, ``ui``, ``mcp``): its
  function gets what was given as one ``needs`` mapping by need (and endpoint) name, ready for
  :func:`~pictrieve.agents.needs.resolve_needs`; a server's options also read each need's environment variable;
- or the needs of the one method it runs (:func:`method_need_options`: ``chat`` is PlugIR's, ``ask`` the Vision
  Search Assistant's), each with its default shown, as keyword arguments of the need's name.

A new :class:`~pictrieve.agents.needs.Need` in :data:`~pictrieve.agents.needs.NEEDS` is an option of every such
command with no other edit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import click

OWN_NEEDS = "own_needs"
"""The parameter ``--need NAME=VALUE`` fills."""


class _Names(click.ParamType):
    """A repeated need's value: from its environment variable, names separated by commas (as ``--allow``
    takes them and the served graphs read it), so a folder with spaces stays one name."""

    name = "NAME"
    envvar_list_splitter = ","

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value.strip() if isinstance(value, str) else value


def _metavar(need: Any) -> str:
    example = need.example or ""
    return example if example.isupper() else "NAME"


def need_option_list(needs: Iterable[Any], *, defaults: bool = False, environ: bool = False,
                     required: Iterable[str] = (), say_default: bool = False) -> list[Callable[[Any], Any]]:
    """One click option per need that has one (and per endpoint), each named by the need: ``dest`` is the need's
    name (the endpoint's key). ``defaults``: the need's default is the option's, shown; else ``None`` (the
    builder's or the server's own; ``say_default``: the help says the need's default, which the server uses).
    ``environ``: the option reads the need's environment variable too (a server's operator sets it either way).
    ``required``: the needs the command cannot run without."""
    must = set(required)
    options = []
    for need in needs:
        if need.cli_option is None or need.brought_by_caller:
            continue
        example = f", e.g. {need.cli_option} {need.example}" if need.example else ""
        default = need.default if defaults else None
        said = f" (default: {need.default})" if say_default and not defaults and need.default is not None else ""
        options.append(click.option(
            need.cli_option, need.name, multiple=need.many, type=_Names() if need.many else None,
            default=default, show_default=default is not None,
            metavar=_metavar(need), required=need.name in must,
            envvar=need.env_var if environ else None, show_envvar=bool(environ and need.env_var),
            help=f"{need.description[:1].upper()}{need.description[1:]}{example}{said}"
                 f"{' (repeatable)' if need.many else ''}."))
        if need.endpoint is not None:
            options.append(click.option(
                need.endpoint.cli_option, need.endpoint.key, default=None, metavar="URL",
                envvar=need.endpoint.env_var if environ else None, show_envvar=environ,
                help=f"OpenAI-compatible endpoint for {need.cli_option} (a provider's model: vLLM, llama.cpp, "
                     "Ollama, ...)."))
    return options


def own_need_option(function: Any) -> Any:
    """``--need NAME=VALUE`` (repeatable): any need by name, a plugin's own included."""
    return click.option("--need", OWN_NEEDS, multiple=True, metavar="NAME=VALUE",
                        help="A need by name (repeatable), a plugin's own included; `pictrieve methods` lists "
                             "each method's needs.")(function)


def need_options(*, environ: bool = False) -> Callable[[Any], Any]:
    """Decorator: every need of :data:`~pictrieve.agents.needs.NEEDS` as an option, and ``--need NAME=VALUE``;
    the command's function gets ``needs``: what was given, by need and endpoint name (blanks left out, a
    repeated option as a list, ``--need`` checked by :func:`parse_needs`). ``environ``: for a server, each
    option also reads its need's environment variable."""
    from pictrieve.agents.needs import NEEDS

    options = need_option_list(NEEDS.values(), environ=environ, say_default=True)
    return _collecting(list(NEEDS.values()), options, own=True)


def method_need_options(method: Any, *, collect: bool = True, required_only: bool = False,
                        also_required: Iterable[str] = ()) -> Callable[[Any], Any]:
    """Decorator: the options of ``method``'s needs (a :class:`~pictrieve.agents.method.Method`), each with the
    need's default, a need it cannot run without required (``required_only``: those alone; ``also_required``:
    needs the command itself cannot run without, an evaluation's page search say). The function gets ``needs``
    (as :func:`need_options`), or with ``collect=False`` each value as a keyword argument of the need's name."""
    required = [need.name for need in method.need_specs()
                if (need.required and need.name not in method.optional) or need.name in set(also_required)]
    needs = [need for need in method.need_specs() if need.name in required or not required_only]
    options = need_option_list(needs, defaults=True, required=required)
    if collect:
        return _collecting(needs, options, own=False)

    def decorate(function: Any) -> Any:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def _collecting(needs: list[Any], options: list[Callable[[Any], Any]], *, own: bool) -> Callable[[Any], Any]:
    keys = [key for need in needs if need.cli_option and not need.brought_by_caller
            for key in (need.name, *((need.endpoint.key,) if need.endpoint else ()))]

    def decorate(function: Any) -> Any:
        @functools.wraps(function)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {key: kwargs.pop(key, None) for key in keys}
            kwargs["needs"] = given_needs(given, kwargs.pop(OWN_NEEDS, ()))
            return function(*args, **kwargs)

        for option in reversed([*options, *([own_need_option] if own else [])]):
            command = option(command)
        return command

    return decorate


def given_needs(options: dict[str, Any], own_needs: Iterable[str] = ()) -> dict[str, Any]:
    """What was given for needs: the need options' values by need (or endpoint) name, and ``--need NAME=VALUE``."""
    given = {key: (list(value) if isinstance(value, tuple) else value) for key, value in options.items()
             if value not in (None, "", ())}
    given.update(parse_needs(tuple(own_needs)))
    return given


def parse_needs(items: tuple[str, ...]) -> dict[str, str]:
    """``--need NAME=VALUE`` options as ``{name: value}``; a malformed one, or a name no registered method
    declares, is a usage error (one line)."""
    given: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise click.UsageError(f"--need takes NAME=VALUE, got {item!r}")
        given[key.strip()] = value.strip()
    if given:
        from pictrieve.agents.needs import all_needs
        from pictrieve.graphs.registry import methods

        known = {name for name, need in all_needs(methods()).items() if not need.brought_by_caller}
        unknown = [key for key in given if key not in known]
        if unknown:
            raise click.UsageError(f"--need {unknown[0]}: no registered method needs it; known needs: "
                                   f"{', '.join(sorted(known))}")
    return given


def check_needs(given: dict[str, Any], *, environ: Any = None, defaults: bool = True,
                methods: Iterable[Any] | None = None) -> None:
    """Refuse what an operator gave in one line before anything starts (each need's
    :attr:`~pictrieve.agents.needs.Need.check`: a misspelt name, a missing extra, a dead endpoint): the needs of
    ``methods`` (default: every registered method's)."""
    from pictrieve.agents.needs import all_needs, check_given

    if methods is None:
        from pictrieve.graphs.registry import methods as registered

        needs = list(all_needs(registered()).values())
    else:
        needs = list({need.name: need for method in methods for need in method.need_specs()}.values())
    check_given(needs, given, environ=environ, defaults=defaults)
