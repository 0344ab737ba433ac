"""Near-duplicates and exact copies (issue 30, item 6): the perceptual hash stored at index time, copies whose
vector is reused instead of embedded again, `pictrieve duplicates`, and search collapsing a group to one hit.
Photos are real flickr8k-dev photos and copies of them made here (resized, recompressed, cropped a little,
stored sideways with EXIF Orientation 6); galleries are real Chroma."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import FLICKR8K_DEV
from helpers.cli import run
from helpers.stores import STORES, open_store
from helpers.web_page import browser, page  # noqa: F401  (fixtures: headless Chromium and a page)

from pictrieve.evaluation.near_duplicates import COPY_KINDS, write_copies
from pictrieve.tools.core.images import load_image
from pictrieve.tools.core.perceptual_hash import hamming, perceptual_hash
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.duplicates import DEFAULT_MAX_DISTANCE, candidate_pairs, popcount
from pictrieve.vectorstore.gallery import Gallery, chroma_collection


@pytest.fixture(scope="module")
def dev_photos():
    """Four flickr8k-dev photos (skips when the folder is absent)."""
    photos = sorted((FLICKR8K_DEV / "images").glob("*.jpg"))[:4]
    if len(photos) < 4:
        pytest.skip(f"flickr8k-dev not found at {FLICKR8K_DEV} (set PICTRIEVE_FLICKR8K_DEV)")
    return photos


def _embedding_calls(embedder, monkeypatch) -> list[int]:
    """Count the images ``embedder`` embeds from now on."""
    calls: list[int] = []
    real = embedder.embed_preprocessed

    def counted(batch):
        calls.append(len(batch))
        return real(batch)

    monkeypatch.setattr(embedder, "embed_preprocessed", counted)
    return calls


def test_copies_hash_close_to_their_original_and_unrelated_photos_far(tmp_path, dev_photos):
    original, *others = dev_photos
    copies = write_copies(original, tmp_path)
    base = perceptual_hash(load_image(original))
    for kind, path in copies.items():
        assert hamming(base, perceptual_hash(load_image(path))) <= DEFAULT_MAX_DISTANCE, kind
    for other in others:
        assert hamming(base, perceptual_hash(load_image(other))) > DEFAULT_MAX_DISTANCE + 4
    # the rotated copy is stored sideways: hashed as stored, it would be far from the original
    from PIL import Image
    with Image.open(copies["rotated"]) as sideways:
        assert hamming(base, perceptual_hash(sideways.convert("RGB"))) > DEFAULT_MAX_DISTANCE


def test_a_resized_copy_is_found_under_the_offline_embedder(tmp_path, dev_photos):
    """The offline default embeds a half-size photo well below the full cosine (0.86 here): the pair is found by
    its close hashes and the lower cosine they need, in a real gallery of the real model."""
    from pictrieve.vectorstore.duplicates import CLOSE_DISTANCE, DEFAULT_MIN_COSINE, find_duplicates

    folder = tmp_path / "photos"
    folder.mkdir()
    original = Path(shutil.copy(dev_photos[0], folder / dev_photos[0].name))
    resized = write_copies(original, folder, kinds=("resized",))["resized"]
    gallery = Gallery.open(tmp_path / "g", "offline")
    gallery.add(folder, progress=False)
    report = find_duplicates(gallery)
    assert [sorted(group.paths) for group in report.groups] == [sorted([str(original), str(resized)])]
    group = report.groups[0]
    assert group.max_distance <= CLOSE_DISTANCE and group.min_cosine < DEFAULT_MIN_COSINE  # the close rule found it


def test_perceptual_hash_values_are_pinned():
    """Every stored hash depends on these exact bits: any change to the hash (its sampling, its DCT, which
    coefficients make the median) must be a deliberate one. The corner glow is a dark picture whose DC term
    lies below the other coefficients' median, so counting it in the median changes bits there."""
    from PIL import Image

    y, x = np.mgrid[0:64, 0:64].astype(np.float64)
    waves = np.clip(128 + 60 * np.sin(x / 5.0) + 50 * np.cos(y / 7.0) + 0.8 * x - 0.5 * y, 0, 255)
    corner_glow = 255 * np.exp(-(x**2 + y**2) / 8.0)
    corner_block = np.zeros((64, 64))
    corner_block[:6, :6] = 255
    hashes = [perceptual_hash(Image.fromarray(a.astype(np.uint8)).convert("RGB"))
              for a in (waves, corner_glow, corner_block)]
    assert hashes == ["b8e4e4e46ce464ec", "007e7e7e7c7c7000", "78fcfcfcf8700000"]


def test_candidate_pairs_match_comparing_every_pair():
    rng = np.random.default_rng(7)
    hashes = rng.integers(0, 2**63, 400, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    for k in range(0, 200, 2):  # plant pairs 0..12 bits apart, and a run of identical hashes
        flips = rng.choice(64, int(rng.integers(0, 13)), replace=False)
        hashes[k + 1] = hashes[k] ^ np.uint64(sum(1 << int(f) for f in flips))
    hashes[300:310] = hashes[0]
    every = popcount(hashes[:, None] ^ hashes[None, :])
    for distance in (0, 4, 10, 11):
        i, j, d = candidate_pairs(hashes, distance)
        want_i, want_j = np.nonzero(np.triu(every <= distance, 1))
        assert set(zip(i.tolist(), j.tolist())) == set(zip(want_i.tolist(), want_j.tolist()))
        assert (d <= distance).all()


def test_index_stores_the_hash_and_older_records_gain_it_without_embedding(tmp_path, dev_photos, tiny_clip_embedder,
                                                                           monkeypatch):
    folder = tmp_path / "photos"
    folder.mkdir()
    for photo in dev_photos[:3]:
        shutil.copy(photo, folder / photo.name)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    ids = [path_id(folder / photo.name) for photo in dev_photos[:3]]
    stored = gallery.metadata_of(ids)
    assert all(stored[id_]["phash"] == perceptual_hash(load_image(folder / p.name)) for id_, p in zip(ids, dev_photos))
    # a gallery indexed before hashes were stored: the same records without `phash`
    vectors = gallery.embeddings(ids)
    older = [{k: v for k, v in stored[id_].items() if k != "phash"} for id_ in ids]
    chroma_collection(gallery).delete(ids=ids)  # (an upsert would merge the old keys in)
    chroma_collection(gallery).add(ids=ids, embeddings=vectors, metadatas=older)
    assert not any("phash" in meta for meta in gallery.metadata_of(ids).values())
    calls = _embedding_calls(tiny_clip_embedder, monkeypatch)
    report = gallery.add(folder, progress=False)
    assert (report.indexed, report.unchanged, calls) == (0, 3, [])
    assert {id_: meta["phash"] for id_, meta in gallery.metadata_of(ids).items()} == \
        {id_: stored[id_]["phash"] for id_ in ids}
    np.testing.assert_allclose(gallery.embeddings(ids), vectors)


def test_exact_copies_and_moved_files_reuse_the_stored_vector(tmp_path, dev_photos, tiny_clip_embedder,
                                                              tiny_clip_name, monkeypatch):
    first, second = tmp_path / "photos" / "a", tmp_path / "photos" / "b"
    first.mkdir(parents=True)
    for photo in dev_photos[:2]:
        shutil.copy(photo, first / photo.name)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(first, progress=False)
    # a later folder: a copy of a stored photo, a moved one (new path, same bytes), and two new identical files
    second.mkdir()
    shutil.copy(first / dev_photos[0].name, second / "copy.jpg")
    os.rename(first / dev_photos[1].name, second / "moved.jpg")
    shutil.copy(dev_photos[2], second / "new.jpg")
    shutil.copy(dev_photos[2], second / "new-again.jpg")
    calls = _embedding_calls(tiny_clip_embedder, monkeypatch)
    report = gallery.add(second, progress=False)
    assert (report.indexed, report.copied, sum(calls)) == (4, 3, 1)  # only one of the new pair is embedded
    vectors = dict(zip(["copy", "moved", "new", "new-again"],
                       gallery.embeddings([path_id(second / f"{n}.jpg") for n in ("copy", "moved", "new", "new-again")])))
    np.testing.assert_allclose(vectors["copy"], gallery.embeddings([path_id(first / dev_photos[0].name)])[0])
    np.testing.assert_allclose(vectors["new"], vectors["new-again"])
    copied = gallery.metadata_of([path_id(second / "copy.jpg")])[path_id(second / "copy.jpg")]
    assert copied["path"] == str(second / "copy.jpg") and copied["phash"]
    # the command says so
    shutil.copy(dev_photos[3], second / "fourth.jpg")
    shutil.copy(dev_photos[3], tmp_path / "photos" / "fourth-copy.jpg")
    result = run("index", str(tmp_path / "photos"), "--gallery", str(tmp_path / "g"), "-e", tiny_clip_name)
    assert result.returncode == 0, result.stderr
    assert "indexed 2," in result.stdout and "1 exact copies reused" in result.stdout, result.stdout


@pytest.mark.parametrize("kind", STORES)
def test_a_copy_keeps_its_own_vector_when_its_source_changes_in_the_same_run(kind, tmp_path, dev_photos,
                                                                            tiny_clip_embedder):
    """A new file holding the bytes a stored photo had, while that photo itself was replaced by other bytes: the
    run re-embeds the photo, and the copy must not take the photo's new vector (it copied from a record the same
    run rewrites, written before the copy was read back)."""
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(dev_photos[0], folder / "a.jpg")
    store = open_store(kind, tmp_path / "g", tiny_clip_embedder)
    store.add(folder, progress=False)
    old_vector = store.embeddings([path_id(folder / "a.jpg")])[0]
    shutil.copy(folder / "a.jpg", folder / "b.jpg")  # b has a's old bytes
    shutil.copy(dev_photos[1], folder / "a.jpg")  # a becomes another photo
    os.utime(folder / "a.jpg", ns=(1_000_000_000, 1_000_000_000))
    report = store.add(folder, progress=False)
    assert (report.indexed, report.failed) == (2, [])
    new_a, b = store.embeddings([path_id(folder / "a.jpg"), path_id(folder / "b.jpg")])
    np.testing.assert_allclose(new_a, tiny_clip_embedder.embed_images([load_image(dev_photos[1])])[0], atol=1e-5)
    np.testing.assert_allclose(b, old_vector, atol=1e-5)  # b's own content, not a's new photo
    assert store.metadata_of([path_id(folder / "b.jpg")])[path_id(folder / "b.jpg")]["phash"] == \
        perceptual_hash(load_image(dev_photos[0]))


def test_duplicates_command_lists_each_photo_with_its_copies(tmp_path, dev_photos, tiny_clip_name):
    photos = tmp_path / "photos"
    for photo in dev_photos[:3]:
        photos.mkdir(exist_ok=True)
        shutil.copy(photo, photos / photo.name)
    copies = write_copies(dev_photos[0], photos / "copies")
    gallery = str(tmp_path / "g")
    assert run("index", str(photos), "--gallery", gallery, "-e", tiny_clip_name).returncode == 0
    result = run("duplicates", "--gallery", gallery, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["compared"] == 7 and report["unhashed"] == 0
    assert [sorted(group["paths"]) for group in report["groups"]] == \
        [sorted([str(photos / dev_photos[0].name), *(str(copies[kind]) for kind in COPY_KINDS)])]
    # the most pixels first, then the largest file: the original or its sideways copy (same pixels, quality 90)
    assert report["groups"][0]["paths"][0] in (str(photos / dev_photos[0].name), str(copies["rotated"]))
    text = run("duplicates", "--gallery", gallery)
    assert text.stdout.startswith("1 groups of near-identical photos (4 copies) among 7 photos"), text.stdout
    refused = run("duplicates", "--gallery", str(tmp_path / "nothing"))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr


@pytest.fixture(scope="module")
def near_gallery(tmp_path_factory, tiny_clip_embedder):
    """Four dev photos, the first with its four near-identical copies: 8 photos, 4 distinct."""
    photos = sorted((FLICKR8K_DEV / "images").glob("*.jpg"))[:4]
    if len(photos) < 4:
        pytest.skip(f"flickr8k-dev not found at {FLICKR8K_DEV} (set PICTRIEVE_FLICKR8K_DEV)")
    root = tmp_path_factory.mktemp("near")
    (root / "photos").mkdir()
    for photo in photos:
        shutil.copy(photo, root / "photos" / photo.name)
    copies = write_copies(photos[0], root / "photos" / "copies")
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery, root / "photos" / photos[0].name, sorted(str(path) for path in copies.values())


def _distinct(hits, original, copies) -> None:
    """The hits are four distinct photos, one of the group standing for the other four: the one the duplicates
    report keeps (the most pixels, then the largest file: here the original or its turned copy)."""
    from pictrieve.vectorstore.duplicates import keep_first

    paths = [hit["path"] if isinstance(hit, dict) else hit.path for hit in hits]
    held = [hit["copies"] if isinstance(hit, dict) else hit.copies for hit in hits]
    members = {str(original), *copies}
    assert len(paths) == 4 and len(set(paths) & members) == 1, paths
    group = next(k for k, path in enumerate(paths) if path in members)
    assert sorted([paths[group], *held[group]]) == sorted(members)
    assert all(not held[k] for k in range(4) if k != group)
    from PIL import Image

    def meta(path: str) -> dict:
        with Image.open(path) as opened:
            return {"width": opened.width, "height": opened.height, "size": os.path.getsize(path), "path": path}

    assert paths[group] == min(members, key=lambda path: keep_first(meta(path)))


async def test_search_collapses_near_duplicates_everywhere_and_still_returns_k(near_gallery, tmp_path, tiny_clip_name):
    from pictrieve.graphs.search import build_search_graph
    from pictrieve.vectorstore.retriever import GalleryRetriever

    gallery, original, copies = near_gallery
    plain = gallery.search_image(original, k=4)
    assert len({hit.path for hit in plain} & {str(original), *copies}) == 4  # without it: the copies crowd in
    _distinct(gallery.search_image(original, k=4, collapse_duplicates=True), original, copies)
    assert len(gallery.search_image(original, k=8, collapse_duplicates=True)) == 4  # 4 distinct photos in all
    for hybrid in (False, True):
        _distinct(gallery.search_text("a dog", k=4, hybrid=hybrid, collapse_duplicates=True), original, copies)
    graph = build_search_graph(gallery)
    _distinct(graph.invoke({"image": str(original), "collapse_duplicates": True}, context={"k": 4})["hits"],
              original, copies)
    _distinct([GalleryRetriever(gallery=gallery, k=4).invoke("a dog", collapse_duplicates=True)[i].metadata
               for i in range(4)], original, copies)
    # the page's search, as the page sends it
    from helpers.web_page import page_client

    from pictrieve.ui.app import create_app

    client = page_client(create_app(gallery, state_dir=tmp_path / "state"))
    body = client.post("/api/search", json={"like": gallery.search_image(original, k=1)[0].id, "k": 4,
                                            "collapse_duplicates": True}).json()
    _distinct(body["hits"], original, copies)
    # the command line
    shown = run("search", "--image", str(original), "--gallery", gallery.location, "-k", "4", "--collapse-duplicates")
    assert shown.returncode == 0 and "(+4 near-identical copies)" in shown.stdout, shown.stdout + shown.stderr
    # MCP's search_images, from a real client over stdio
    from helpers.mcp import stdio_session

    async with stdio_session(["--gallery", gallery.location, "--state-dir", str(tmp_path / "mcp")]) as session:
        found = await session.call_tool("search_images", {"query": "a dog", "k": 4, "collapse_duplicates": True})
    assert not found.isError, found.content
    _distinct([{"copies": [], **hit} for hit in found.structuredContent["hits"]], original, copies)


def test_a_collapsed_group_shows_the_copy_the_duplicates_report_keeps(near_gallery):
    """Issue 37: searching with a half-size copy showed that copy for the group, while the Duplicates tab said to
    keep the full-size one. One rule now: whichever copy ranks first, the group stands at its rank and score and
    shows the copy the report keeps."""
    from pictrieve.vectorstore.duplicates import find_duplicates

    gallery, original, copies = near_gallery
    (group,) = find_duplicates(gallery).groups
    keep = group.paths[0]
    for member in group.paths:  # each copy, searched by itself, ranks first
        plain = gallery.search_image(member, k=1)[0]
        assert plain.path == member
        for hybrid_text in (False, True):
            hits = (gallery.search_image(member, k=4, collapse_duplicates=True) if not hybrid_text else
                    gallery.search_text(Path(member).stem, k=4, hybrid=True, collapse_duplicates=True))
            shown = next(hit for hit in hits if hit.path in group.paths)
            assert shown.path == keep and sorted([shown.path, *shown.copies]) == sorted(group.paths), member
            if not hybrid_text:
                assert shown.rank == 1 and shown.score == pytest.approx(plain.score)  # the best copy's place


async def test_mcp_and_the_page_list_the_groups_read_only(near_gallery, tmp_path):
    """MCP's find_duplicates (a real client over stdio) and the page's Duplicates tab list the planted group, behind
    the same guards as the other tools and routes; thumbnails over MCP only when asked."""
    from helpers.mcp import stdio_session
    from helpers.web_page import page_client

    from pictrieve.ui.app import create_app

    gallery, original, copies = near_gallery
    planted = sorted([str(original), *copies])
    client = page_client(create_app(gallery, state_dir=tmp_path / "state"))
    body = client.get("/api/duplicates").json()
    assert [sorted(group["paths"]) for group in body["groups"]] == [planted], body
    assert (body["total_groups"], body["copies"], body["compared"], body["unhashed"]) == (1, 4, 8, 0)
    ids = body["groups"][0]["ids"]
    assert all(client.get(f"/api/image/{id_}").status_code == 200 for id_ in ids)  # the tab's pictures, by id
    refused = client.get("/api/duplicates", params={"max_distance": "99"})
    assert refused.status_code == 400 and refused.json()["error"].startswith("max_distance must be"), refused.text
    assert client.get("/api/duplicates", headers={"Origin": "http://elsewhere.example"}).status_code == 403
    assert client.get("/api/duplicates", headers={"Host": "attacker.example"}).status_code == 421
    assert 'data-tab="duplicates"' in client.get("/").text

    async with stdio_session(["--gallery", gallery.location, "--state-dir", str(tmp_path / "mcp")]) as session:
        tool = next(tool for tool in (await session.list_tools()).tools if tool.name == "find_duplicates")
        found = await session.call_tool("find_duplicates", {})
        pictured = await session.call_tool("find_duplicates", {"thumbnails": True, "limit": 1})
        bad = await session.call_tool("find_duplicates", {"max_distance": 40})
    assert tool.annotations.readOnlyHint and "groups" in tool.outputSchema["properties"]
    assert not found.isError, found.content
    groups = found.structuredContent["groups"]
    assert [group["ids"] for group in groups] == [ids] and sorted(groups[0]["paths"]) == planted
    assert found.structuredContent["summary"].startswith("1 groups of near-identical photos (4 copies) among 8")
    assert not [block for block in found.content if block.type == "image"]
    assert len([block for block in pictured.content if block.type == "image"]) == 5
    assert bad.isError and "max_distance" in bad.content[0].text and len(bad.content) == 1


@pytest.mark.browser
def test_the_duplicates_tab_shows_each_group_with_its_pictures(near_gallery, tmp_path, page):
    """The page in headless Chromium: the Duplicates tab lists the planted group, its five pictures load, the keeper
    first, and a picture opens the larger view with its file."""
    from helpers.web_page import serve

    from pictrieve.ui.app import create_app

    gallery, original, copies = near_gallery
    with serve(create_app(gallery, state_dir=tmp_path / "state")) as url:
        page.goto(url)
        page.click("#tabs button[data-tab=duplicates]")
        page.wait_for_function("() => { const pictures = [...document.querySelectorAll('#duplicates-groups .card img')];"
                               " return pictures.length === 5 && pictures.every(p => p.complete && p.naturalWidth > 0); }")
        assert page.text_content("#duplicates-summary").startswith(
            "1 groups of near-identical photos (4 copies) among 8 photos")
        files = page.eval_on_selector_all("#duplicates-groups .card", "cards => cards.map(c => c.title)")
        assert sorted(files) == sorted([str(original), *copies])
        roles = page.eval_on_selector_all("#duplicates-groups .card .score", "lines => lines.map(l => l.textContent)")
        assert roles[0].startswith("the one to keep") and all(role == "near-identical copy" for role in roles[1:])
        page.click("#duplicates-groups .card >> nth=1")
        page.wait_for_selector("#viewer[open]")
        assert page.text_content("#viewer-meta") == files[1]


# --- servers: a report is kept until the gallery is written to, and one is computed at a time ---------------------


def _hand_made(store) -> None:
    """Four records written by hand: ``a`` and ``b`` near-identical (one hash bit apart, the same vector), ``c`` and
    ``d`` far from everything."""
    dim = store.embedder.dim
    vectors = np.eye(4, dim, dtype=np.float32)
    vectors[1] = vectors[0]
    hashes = ["0f0f0f0f0f0f0f0f", "0f0f0f0f0f0f0f0e", "f0f0f0f0f0f0f0f0", "00ff00ff00ff00ff"]
    store.upsert(list("abcd"), vectors, [{"path": f"/photos/{name}.jpg", "phash": value}
                                          for name, value in zip("abcd", hashes)])


def _counted_reads(store, monkeypatch, hold: "threading.Event | None" = None,
                   entered: "threading.Event | None" = None) -> list[int]:
    """Count ``store.items()`` calls (a full read of the records); with ``hold``, each read waits for it first."""
    reads: list[int] = []
    real = store.items

    def items(*args, **kwargs):
        reads.append(1)
        if entered is not None:
            entered.set()
        if hold is not None:
            assert hold.wait(30), "the test never let the held read go"
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "items", items)
    return reads


@pytest.mark.parametrize("kind", STORES)
def test_a_report_is_kept_until_the_gallery_is_written_to(kind, tmp_path, tiny_clip_embedder, monkeypatch):
    from pictrieve.vectorstore.duplicates import duplicate_report

    store = open_store(kind, tmp_path / "g", tiny_clip_embedder)
    _hand_made(store)
    reads = _counted_reads(store, monkeypatch)
    first = duplicate_report(store)
    assert [group.ids for group in first.groups] == [["a", "b"]] and reads == [1]
    first.groups.clear()  # the caller's copy: what is kept is untouched
    assert [group.ids for group in duplicate_report(store).groups] == [["a", "b"]] and reads == [1]
    assert duplicate_report(store, min_cosine=0.95).groups and reads == [1, 1]  # other settings: their own report
    store.upsert(["e"], np.eye(1, store.embedder.dim, dtype=np.float32), [{"path": "/photos/e.jpg",
                                                                          "phash": "0f0f0f0f0f0f0f0f"}])
    assert [sorted(group.ids) for group in duplicate_report(store).groups] == [["a", "b", "e"]]
    assert reads == [1, 1, 1]  # a write: read again, once
    duplicate_report(store)
    assert reads == [1, 1, 1]
    if kind == "chroma":  # a write through a bare Chroma handle (no pictrieve write counter) is seen too
        chroma_collection(store).delete(ids=["e"])
        assert [group.ids for group in duplicate_report(store).groups] == [["a", "b"]] and reads == [1, 1, 1, 1]


def _call_in_memory(server, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call ``tool`` on ``server`` from a real MCP client over in-memory streams, in a thread of its own (its own
    event loop: a browser test before may leave one running in this thread)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from mcp.shared.memory import create_connected_server_and_client_session

    async def call() -> Any:
        async with create_connected_server_and_client_session(server._mcp_server) as session:
            return await session.call_tool(tool, arguments or {})

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, call()).result(timeout=120)


def test_a_second_report_while_one_is_computed_is_refused_at_once(tmp_path, tiny_clip_embedder, monkeypatch):
    """While one request computes a report (its read of the records held here), the page answers another ``429``
    with one line and MCP's find_duplicates (a real client, in memory) one ``isError`` line; once it is done, both
    get the kept report without reading the records again."""
    from helpers.web_page import page_client

    from pictrieve.mcp_server.duplicates import add_duplicates_tool
    from pictrieve.mcp_server.server import PictrieveMCP
    from pictrieve.ui.app import create_app
    from pictrieve.vectorstore.duplicates import duplicate_report

    gallery = open_store("chroma", tmp_path / "g", tiny_clip_embedder)
    _hand_made(gallery)
    hold, entered = threading.Event(), threading.Event()
    reads = _counted_reads(gallery, monkeypatch, hold, entered)
    client = page_client(create_app(gallery, state_dir=tmp_path / "state"))
    server = PictrieveMCP(name="test")
    add_duplicates_tool(server, gallery)
    done: list[Any] = []
    first = threading.Thread(target=lambda: done.append(duplicate_report(gallery)))
    first.start()
    try:
        assert entered.wait(60)
        busy = client.get("/api/duplicates")
        assert busy.status_code == 429 and "already looking for near-duplicates" in busy.json()["error"], busy.text
        refused = _call_in_memory(server, "find_duplicates")
        assert refused.isError and len(refused.content) == 1 and "already looking" in refused.content[0].text
    finally:
        hold.set()
        first.join(60)
    assert done and [group.ids for group in done[0].groups] == [["a", "b"]] and reads == [1]
    assert client.get("/api/duplicates").json()["groups"][0]["ids"] == ["a", "b"]
    found = _call_in_memory(server, "find_duplicates")
    assert not found.isError and found.structuredContent["groups"][0]["ids"] == ["a", "b"] and reads == [1]
