"""Gallery in Chroma server mode, against a real `chroma run` on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from helpers import free_port
from helpers.chroma import chroma_executable, chroma_server, heartbeat, start_chroma  # noqa: F401 - a fixture
from pictrieve.vectorstore.gallery import Gallery, chroma_client, chroma_collection
from pictrieve.vectorstore.errors import GalleryError

pytestmark = pytest.mark.server


def test_gallery_over_http(chroma_server, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(chroma_server, tiny_clip_embedder)
    assert gallery.add(photo_folder, progress=False).indexed == 6
    target = photo_folder / "a" / "img1.png"
    assert gallery.search_image(target, k=1)[0].path == str(target)

    reopened = Gallery.open(chroma_server)  # the server remembers the embedder
    assert reopened.embedder_name == tiny_clip_embedder.name and reopened.count() == 6
    assert reopened.add(photo_folder, progress=False).unchanged == 6


def test_a_port_taken_before_the_server_binds_it_is_retried(tmp_path):
    """The free-port race: the first port offered is already in use, so the server on it fails and
    the fixture must try another port rather than fail the test or talk to the port's owner."""
    executable = chroma_executable()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        process, url = start_chroma(executable, tmp_path / "data", port_source=lambda: next(ports, None) or free_port())
        try:
            assert url != f"http://127.0.0.1:{taken.getsockname()[1]}" and heartbeat(url)
        finally:
            process.kill()
            process.wait()


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(GalleryError, match="cannot reach the Chroma server.*chroma run"):
        Gallery.open(f"http://127.0.0.1:{free_port()}", "offline")


def test_reading_a_missing_gallery_creates_no_collection(chroma_server, photo_folder, tiny_clip_embedder):
    from pictrieve.vectorstore.errors import EmptyGalleryError
    from pictrieve.vectorstore.tiles import TileIndex

    gallery = Gallery.open(chroma_server, tiny_clip_embedder)
    assert gallery.count() == 0 and gallery.ids() == [] and gallery.embeddings().shape[0] == 0
    assert gallery.embedder_names == [] and gallery.default_embedder is None and gallery.get_json("x") is None
    assert gallery.sync(dry_run=True) == [] and len(gallery.plan_index(photo_folder).todo) == 6
    assert not TileIndex(gallery).exists() and TileIndex(gallery).tiled_ids() == set()
    with pytest.raises(EmptyGalleryError):
        gallery.search_text("a red square")
    with pytest.raises(EmptyGalleryError):
        Gallery.open(chroma_server, tiny_clip_embedder, create=False)
    assert chroma_client(gallery).list_collections() == []

    gallery.add(photo_folder / "a", progress=False)
    names = {c.name for c in chroma_client(gallery).list_collections()}
    other = Gallery.open(chroma_server, create=False).with_embedder("open_clip:never-indexed/random")
    with pytest.raises(EmptyGalleryError):
        chroma_collection(other)  # noqa: B018 - the property is the read under test
    assert other.count() == 0 and {c.name for c in chroma_client(gallery).list_collections()} == names


def test_a_plan_written_by_another_process_stores_what_add_stores(chroma_server, photo_folder, tiny_clip_embedder,
                                                                  tmp_path):
    """What a distributed index does: the driver plans and creates the collection, a worker process
    holding only the server's address and the embedder's name writes precomputed vectors, and the
    gallery then holds what Gallery.add stores; planning again finds every file unchanged."""
    import json

    import numpy as np

    from pictrieve.vectorstore.indexing import list_images, prepare_file, start_index

    name = tiny_clip_embedder.name
    driver = Gallery.open(chroma_server, tiny_clip_embedder)
    with driver.writing():
        plan = start_index([driver], list_images(photo_folder))
    driver.create()
    prepared = [prepare_file(f, {name: tiny_clip_embedder}) for f in plan.todo]
    np.save(tmp_path / "vectors.npy", tiny_clip_embedder.embed_preprocessed([p.inputs[name] for p in prepared]))
    (tmp_path / "records.json").write_text(json.dumps({"ids": [p.id for p in prepared],
                                                       "metadatas": [p.metadata for p in prepared]}))
    worker = (
        "import json, sys, numpy as np\n"
        "from pictrieve.vectorstore.gallery import Gallery\n"
        "location, name, folder = sys.argv[1:]\n"
        "records = json.load(open(folder + '/records.json'))\n"
        "view = Gallery.open(location, name, create=False)\n"
        "print(view.upsert(records['ids'], np.load(folder + '/vectors.npy'), records['metadatas']))\n"
    )
    done = subprocess.run([sys.executable, "-c", worker, chroma_server, name, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "6", done.stderr

    replanned = Gallery.open(chroma_server, create=False).plan_index(photo_folder)
    assert replanned.todo == [] and replanned.unchanged == 6 and driver.default_embedder == name
    reference = Gallery.open(tmp_path / "reference", tiny_clip_embedder)
    reference.add(photo_folder, progress=False)
    ids = sorted(reference.ids())
    np.testing.assert_allclose(driver.embeddings(ids), reference.embeddings(ids), atol=1e-5)
    assert [item.metadata for item in driver.get(ids)] == [item.metadata for item in reference.get(ids)]


def test_a_server_gallery_filters_as_the_reference_store_does(chroma_server, tiny_clip_embedder):
    """A ``chroma run`` server has no filter columns: Chroma's ``where`` keeps what it can say (dates widened to any
    clock's offset, ``near``'s box) and :meth:`PhotoFilter.accepts` decides the rest (text by word and case aside,
    the photo's own calendar day) on the candidates. It answers what the in-memory reference store answers, for
    searches and for :func:`explain_filter`."""
    import datetime as dt

    import numpy as np

    from pictrieve.vectorstore.filter_explain import explain_filter
    from pictrieve.vectorstore.memory_store import MemoryStore
    from pictrieve.vectorstore.photo_filter import PhotoFilter

    rng = np.random.default_rng(4)
    places = [("Lisbon", "Lisbon", "PT"), ("Porto", "Porto", "PT"), ("Tokyo", "Tokyo", "JP")]
    cameras = [("Apple", "iPhone 13 Pro", "Apple iPhone 13 Pro"), ("Google", "Pixel 7", "Google Pixel 7")]
    metadatas = []
    for i in range(60):
        offset = dt.timezone(dt.timedelta(hours=int(rng.choice([-8, 0, 1, 9]))))
        when = dt.datetime(2023, 6, 12, tzinfo=dt.timezone.utc).astimezone(offset) + dt.timedelta(hours=int(i) - 20)
        city, region, country = places[i % 3]
        make, model, camera = cameras[i % 2]
        metadatas.append({"path": f"/photos/{city.lower()}/p{i}.jpg", "folder": f"/photos/{city.lower()}",
                          "taken_at": when.isoformat(), "taken_at_ts": int(when.timestamp()),
                          "taken_at_source": "file" if i % 7 == 0 else "exif", "place_city": city,
                          "place_region": region, "place_country": country, "place": f"{city}, {region}, {country}",
                          "camera_make": make, "camera_model": model, "camera": camera})
    vectors = rng.normal(size=(60, tiny_clip_embedder.dim)).astype(np.float32)
    server, memory = Gallery.open(chroma_server, tiny_clip_embedder), MemoryStore(tiny_clip_embedder)
    for store in (server, memory):
        store.upsert([f"p{i}" for i in range(60)], vectors, metadatas)
    query = rng.normal(size=tiny_clip_embedder.dim).astype(np.float32)
    for options in ({"place": "portugal"}, {"place": "tok"}, {"camera": "iphone"}, {"folder": "PORTO"},
                    {"after": "2023-06-12", "before": "2023-06-13"},
                    {"after": "2023-06-12", "before": "2023-06-13", "exif_dates_only": True, "camera": "pixel 7"},
                    {"place": "lisbon", "camera": "pixel"}, {"place": "paris"}):
        where = PhotoFilter.parse(**options)
        expected = [hit.id for hit in memory.search_vector(query, k=8, where=where)]
        assert [hit.id for hit in server.search_vector(query, k=8, where=where)] == expected, options
        assert explain_filter(server, where) == explain_filter(memory, where), options
    assert explain_filter(server, PhotoFilter(place="paris")).message.startswith("0 photos pass place 'paris'; "
                                                                                 "places here: Lisbon PT (20)")
