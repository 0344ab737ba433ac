"""An option that needs an extra that is not installed is refused at the start, in one line naming the extra.

The extra's modules are made unimportable for real in the command's process: a ``sitecustomize`` on its
``PYTHONPATH`` puts a finder first on ``sys.meta_path`` that refuses them (as Python does for a package that
is not installed). Nothing of pictrieve is replaced. That the refusal comes before any slow work shows as
the command's only line (after ``search --method``'s start-up lines): a run that had started would have
printed a model's ``loading ...`` line or its first step line.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers.cli import CLI, one_clear_line, refused_at_the_start
from helpers.galleries import tiny_gallery  # noqa: F401  (fixture)

BLOCKER = """
import sys

BLOCKED = {blocked!r}


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
"""


def without(tmp_path, *modules: str) -> dict[str, str]:
    """An environment whose Python cannot import ``modules`` (a sitecustomize on PYTHONPATH refuses them)."""
    hook = tmp_path / f"without-{'-'.join(modules)}"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(modules)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}


def run_without(tmp_path, modules: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """``pictrieve ARGS`` without ``modules``. A server that was not refused would serve until stopped: after
    180 s (a refusal takes seconds) it is stopped and its output is what the test reads."""
    try:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180, input="",
                              env=without(tmp_path, *modules))
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess(exc.cmd, -9, "", f"(still running after 180 s)\n{said}")


def refused_for(result: subprocess.CompletedProcess, extra: str) -> str:
    line = refused_at_the_start(result) if " --method " in " ".join(result.args) else one_clear_line(result)
    assert result.returncode == 2 and line.startswith("error: ") and f"needs the {extra} extra" in line, line
    assert line.endswith(f"pip install 'pictrieve[{extra}]'"), line
    return line


WEB = ("ddgs", "duckduckgo_search")


def test_the_blocker_really_makes_an_import_fail(tmp_path):
    result = subprocess.run([*CLI[:1], "-c", "import trafilatura"], capture_output=True, text=True,
                            env=without(tmp_path, "trafilatura"))
    assert result.returncode == 1 and "ModuleNotFoundError: No module named 'trafilatura'" in result.stderr


def test_ask_with_web_search_but_no_web_extra_stops_before_the_photo_is_analysed(tmp_path):
    from PIL import Image

    photo = tmp_path / "photo.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(photo)
    line = refused_for(run_without(tmp_path, WEB, "ask", str(photo), "what breed?", "--search", "ddgs"), "web")
    assert "web search (ddgs)" in line and "ddgs not installed" in line
    # trafilatura (reading the pages found) belongs to the same extra
    refused_for(run_without(tmp_path, ("trafilatura",), "ask", str(photo), "what breed?", "--search", "ddgs"), "web")


def test_servers_refuse_an_operators_option_whose_extra_is_missing(tmp_path, tiny_gallery):
    gallery = str(tiny_gallery.location)
    for command in (["mcp", "-g", gallery], ["ui", "-g", gallery], ["serve", "--gallery", gallery]):
        refused_for(run_without(tmp_path, WEB, *command, "--search", "ddgs"), "web")
        line = refused_for(run_without(tmp_path, ("diffusers",), *command, "--visualizer", "tiny-random"), "generation")
        assert "the visualizer 'tiny-random'" in line, line
    refused_for(run_without(tmp_path, ("fastapi",), "ui", "-g", gallery), "ui")
    refused_for(run_without(tmp_path, ("mcp",), "mcp", "-g", gallery), "mcp")


def test_visret_and_needle_refuse_a_missing_extra_before_their_first_step(tmp_path, tiny_gallery):
    gallery = str(tiny_gallery.location)
    refused_for(run_without(tmp_path, ("diffusers",), "search", "a dog", "-g", gallery, "--method", "visret",
                            "--visualizer", "tiny-random"), "generation")
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "captions.jsonl").write_text('{"image": "0.png", "captions": ["a dog"]}\n')
    line = refused_for(run_without(tmp_path, ("umap",), "search", "a dog", "-g", gallery, "--method", "needle",
                                   "--visualizer", f"exemplar:{reference}", "--set", "reducer=umap"), "needle")
    assert "reducer umap" in line


@pytest.mark.parametrize("extra, modules", [("web", WEB), ("generation", ("accelerate",)), ("scale", ("ray",))])
def test_require_extra_names_the_missing_module(tmp_path, extra, modules):
    code = (f"from pictrieve.tools.core.extras import require_extra\n"
            f"try:\n    require_extra({extra!r}, 'this option')\nexcept ImportError as e:\n    print(e)\n")
    result = subprocess.run([*CLI[:1], "-c", code], capture_output=True, text=True, env=without(tmp_path, *modules))
    assert result.stdout.strip() == (f"this option needs the {extra} extra ({modules[0]} not installed); "
                                     f"pip install 'pictrieve[{extra}]'"), result.stdout + result.stderr
