"""The package list in pyproject.toml must name every subpackage, or an install silently lacks it."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_INSTALLED = {"tests", "benchmarks", "examples", "build", "dist"}


def test_every_subpackage_is_installed():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"pictrieve"}
    for init in ROOT.rglob("__init__.py"):
        relative = init.parent.relative_to(ROOT)
        if relative.parts and relative.parts[0] not in NOT_INSTALLED and not relative.parts[0].startswith("."):
            found.add(".".join(("pictrieve", *relative.parts)))
    assert declared == found


def test_prompts_are_packaged_as_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pictrieve.prompts"]
    prompt_files = [p for p in (ROOT / "prompts").iterdir() if p.name != "__init__.py" and p.suffix != ".pyc" and p.is_file()]
    assert all(any(p.match(pattern) for pattern in patterns) for p in prompt_files), prompt_files


def test_the_offline_head_is_packaged_as_data():
    """The default embedder needs its trained head: an install without it cannot embed photos."""
    from pictrieve.tools.embedders.trained import PACKAGED_HEAD

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pictrieve.tools.embedders"]
    relative = PACKAGED_HEAD.relative_to(PACKAGED_HEAD.parents[1])  # weights/flickr8k_head.npz
    shipped = ROOT / "tools" / "embedders" / relative
    assert shipped.is_file() and shipped.stat().st_size < 8_000_000
    assert any(relative.match(pattern) for pattern in patterns), patterns
