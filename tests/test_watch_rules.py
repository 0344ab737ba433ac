"""What ``index --watch`` takes and drops, on a :class:`FolderWatch` run in this process (polling, short waits):
hidden files are skipped by the rule ``index`` uses, and a photo replaced by a link or by a file that is no
image loses its record (issue 38, Why 2 and What to build 6). The subprocess runs are ``test_watch.py``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from helpers import make_photo
from pictrieve.tools.core.images import is_hidden_name, iter_image_files
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.watching import FolderWatch

WAIT = 120.0


class Running:
    """A FolderWatch over ``folder`` in a thread, polling every 0.1 s, until the ``with`` block ends."""

    def __init__(self, gallery: Gallery, folder: Path) -> None:
        self.batches, self.notes = [], []
        self.watch = FolderWatch(gallery.views(), [folder], poll=0.1, quiet=0.2, settle=0.2, max_wait=2.0,
                                 on_batch=self.batches.append, on_note=self.notes.append)
        self.thread = threading.Thread(target=self.watch.run, daemon=True)

    def __enter__(self) -> "Running":
        self.thread.start()
        self.wait_for(lambda: self.batches, "the catch-up")
        return self

    def __exit__(self, *exc) -> None:
        self.watch.stop()
        self.thread.join(60)

    def wait_for(self, check, what: str):
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            if not self.thread.is_alive():
                break
            time.sleep(0.1)
        pytest.fail(f"{what}: not seen in {WAIT:.0f} s; batches {[b.line() for b in self.batches]}, notes {self.notes}")


def test_hidden_names_are_one_rule():
    assert is_hidden_name(".thumbnails") and is_hidden_name("._IMG_1.JPG") and is_hidden_name(".photo.jpg.part")
    assert not is_hidden_name("IMG_1.JPG") and not is_hidden_name("a.b.jpg")


def test_the_watch_skips_hidden_files_as_index_does(tmp_path, tiny_clip_name):
    """``.thumbnails/a.jpg`` and ``._IMG_1.JPG`` appear beside a new photo: the photo is indexed in that batch,
    the hidden two are not (as ``index``'s folder walk skips them)."""
    folder = tmp_path / "photos"
    make_photo(folder / "first.png", seed=0)
    gallery = Gallery.open(tmp_path / "gallery", tiny_clip_name)
    with Running(gallery, folder) as running:
        make_photo(folder / ".thumbnails" / "a.jpg", seed=1)
        make_photo(folder / "._IMG_1.JPG", seed=2)
        time.sleep(0.3)  # the hidden files are older: in the same batch as the photo or an earlier one
        make_photo(folder / "IMG_1.JPG", seed=3)
        running.wait_for(lambda: path_id(str(folder.resolve() / "IMG_1.JPG")) in gallery.ids(), "the new photo")
    stored = sorted(Path(item.path).name for item in gallery.items())
    assert stored == ["IMG_1.JPG", "first.png"]
    assert sorted(p.name for p in iter_image_files(folder)) == stored  # what index takes


def test_a_photo_replaced_by_a_link_or_a_non_image_loses_its_record(tmp_path, tiny_clip_name):
    folder, outside = tmp_path / "photos", tmp_path / "outside"
    for i, name in enumerate(("linked", "text", "kept", "caught_up")):
        make_photo(folder / f"{name}.png", seed=i)
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    Image.new("RGB", (40, 30), (7, 8, 9)).save(outside / "private.png")
    gallery = Gallery.open(tmp_path / "gallery", tiny_clip_name)
    gallery.add(folder, progress=False)
    real = folder.resolve()
    ids = {name: path_id(str(real / f"{name}.png")) for name in ("linked", "text", "kept", "caught_up")}
    # a swap made while nothing watched: the catch-up drops it
    (folder / "caught_up.png").unlink()
    (folder / "caught_up.png").symlink_to(outside / "private.png")
    with Running(gallery, folder) as running:
        assert ids["caught_up"] not in gallery.ids()
        (folder / "linked.png").unlink()
        (folder / "linked.png").symlink_to(outside / "secret.txt")
        (folder / "text.png").write_text("SECRET\n")
        running.wait_for(lambda: not {ids["linked"], ids["text"]} & set(gallery.ids()), "the swapped records dropped")
    assert set(gallery.ids()) == {ids["kept"]}
    notes = [note for batch in running.batches for note in batch.notes]
    assert any("linked.png was replaced by a link" in note for note in notes), notes
    assert any("caught_up.png was replaced by a link" in note for note in notes), notes
    assert any("text.png is no longer an image" in note for note in notes), notes
