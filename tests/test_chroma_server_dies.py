"""A `chroma run` server that dies during local indexing (issue 28.7): one line naming the server and
saying that a re-run resumes, never an HTTP client's traceback."""

from __future__ import annotations

import subprocess

import pytest

from helpers import make_photo
from helpers.chroma import chroma_executable, start_chroma
from helpers.cli import CLI
from helpers.held_index import held_after_first_write
from helpers.mcp import server_env

pytestmark = [pytest.mark.slow, pytest.mark.server]


def test_a_server_killed_mid_index_is_one_line_that_says_a_rerun_resumes(tmp_path, tiny_clip_name):
    import chromadb

    photos = tmp_path / "photos"
    for i in range(400):
        make_photo(photos / f"p{i:03d}.png", seed=i, size=(32, 32))
    server, url = start_chroma(chroma_executable(), tmp_path / "chroma")
    hold = held_after_first_write(tmp_path, server_env())  # the server dies between two writes of the run
    indexing = subprocess.Popen([*CLI, "index", str(photos), "--gallery", url, "-e", tiny_clip_name,
                                 "--batch-size", "1"], env=hold.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        hold.wait_for_the_first_write(indexing)
        port = int(url.rsplit(":", 1)[1])
        client = chromadb.HttpClient(host="127.0.0.1", port=port)
        assert any(c.name.startswith("images__") and client.get_collection(c.name).count() > 0
                   for c in client.list_collections())
    finally:
        server.kill()
        server.wait(30)
        hold.let_go()
    _out, err = indexing.communicate(timeout=300)
    assert indexing.returncode == 2, err
    assert "Traceback" not in err, err
    (line,) = [line[line.index("error:"):] for line in err.splitlines() if "error:" in line]  # after the bar's last state
    assert url in line and "re-run" in line and "resumes" in line, line


def test_a_search_after_the_server_died_is_a_gallery_error_naming_it(tmp_path, tiny_clip_embedder):
    """Issue 29: what Chroma's HTTP client raises reaches no caller; a read of a gone server is one
    :class:`GalleryUnreachableError` naming it (what the CLI, the page and MCP turn into one line)."""
    import numpy as np

    from pictrieve.vectorstore.errors import GalleryUnreachableError
    from pictrieve.vectorstore.gallery import Gallery

    server, url = start_chroma(chroma_executable(), tmp_path / "chroma")
    try:
        gallery = Gallery.open(url, tiny_clip_embedder)
        vectors = np.eye(2, tiny_clip_embedder.dim, dtype=np.float32)
        gallery.upsert(["a", "b"], vectors, [{"path": "/x/a.jpg"}, {"path": "/x/b.jpg"}])
        assert gallery.search_vector(vectors[0], k=1)[0].id == "a"
    finally:
        server.kill()
        server.wait(30)
    for read in (lambda: gallery.search_vector(vectors[0], k=1), lambda: gallery.get(["a"]), gallery.count):
        with pytest.raises(GalleryUnreachableError, match=url) as caught:
            read()
        assert caught.value.__cause__ is not None and caught.value.location == url
