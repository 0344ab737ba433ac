"""What an install holds: every subpackage (found automatically, a new one included), under ``pictrieve.``
only, with its data files; checked on a wheel built from a copy of the repository."""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_INSTALLED = {"tests", "benchmarks", "examples", "docs", "build", "dist"}
LEFT_BEHIND = shutil.ignore_patterns(".git", "tests", "benchmarks", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".benchmarks", "*.gallery", "pictrieve-demo", ".langgraph_api")


def subpackages(root: Path) -> set[str]:
    """``pictrieve.<folder>`` for every folder of ``root`` holding an ``__init__.py``, as installed."""
    found = {"pictrieve"}
    for init in root.rglob("__init__.py"):
        relative = init.parent.relative_to(root)
        if relative.parts and relative.parts[0] not in NOT_INSTALLED and not relative.parts[0].startswith("."):
            found.add(".".join(("pictrieve", *relative.parts)))
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, list[str]]:
    """A wheel built (offline, no build isolation) from a copy of the repository to which a new method
    folder, agents/newmethod/ with a prompts/newmethod/ beside it, was added: ``(copy, file names)``."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=LEFT_BEHIND)
    (source / "agents" / "newmethod").mkdir()
    (source / "agents" / "newmethod" / "__init__.py").write_text('"""A method added after the package list was written."""\n')
    (source / "prompts" / "newmethod").mkdir()
    (source / "prompts" / "newmethod" / "ask.txt").write_text("Ask {question}\n")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(work / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (path,) = (work / "dist").glob("pictrieve-*.whl")
    return source, zipfile.ZipFile(path).namelist()


def test_the_wheel_holds_every_subpackage_and_only_under_pictrieve(wheel):
    source, names = wheel
    packages = {name.rsplit("/", 1)[0].replace("/", ".") for name in names if name.endswith("/__init__.py")}
    assert "pictrieve.agents.newmethod" in subpackages(source)  # found with no edit to the package list
    assert packages == subpackages(source)
    tops = {name.split("/")[0] for name in names}
    assert tops == {"pictrieve", next(t for t in tops if t.endswith(".dist-info"))}, tops  # no top-level agents/tools
    assert "pictrieve/setup.py" not in names and not any(n.startswith("pictrieve/tests/") for n in names)


def test_the_wheel_holds_the_data_files(wheel):
    source, names = wheel
    prompts = [p.relative_to(source).as_posix() for p in (source / "prompts").rglob("*")
               if p.is_file() and p.suffix in (".txt", ".yaml", ".md")]
    assert "prompts/newmethod/ask.txt" in prompts
    assert {f"pictrieve/{p}" for p in prompts} <= set(names)
    statics = {f"pictrieve/ui/static/{p.name}" for p in (ROOT / "ui" / "static").iterdir() if p.is_file()}
    assert statics <= set(names)
    assert any(n.startswith("pictrieve/tools/models/embedders/weights/") and n.endswith(".npz") for n in names)
    # the relevance rule shipped for the offline default (and its reference photos), the absent queries that calibrate it; the country
    # names --place matches
    assert {"pictrieve/vectorstore/relevance_cutoffs.json", "pictrieve/evaluation/data/absent_queries.jsonl",
            "pictrieve/vectorstore/country_names.json", "pictrieve/vectorstore/relevance_reference/offline.npy"} <= set(names)


def test_prompts_are_packaged_as_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pictrieve.prompts"]
    prompt_files = [p for p in (ROOT / "prompts").iterdir() if p.name != "__init__.py" and p.suffix != ".pyc" and p.is_file()]
    assert all(any(p.match(pattern) for pattern in patterns) for p in prompt_files), prompt_files


def test_the_offline_head_is_packaged_as_data():
    """The default embedder needs its trained head: an install without it cannot embed photos."""
    from pictrieve.tools.models.embedders.trained import PACKAGED_HEAD

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pictrieve.tools.models.embedders"]
    relative = PACKAGED_HEAD.relative_to(PACKAGED_HEAD.parents[1])  # weights/flickr8k_head.npz
    shipped = ROOT / "tools" / "models" / "embedders" / relative
    assert shipped.is_file() and shipped.stat().st_size < 8_000_000
    assert any(relative.match(pattern) for pattern in patterns), patterns
