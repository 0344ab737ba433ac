"""``pictrieve index DIR --watch``: the gallery follows its folders until Ctrl-C or SIGTERM.

The work is :class:`~pictrieve.vectorstore.watching.FolderWatch`; this module prints its batches (one line
each, or one JSON object each with ``--json``) and its notes, and turns the first Ctrl-C or SIGTERM into a
clean stop (the batch in hand ends after its current file, writing what was embedded; a second Ctrl-C quits
at once, and the next start's catch-up does what was left either way).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any, Sequence

import click

from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.indexing import finds_objects
from pictrieve.vectorstore.photo_evidence import COST_NOTE
from pictrieve.vectorstore.watching import FolderWatch, WatchBatch


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


def watch_folders(store: Gallery, sources: Sequence[str], *, embedders: list[str], poll: float | None,
                  as_json: bool, **options: Any) -> None:
    """Watch the folders ``sources`` into ``store`` (with ``embedders``, as ``index`` does) until a signal."""
    for source in sources:
        if not Path(source).expanduser().is_dir():
            raise click.UsageError(f"--watch follows folders: {source} is not one (give the folder that holds "
                                   "the photos)")

    def show(batch: WatchBatch) -> None:
        if as_json:
            click.echo(json.dumps(batch.to_dict()))
        else:
            click.echo(f"{_stamp()} {batch.line()}")
        for failure in batch.failed:
            click.echo(f"  skipped {failure.error}", err=True)
        for note in batch.notes:
            click.echo(f"  note: {note}", err=True)

    def note(line: str) -> None:
        click.echo(f"{_stamp()} {line}", err=True)

    watch = FolderWatch(store.views(embedders), list(sources), poll=poll, on_batch=show, on_note=note,
                        progress=not as_json, **options)
    if finds_objects(store, options.get("objects")):
        note(COST_NOTE)

    def on_signal(signum: int, _frame: Any) -> None:
        if watch.stopping:
            raise KeyboardInterrupt  # asked twice: quit at once (the next start catches up)
        note(f"{signal.Signals(signum).name}: stopping after the file in hand (Ctrl-C again quits at once)")
        watch.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        watch.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
