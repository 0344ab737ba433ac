"""Install method plugins the way pip would, into a folder put on ``sys.path``/``PYTHONPATH``.

A package plus a ``NAME-VERSION.dist-info`` folder with ``METADATA`` and ``entry_points.txt`` next to it
is an installed distribution for :mod:`importlib.metadata`: its ``pictrieve.methods`` entry points are
what the registry loads. Nothing is installed into the test environment itself.
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

TOY_SOURCE = Path(__file__).parents[1] / "data" / "toy_pictrieve_method"
ASKING_TOY_SOURCE = Path(__file__).parents[1] / "data" / "toy_asking_method"


def write_distribution(folder: Path, name: str, entry_points: dict[str, str]) -> Path:
    """A ``dist-info`` for distribution ``name`` declaring ``entry_points`` of the pictrieve.methods group."""
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[pictrieve.methods]\n{lines}")
    return info


def install_toy(folder: Path, *, broken: bool = False) -> Path:
    """The toy method (``toy_pictrieve_method``) installed into ``folder``; with ``broken``, also a plugin
    whose entry point names a module that does not exist."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(TOY_SOURCE, folder / "toy_pictrieve_method", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    write_distribution(folder, "toy-pictrieve-method", {"toy": "toy_pictrieve_method:METHOD"})
    if broken:
        write_distribution(folder, "broken-pictrieve-plugin", {"broken": "no_such_module_for_pictrieve:METHOD"})
    return folder


def install_asking_toy(folder: Path) -> Path:
    """The toy method that asks the person one question (``toy_asking_method``, method ``toy_ask``) installed into
    ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ASKING_TOY_SOURCE, folder / "toy_asking_method", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    write_distribution(folder, "toy-asking-method", {"toy_ask": "toy_asking_method:METHOD"})
    return folder


def asking_toy_gallery(root: Path, embedder: str):
    """Six seeded square photos indexed with ``embedder`` in ``root``: the gallery the asking toy ranks."""
    from helpers import make_photo
    from pictrieve.vectorstore.gallery import Gallery

    for i in range(6):
        make_photo(root / "photos" / f"img{i}.png", seed=i)
    opened = Gallery.open(root / "g.gallery", embedder)
    opened.add(root / "photos", progress=False)
    return opened


def plugin_env(folder: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``folder`` first on ``PYTHONPATH``."""
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [base.get("PYTHONPATH")])])
    return base


@contextmanager
def installed_in_process(folder: Path) -> Iterator[None]:
    """``folder``'s plugins registered in this process for the ``with`` block (the registry looks again
    on entry and on exit)."""
    from pictrieve.graphs.registry import refresh_methods

    sys.path.insert(0, str(folder))
    refresh_methods()
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for module in [m for m in sys.modules if m.startswith(("toy_pictrieve_method", "toy_asking_method"))]:
            del sys.modules[module]
        refresh_methods()
