"""The folder walk and the caption files resolve links as ``Path.resolve`` does, each folder once (issue 40).

Indexing's main thread lists the photos, their captions and their ids before the first photo is decoded; resolving
every part of every path took a measurable share of a small run. The shortcut must give the same real paths (so the
same record ids and captions) through file links, folder links, relative sources and ``..``.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import make_photo
from pictrieve.tools.core.images import iter_image_files
from pictrieve.vectorstore.captions import CaptionIndex, read_captions_jsonl
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.indexing import list_images, plan_index


def linked_tree(root: Path) -> Path:
    """``real/`` with photos, ``photos/`` holding a file link, a folder link, a dangling link and a plain photo."""
    real = root / "real"
    for name in ("a.jpg", "b.jpg", "sub/c.jpg"):
        make_photo(real / name, seed=len(name))
    photos = root / "photos"
    photos.mkdir()
    make_photo(photos / "plain.jpg", seed=7)
    (photos / "file-link.jpg").symlink_to(real / "a.jpg")
    (photos / "folder-link").symlink_to(real / "sub")
    (photos / "gone.jpg").symlink_to(root / "nowhere.jpg")
    (root / "elsewhere").symlink_to(photos)
    return photos


def test_the_walk_gives_the_paths_resolve_gives(tmp_path, monkeypatch):
    photos = linked_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    sources = ["elsewhere", str(photos / "plain.jpg"), "real/../real/b.jpg", "photos/file-link.jpg"]
    problems: list[tuple[str, str]] = []
    found = list(iter_image_files(sources, problems=problems))
    expected = [tmp_path / "real/a.jpg", photos / "plain.jpg", tmp_path / "real/sub/c.jpg", tmp_path / "real/b.jpg"]
    assert found == [path.resolve(strict=True) for path in expected]
    assert [reason for _, reason in problems] == [f"elsewhere/gone.jpg: broken symlink (its target "
                                                  f"{tmp_path / 'nowhere.jpg'} does not exist)"]
    listing = list_images(["elsewhere"])
    assert listing.resolved and [path_id(p, resolve=False) for p in listing.paths] == \
        [path_id(p) for p in ["elsewhere/file-link.jpg", "elsewhere/plain.jpg", "elsewhere/folder-link/c.jpg"]]


def test_caption_lines_are_keyed_by_real_paths(tmp_path):
    photos = linked_tree(tmp_path)
    lines = [{"image": "photos/file-link.jpg", "captions": ["a link"]},
             {"image": "photos/folder-link/c.jpg", "captions": ["in a linked folder"]},
             {"image": "elsewhere/plain.jpg", "captions": ["through a linked parent"]},
             {"image": "real/sub/../b.jpg", "captions": ["up and down"]},
             {"image": "photos/missing.jpg", "captions": ["not there"]}]
    (tmp_path / "captions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    captions = read_captions_jsonl(tmp_path / "captions.jsonl")
    assert list(captions) == [(tmp_path / line["image"]).resolve() for line in lines]
    assert CaptionIndex([photos]).captions_for(tmp_path / "real/a.jpg") == ["a link"]


def test_a_plan_from_the_walk_has_the_ids_of_real_paths(tmp_path, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery

    photos = linked_tree(tmp_path)
    view = Gallery.open(tmp_path / "g", tiny_clip_name)
    plan = plan_index([view], [tmp_path / "elsewhere"])
    assert sorted(planned.id for planned in plan.todo) == sorted(
        path_id(tmp_path / path) for path in ["real/a.jpg", "real/sub/c.jpg", "photos/plain.jpg"])


def test_photos_named_one_by_one_find_each_folders_caption_file(tmp_path, monkeypatch):
    """Photos given as files (as a glob or a benchmark gives them) read the caption file beside and above their folder,
    each folder looked at once."""
    for folder in ("trip/day1", "trip/day2"):
        for name in ("a.jpg", "b.jpg"):
            make_photo(tmp_path / folder / name, seed=len(folder + name))
        (tmp_path / folder / "captions.jsonl").write_text(
            json.dumps({"image": "a.jpg", "captions": [f"{folder} a"]}) + "\n")
    (tmp_path / "trip" / "captions.jsonl").write_text(json.dumps({"image": "day2/b.jpg", "captions": ["above"]}) + "\n")
    looked: list[str] = []
    real_is_file = Path.is_file
    monkeypatch.setattr(Path, "is_file", lambda self: looked.append(self.name) or real_is_file(self))
    sources = [tmp_path / folder / name for folder in ("trip/day1", "trip/day2") for name in ("a.jpg", "b.jpg")]
    index = CaptionIndex(sources + [tmp_path / "trip" / "missing.jpg"])
    assert [index.captions_for(path) for path in sources] == [["trip/day1 a"], [], ["trip/day2 a"], ["above"]]
    assert looked.count("captions.jsonl") == 4  # two folders, each its own file and its parent's
