"""Following a Vision Search Assistant run as it streams: a line per step, and the result at the end.

``pictrieve ask -v`` and the web page's Ask tab both stream the graph (``stream_mode="updates"``) to show
what it does while it works: :func:`follow_run` folds the updates into the run's result (what
``graph.invoke`` returns) and hands each step to a callback; :func:`step_line` says in one line what a
step did (with ``detail``, the command line's extra lines: the regions' descriptions, the pages read and
each searcher's answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pictrieve.agents.vsa.state import merge_timings


STREAM_MODES = ["updates", "tasks"]
"""What a caller that shows steps as they start streams: ``graph.stream(..., stream_mode=STREAM_MODES)``."""


def follow_run(updates: Iterable[Any],
               on_step: Callable[[str, dict[str, Any]], None] | None = None,
               on_start: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The run's result from its streamed ``updates`` (``{node: change}`` each), calling
    ``on_step(node, change)`` for every step that changed something.

    Streamed with :data:`STREAM_MODES` (items ``(mode, payload)``), each step's start also calls
    ``on_start(node, its input)``, so a slow step can be announced before it runs.
    Changes are folded as the graph folds them: ``timings`` add up per node, any other key is replaced;
    the searchers' raw findings (``searched``) are left out (``findings`` holds them renumbered).
    """
    state: dict[str, Any] = {}
    for item in updates:
        if isinstance(item, tuple):
            mode, item = item
            if mode == "tasks":
                if on_start is not None and "input" in item:  # a task's start (its end carries "result")
                    on_start(item["name"], item["input"] if isinstance(item["input"], dict) else {})
                continue
        update = item
        for node, change in update.items():
            if not change:
                continue
            for key, value in change.items():
                if key == "timings":
                    state["timings"] = merge_timings(state.get("timings"), value)
                elif key != "searched":
                    state[key] = value
            if on_step is not None:
                on_step(node, change)
    return state


def step_line(node: str, update: dict[str, Any], *, detail: bool = False) -> str:
    """One line saying what step ``node`` did (``update`` is its change); ``""`` for a step worth no line
    (``retrieve`` when the photo was given). ``detail`` adds indented lines (the command line's ``-v``)."""
    if node == "retrieve":
        hits = update.get("hits") or []
        if not hits:
            return ""
        line = f"found the photo in the gallery ({len(hits)} candidates)"
        return f"{line}: asking about {update['image']}" if detail and update.get("image") else line
    if node == "regions":
        found = ", ".join(f"{r['label']} ({r['score']:.2f})" for r in update.get("regions") or [])
        return f"regions: {found or 'none'}"
    if node == "describe":
        regions = update.get("regions") or []
        line = f"described {len(regions)} region(s)"
        if detail:
            line += "".join(f"\n  {i}. {r['label']}: {r.get('description', '')}" for i, r in enumerate(regions, 1))
        return line
    if node == "plan":
        turn = update.get("plan_turns")  # absent when the planner said it is done
        asked = [q for q in update.get("sub_questions") or [] if turn is not None and q.get("turn") == turn]
        if not asked:
            return "plan: no (more) searches"
        return f"plan turn {turn} ({update.get('plan_mode')}): " + "; ".join(q["question"] for q in asked)
    if node == "search":
        finding = (update.get("searched") or [{}])[0]
        queries = " then ".join(repr(q) for q in finding.get("queries") or [finding.get("question", "")])
        sources = finding.get("sources") or []
        extra = f" ({finding['error']})" if finding.get("error") else ""
        line = f"searched {queries}: read {len(sources)} page(s){extra}"
        if detail:
            line += f"\n  read: {', '.join(s['title'] for s in sources) or 'no pages'}\n  -> {finding.get('answer', '')}"
        return line
    if node == "summarize":
        return f"collected {len(update.get('sources') or [])} source(s)"
    if node == "answer":
        dropped = (update.get("citations") or {}).get("dropped")
        how = f" ({update['answerer']})" if update.get("answerer") else ""
        return f"answered{how}" + (f"; removed citations of sources never read: {dropped}" if dropped else "")
    return node


def start_line(node: str, given: dict[str, Any]) -> str:
    """One line saying that step ``node`` starts (``given``: its input), for the steps that can take seconds;
    ``""`` for the others."""
    if node == "regions":
        return "finding regions (the detector loads on the process's first run) ..."
    if node == "describe":
        count = len(given.get("regions") or [])
        return f"describing {count} region(s) (the describer loads on the process's first run) ..."
    if node == "search":
        question = (given.get("sub_question") or {}).get("question", "")
        return f"searching {question!r} ..." if question else ""
    if node == "answer":
        return "writing the answer ..."
    return ""
