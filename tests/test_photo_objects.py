"""A gallery told ``index --objects`` keeps its photos' detected objects current wherever it changes (issue 37):
the choice is remembered (``index``, ``index --watch`` and ``--engine ray`` go on finding them without the flag,
``--no-objects`` stops), a changed photo is looked at again, a copy takes its source's objects, and ``info`` says
how many photos have them. The real offline detector (SSD-MobileNet-v2) on flickr8k-dev photos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.cli import run
from helpers.watcher import Watcher
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.photo_evidence import OBJECTS_KEY, find_objects, parse_objects

DOG_AND_MAN = "1003163366_44323f5815.jpg"
"""A flickr8k-dev photo of a man and his dog on a bench: the detector finds a person and a dog."""


def dev_photos(flickr_dir: Path, count: int, start: int = 0) -> list[Path]:
    return sorted((flickr_dir / "images").iterdir())[start:start + count]


def objects_of(gallery: Gallery | str, path: Path) -> str | None:
    """The stored ``objects`` of the photo at ``path`` (``None``: not analysed, or no record)."""
    view = Gallery.open(gallery, create=False) if isinstance(gallery, (str, Path)) else gallery
    return (view.metadata_of([path_id(path)]).get(path_id(path)) or {}).get(OBJECTS_KEY)


def index_json(photos: Path, gallery: Path, embedder: str, *flags: str) -> dict:
    done = run("index", str(photos), "-g", str(gallery), "-e", embedder, "--json", *flags)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_changed_photo_is_looked_at_again_and_a_copy_takes_its_sources_objects(
        tmp_path, flickr_dir, tiny_clip_name, detector_cached):
    photos = tmp_path / "photos"
    photos.mkdir()
    dog, other, third = flickr_dir / "images" / DOG_AND_MAN, *dev_photos(flickr_dir, 2, 100)
    shutil.copy(dog, photos / "a.jpg")
    shutil.copy(other, photos / "b.jpg")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    assert gallery.add(photos, objects=True, progress=False).objects_found == 2
    assert {"person", "dog"} <= set(parse_objects(objects_of(gallery, photos / "a.jpg")))

    # Same path, new content: the detector looks at the new photo (without the flag: the gallery remembers).
    shutil.copyfile(third, photos / "a.jpg")
    report = gallery.add(photos, progress=False)
    assert report.indexed == 1 and report.objects_found == 1
    assert objects_of(gallery, photos / "a.jpg") == find_objects(photos / "a.jpg") != find_objects(dog)

    # An exact copy of a stored photo takes that photo's objects, as it takes its vector: no detector run. (The
    # source's objects are marked with a value the detector never gives, to see where the copy's came from.)
    gallery.update_metadata([path_id(photos / "b.jpg")], [{OBJECTS_KEY: "zebra 0.99"}])
    shutil.copy(other, photos / "b-copy.jpg")
    report = gallery.add(photos, progress=False)
    assert (report.indexed, report.copied, report.objects_found) == (1, 1, 0)
    assert objects_of(gallery, photos / "b-copy.jpg") == "zebra 0.99"

    # A photo replaced by its old neighbour's content while that content moves on (the bug of the vectors: a copy
    # took its source's new vector): each file gets the objects of the content it holds now.
    shutil.copyfile(photos / "a.jpg", photos / "c.jpg")  # c: a's content ...
    shutil.copyfile(dog, photos / "a.jpg")  # ... while a changes in the same run
    report = gallery.add(photos, progress=False)
    assert objects_of(gallery, photos / "a.jpg") == find_objects(dog)
    assert objects_of(gallery, photos / "c.jpg") == find_objects(third)

    # Told to stop: a changed photo no longer has objects (its old ones were another photo's), none are found.
    assert gallery.add(photos, objects=False, progress=False).objects_found == 0
    shutil.copyfile(dev_photos(flickr_dir, 1, 103)[0], photos / "a.jpg")  # content no record has
    report = gallery.add(photos, progress=False)
    assert report.indexed == 1 and report.objects_found == 0 and objects_of(gallery, photos / "a.jpg") is None


def test_index_remembers_objects_and_photos_indexed_before_gain_them_without_embedding(
        tmp_path, flickr_dir, tiny_clip_name, detector_cached):
    photos = tmp_path / "photos"
    photos.mkdir()
    for photo in dev_photos(flickr_dir, 2, 110):
        shutil.copy(photo, photos / photo.name)
    gallery = tmp_path / "g"
    first = index_json(photos, gallery, tiny_clip_name)
    assert first["indexed"] == 2 and first["objects_found"] == 0
    before = Gallery.open(gallery, create=False).embeddings([path_id(p) for p in sorted(photos.iterdir())])
    told = index_json(photos, gallery, tiny_clip_name, "--objects")
    assert told["objects_found"] == 2 and told["indexed"] == 0  # the vectors stay: only the objects are added
    assert (Gallery.open(gallery, create=False).embeddings([path_id(p) for p in sorted(photos.iterdir())])
            == before).all()
    [new] = dev_photos(flickr_dir, 1, 112)
    shutil.copy(new, photos / new.name)
    remembered = index_json(photos, gallery, tiny_clip_name)  # no flag: the gallery was told
    assert remembered["indexed"] == 1 and remembered["objects_found"] == 1
    assert objects_of(str(gallery), photos / new.name) == find_objects(new)


@pytest.mark.slow
def test_the_watch_finds_the_objects_of_new_changed_and_moved_photos(tmp_path, flickr_dir, tiny_clip_name,
                                                                      detector_cached):
    """``index --objects`` once, then the real watcher without the flag: a new photo gets its objects, a photo
    changed in place gets the new content's, a moved one keeps its own; ``--no-objects`` then stops it."""
    photos = tmp_path / "photos"
    photos.mkdir()
    shutil.copy(flickr_dir / "images" / DOG_AND_MAN, photos / "dog.jpg")
    gallery = tmp_path / "g"
    assert index_json(photos, gallery, tiny_clip_name, "--objects")["objects_found"] == 1
    watcher = Watcher(photos, gallery, tiny_clip_name)
    try:
        watcher.wait_ready()
        assert "0.13 s of CPU a photo" in watcher.err  # what finding them costs, said before it starts
        new, changed, moved = dev_photos(flickr_dir, 3, 120)
        shutil.copy(new, photos / "new.jpg")
        found = watcher.wait_for(lambda: objects_of(str(gallery), photos / "new.jpg"), "the new photo's objects")
        assert found == find_objects(new)
        shutil.copyfile(changed, photos / "dog.jpg")
        expected = find_objects(changed)
        watcher.wait_for(lambda: objects_of(str(gallery), photos / "dog.jpg") == expected,
                         "the changed photo's new objects")
        (photos / "trip").mkdir()
        (photos / "new.jpg").rename(photos / "trip" / "new.jpg")
        assert watcher.wait_for(lambda: objects_of(str(gallery), photos / "trip" / "new.jpg"),
                                "the moved photo's objects") == found
        watcher.wait_for(lambda: any("objects found in 1" in line for line in watcher.batches()),
                         "a batch line counting the photos the detector looked at")
    finally:
        assert watcher.stop() == 0, watcher.err
    stopped = Watcher(photos, gallery, tiny_clip_name, "--no-objects")
    try:
        stopped.wait_ready()
        shutil.copy(moved, photos / "later.jpg")
        stopped.wait_for(lambda: stopped.record(photos / "later.jpg"), "the later photo's record")
        assert objects_of(str(gallery), photos / "later.jpg") is None and "0.13 s" not in stopped.err
    finally:
        assert stopped.stop() == 0, stopped.err


async def test_info_and_gallery_info_say_how_many_photos_have_objects_and_whether_the_rule_reads_them(
        tmp_path, tiny_clip_name):
    """No detector needed: the objects of two photos of three are stored by hand (one where nothing was found)."""
    from helpers import make_photo
    from helpers.mcp import stdio_session
    from pictrieve.vectorstore import relevance

    photos = [make_photo(tmp_path / "photos" / f"p{i}.png", seed=i) for i in range(3)]
    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    gallery.add(tmp_path / "photos", progress=False)
    location = str(gallery.location)
    done = run("info", "-g", location)
    assert done.returncode == 0, done.stderr
    assert (f"objects (COCO, detected): found in none of the photos; `pictrieve index PHOTOS --gallery {location} "
            "--objects` finds them (about 0.13 s of CPU a photo)") in done.stdout
    gallery.update_metadata([path_id(photos[0]), path_id(photos[1])], [{OBJECTS_KEY: "dog 0.91"}, {OBJECTS_KEY: ""}])
    gallery.put_json("indexing", {"objects": True})
    said = json.loads(run("info", "-g", location, "--json").stdout)["objects"]
    assert (said["photos"], said["analysed"], said["told"], said["rule_uses"]) == (3, 2, True, False)
    assert said["said"].startswith(f"found in 2 of 3 photos; the relevance rule of {tiny_clip_name} does not read them")
    # a rule shipped with evidence reads them (offline's reference photos stand in: only the rule's kind matters here)
    gallery.put_json(relevance.record_key(gallery.embedder_name), {
        "threshold": 0.3, "rule": "over-median", "reference": "offline.npy",
        "evidence": {"threshold": 0.35, "detector": {"confirm_score": 0.3, "bonus": 1.0, "penalty": 0.02}}})
    async with stdio_session(["-g", location, "-e", gallery.embedder_name]) as session:
        info = await session.call_tool("gallery_info", {})
    assert not info.isError, info.content
    assert info.structuredContent["objects"] == {
        "photos": 3, "analysed": 2, "told": True, "rule_uses": True,
        "said": "found in 2 of 3 photos; the relevance rule lets them confirm or deny what a query names (for those 2); "
                "new and changed photos get theirs as they are indexed (--no-objects stops it)"}
