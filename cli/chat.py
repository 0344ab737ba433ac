"""``pictrieve chat``: find a photo by answering the system's questions (PlugIR).

Reads one answer per line from standard input, so it works at a terminal and piped
(``printf 'yes\\nred\\nstop\\n' | pictrieve chat -g ./my.gallery "a dog in the snow"``). Answers:
anything (an answer), ``found <n>`` (the n-th image shown, or an image id), or ``stop``.
Sessions are checkpointed in SQLite: ``--session ID`` resumes one after a restart.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pictrieve.agents.plugir import METHOD as PLUGIR
from pictrieve.cli.need_options import check_needs, method_need_options
from pictrieve.graphs.sessions import SessionView, run_session

if TYPE_CHECKING:
    from pictrieve.agents.steps import Step


def default_checkpoint_path() -> Path:
    from pictrieve.tools.core.pypi_assets import cache_root

    return cache_root() / "chat-sessions.sqlite"


@click.command()
@click.argument("description", required=False)
@click.option("--gallery", "-g", required=True, metavar="PATH|URL", help="Gallery to search.")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: the gallery's).")
@click.option("--rounds", default=10, show_default=True, help="Question budget.")
@click.option("-k", "top_k", default=10, show_default=True, help="Images shown per round.")
@click.option("--top-n", default=None, type=int, help="Retrieval candidates (default: 1% of the gallery, >= 20).")
@click.option("--questions", default=5, show_default=True, help="Questions generated per round (q_n).")
@click.option("--filter-attempts", default=3, show_default=True,
              help="Question regenerations when the filter rejects them all (1 is much faster on a CPU).")
@click.option("--reformulation-tokens", default=512, show_default=True,
              help="Token cap for rewriting the dialogue into one description (paper: 512; ~96 suffices).")
@click.option("--arm", type=click.Choice(["auto", "zs", "cr", "cr+rce", "cr+rce+f", "offline"]), default="auto",
              show_default=True, help="Which PlugIR parts to use: the paper's ablation arms (the --llm asks), or "
              "'offline': questions made from what tells the candidates' captions apart, no LLM, a fraction of a "
              "second per round. auto: offline with the bundled offline --llm, else cr+rce+f.")
@click.option("--session", "--thread-id", "session", default=None, metavar="ID",
              help="Session id; pass an existing one to resume it.")
@click.option("--checkpoint", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="SQLite file for sessions [default: ~/.cache/pictrieve/chat-sessions.sqlite].")
@click.option("--html", "html_dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Write a contact sheet per round into DIR.")
@method_need_options(PLUGIR)
def chat(description: str | None, gallery: str, embedder: str | None, rounds: int, top_k: int, top_n: int | None,
         questions: int, filter_attempts: int, reformulation_tokens: int, arm: str, session: str | None,
         checkpoint: str | None, html_dir: str | None, needs: dict[str, Any]) -> None:
    """Describe a photo briefly; answer questions until it shows up.

    \b
    Each round shows the current top-k (rank, score, path) and asks one question. Reply with:
      an answer        e.g. "red", "yes, two of them", "none of these, indoors on a carpet", "I don't know"
                       (every word is heard: things, colours and places you name join the search)
      found <n>        the n-th image shown is the one (or: found <image id>)
      stop             end the session
    """
    from langgraph.types import Command

    from pictrieve.agents.needs import resolve_needs
    from pictrieve.agents.plugir.settings import PlugIRSettings, default_arm
    from pictrieve.graphs.checkpoints import sqlite_checkpointer
    from pictrieve.graphs.sessions import session_view
    from pictrieve.vectorstore.gallery import Gallery

    check_needs(needs, methods=[PLUGIR])  # a dead or refusing endpoint is one line now, not after the first search
    store = Gallery.open(gallery, embedder, create=False)
    saver = sqlite_checkpointer(checkpoint or default_checkpoint_path())
    built = resolve_needs(PLUGIR, needs, gallery=store)
    graph = PLUGIR.build(store, checkpointer=saver, **built)
    session = session or uuid.uuid4().hex[:8]
    arm = default_arm(built.get("llm")) if arm == "auto" else arm  # the arm its chat model asks best with
    context = PlugIRSettings(arm=arm, max_rounds=rounds, shown_k=top_k, candidate_k=top_n,
                             questions_per_round=questions, filter_attempts=filter_attempts,
                             reformulation_max_tokens=reformulation_tokens)
    steps = PLUGIR.step_table()

    view = session_view(graph, session)
    if view is not None and not view.done:  # an unfinished session: resume where it paused
        click.echo(f"Resuming session {session}: {view.description!r}")
        if description:
            click.echo("(ignoring the new description; start a new --session for a new search)")
        if view.unfinished:  # a round cut short between steps: finish it first
            view = _run(graph, None, session, context, steps)
    elif view is not None and not description:  # a finished session: nothing is pending
        click.echo(f"Session {session} has already ended; start a new one with a DESCRIPTION.")
        _show_end(view, None)
        return
    else:
        if not description:
            raise click.UsageError("give a DESCRIPTION of the photo (or --session ID to resume one)")
        click.echo(f"Session {session} (resume later with --session {session})")
        view = _run(graph, {"description": description}, session, context, steps)

    stdin = sys.stdin  # click.get_text_stream is deprecated (Click 8.5); CliRunner swaps sys.stdin too
    while view.pending is not None:
        _show_round(view, html_dir)
        options = f"  ({' / '.join(view.options)})" if view.options else ""
        click.echo(f"Q{view.question_number}: {view.question}{options}")
        click.echo("> ", nl=False)
        line = stdin.readline()
        if not line:  # end of input: the session stays resumable
            click.echo(f"\nEnd of input; session {session} saved (resume with --session {session}).")
            return
        click.echo("" if stdin.isatty() else line.rstrip("\n"))
        view = _run(graph, Command(resume=line.strip()), session, context, steps)
    _show_end(view, html_dir)


def _run(graph: Any, value: Any, session: str, context: Any, steps: Mapping[str, Step]) -> SessionView:
    """Run the session to its next pause, printing each step (its short name, its time, what starts next, from
    the method's step table) to stderr as it finishes, so a slow CPU round shows where it is."""
    started = time.perf_counter()

    def finished(node: str, update: Any) -> None:
        nonlocal started
        step = steps.get(node)
        if step is None:
            return
        now = time.perf_counter()
        click.echo(f"  [{step.name} {now - started:.1f} s]" + (f" {step.then}..." if step.then else ""), err=True)
        started = now

    return run_session(graph, value, session, context, finished)


def _show_hits(hits: Sequence[Any]) -> None:
    from pictrieve.vectorstore.hits import hit_line

    for hit in hits:
        click.echo(f"  {hit_line(hit)}")


def _show_round(view: SessionView, html_dir: str | None) -> None:
    round_number = view.round
    click.echo(f"\nRound {round_number} query: {view.query}")
    _show_hits(view.shown)
    if html_dir:
        _contact_sheet(view.shown, Path(html_dir) / f"round-{round_number:02d}.html",
                       f"round {round_number}: {view.query}")


def _show_end(view: SessionView, html_dir: str | None) -> None:
    if view.found is not None:
        click.echo(f"\nFound: {view.found.path or view.found.id}")
        return
    if view.stopped:
        click.echo("\nStopped.")
        return
    click.echo(f"\nQuestion budget spent. Final query: {view.query}")
    _show_hits(view.shown)
    if html_dir:
        _contact_sheet(view.shown, Path(html_dir) / f"round-{view.round:02d}.html", f"final: {view.query}")


def _contact_sheet(hits: list[Any], path: Path, title: str) -> None:
    from pictrieve.vectorstore.contact_sheet import write_contact_sheet
    from pictrieve.vectorstore.hits import as_hit

    write_contact_sheet([as_hit(h) for h in hits], path, title=title)
    click.echo(f"  contact sheet: {path}")


