"""``pictrieve methods [NAME] [--json]``: the registered methods, what each takes, needs and can be set to."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import click

WIDTH = 100
COLUMN = 36


@click.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def methods(names: tuple[str, ...], as_json: bool) -> None:
    """List the registered retrieval methods: built-in ones and installed plugins.

    For each: what it does, its input, what it needs besides the gallery, and its run settings with
    their types and defaults (pass them per run as LangGraph context; on the command line with
    `pictrieve search --method NAME --set KEY=VALUE`). NAME shows only those methods. A plugin that
    fails to load is reported on stderr and left out; with --json it is listed under "skipped".
    """
    from pictrieve.graphs.registry import describe_methods, get_method, skipped_methods

    for name in names:
        get_method(name)  # an unknown name is one line listing the known ones
    described = [m for m in describe_methods() if not names or m["name"] in names]
    if as_json:
        click.echo(json.dumps({"methods": described, "skipped": skipped_methods()}, indent=2))
        return
    for method in described:
        click.echo(_format(method))
    queryable = [m["name"] for m in described if any(f["name"] == "query" for f in m["input"])]
    if queryable and not names:
        click.echo(f"`pictrieve search QUERY --method NAME` runs: {', '.join(queryable)}")
    # A plugin that failed to load was logged (once, with its name and error) when the registry loaded.


def _format(method: dict[str, Any]) -> str:
    lines = [f"{method['name']}  ({method['origin']})"]
    lines += textwrap.wrap(method["description"], WIDTH, initial_indent="  ", subsequent_indent="  ")
    inputs = ", ".join(f"{f['name']}: {f['type']}" + ("" if f["required"] else " (optional)") for f in method["input"])
    lines.append(f"  input:    {inputs}")
    needs = ", ".join(n["name"] for n in method["needs"]) or "nothing besides the gallery"
    if method["gallery"] == "optional":
        needs += " (the gallery is optional)"
    lines.append(f"  needs:    {needs}")
    lines.append("  settings:" + ("" if method["settings"] else " none"))
    for setting in method["settings"]:
        head = f"    {_setting_head(setting)}"
        text = setting["description"]
        if not text:
            lines.append(head)
            continue
        if len(head) > COLUMN - 2:  # a long type: the description goes under it
            lines.append(head)
            head = ""
        lines += textwrap.wrap(text, WIDTH, initial_indent=head.ljust(COLUMN), subsequent_indent=" " * COLUMN)
    return "\n".join(lines) + "\n"


def _setting_head(setting: dict[str, Any]) -> str:
    most = f" (at most {setting['maximum']})" if "maximum" in setting else ""
    return f"{setting['name']}: {setting['type']} = {json.dumps(setting.get('default'))}{most}"
