"""An image path inside ``--allow-dir`` is read as the file that was checked (issue 38 review, finding 5).

The path was checked on its real path and then handed to the graph as it was, and later steps opened it again
following links: someone who can write into an allowed folder could swap the file, or a folder above it, for a
link to a file outside between the check and the read (or after). Now the checked real path is opened through no
link into the run's private folder, and the graph reads that copy. The swap is done here at the worst moment,
right after the check (the check itself is the real one, wrapped), so the test is deterministic.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from helpers import make_photo


@pytest.fixture
def world(tmp_path):
    allowed = tmp_path / "allowed"
    make_photo(allowed / "inside.png", seed=1)
    make_photo(allowed / "sub" / "deeper.png", seed=2)
    outside = tmp_path / "outside"
    outside.mkdir()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(outside / "private.png")
    (outside / "sub").mkdir()
    Image.new("RGB", (40, 30), (10, 200, 10)).save(outside / "sub" / "deeper.png")
    return tmp_path


def _swap_file(root: Path) -> str:
    target = root / "allowed" / "inside.png"
    target.unlink()
    target.symlink_to(root / "outside" / "private.png")
    return str(target)


def _swap_folder(root: Path) -> str:
    shutil.rmtree(root / "allowed" / "sub")
    (root / "allowed" / "sub").symlink_to(root / "outside" / "sub", target_is_directory=True)
    return str(root / "allowed" / "sub" / "deeper.png")


SWAPS = {"inside.png": _swap_file, "sub/deeper.png": _swap_folder}


@pytest.mark.parametrize("name", SWAPS)
def test_a_link_swapped_in_right_after_the_check_is_refused(world, name, monkeypatch):
    from pictrieve.tools.core.image_inputs import AllowedDirs, ImageInputError, image_file

    checked = AllowedDirs.resolve

    def check_then_swap(self, path):
        real = checked(self, path)  # the real check passes: nothing is a link yet
        SWAPS[name](world)
        return real

    monkeypatch.setattr(AllowedDirs, "resolve", check_then_swap)
    run = world / "run"
    run.mkdir()
    with pytest.raises(ImageInputError, match="changed as it was read") as refused:
        image_file(str(world / "allowed" / name), run, allowed=AllowedDirs.of([world / "allowed"]))
    assert "outside" not in str(refused.value) and list(run.iterdir()) == []


@pytest.mark.parametrize("name", SWAPS)
def test_what_the_graph_reads_is_the_checked_file_whatever_the_folder_becomes(world, name):
    from pictrieve.tools.core.image_inputs import AllowedDirs, image_file

    original = (world / "allowed" / name).read_bytes()
    run = world / "run"
    run.mkdir()
    path = image_file(str(world / "allowed" / name), run, allowed=AllowedDirs.of([world / "allowed"]))
    SWAPS[name](world)
    assert Path(path).parent == run and Path(path).read_bytes() == original
