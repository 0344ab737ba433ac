"""A read-only command ends its process once its output is out (issue 40.4: ``quality search`` was silent for 4-6 s
after its results, while Python tore down the modules transformers loads): the exit handlers still run and the output
is whole; with no such word, or another thread still working, the normal exit runs. Real processes, no models."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys, threading, time
import click
import pictrieve.cli.main as entry
from pictrieve.cli.process_exit import no_teardown_needed

class Teardown:  # freed by Python's teardown of this module, which a skipped teardown never reaches
    def __del__(self):
        sys.stdout.write("teardown ran\\n")
        sys.stdout.flush()

kept = Teardown()
atexit.register(lambda: print("exit handlers ran", flush=True))

@entry.cli.command("probe")
@click.option("--skip/--no-skip", default=True)
@click.option("--worker", is_flag=True)
def probe(skip, worker):
    if worker:  # a non-daemon thread still writing when the command returns
        threading.Thread(target=lambda: (time.sleep(0.5), print("worker done", flush=True))).start()
    if skip:
        no_teardown_needed()
    sys.stdout.write("results, not flushed yet;")

sys.argv = ["pictrieve", "probe", *sys.argv[1:]]
entry.main()
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_command_that_asks_ends_without_teardown_its_output_whole():
    done = _run()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "results, not flushed yet;exit handlers ran\n"


@pytest.mark.parametrize("args", [("--no-skip",), ("--worker",)])
def test_otherwise_the_normal_exit_runs(args):
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("results, not flushed yet;") and done.stdout.endswith("teardown ran\n")
    assert "exit handlers ran" in done.stdout
    assert ("worker done" in done.stdout) == ("--worker" in args)

