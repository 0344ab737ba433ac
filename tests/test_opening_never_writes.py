"""Opening never writes (issue 27): a folder that holds no gallery is refused in one line by every
command and server, before Chroma is built, and stays byte-identical (contents, modes and mtimes);
a folder that does not exist is refused the same way and is not created. Only indexing creates."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from helpers import langgraph_dev
from helpers.cli import CLI, one_clear_line, refused_at_the_start, run
from helpers.mcp import server_env, stdio_session


def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (itself included): type, mode, size, mtime and a file's content hash."""
    state = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        state[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return state


@pytest.fixture
def not_a_gallery(tmp_path) -> Path:
    """A folder with a few files and a subfolder, none of them a gallery's."""
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "todo.txt").write_text("buy film\n")
    (folder / "sub" / "data.bin").write_bytes(os.urandom(256))
    past = 1_600_000_000
    for path in [folder / "todo.txt", folder / "sub" / "data.bin", folder / "sub", folder]:
        os.utime(path, (past, past))  # old mtimes: a write today would show
    return folder


COMMANDS = [
    ("search", "a dog"), ("info",), ("sync",), ("chat", "a dog"), ("quality", "search", "a dog"), ("tile",),
    ("ui",), ("mcp",), ("serve",),
]


@pytest.mark.slow
def test_every_command_refuses_a_folder_without_a_gallery_and_writes_nothing(not_a_gallery, tmp_path):
    before = tree_state(not_a_gallery)
    missing = tmp_path / "missing"
    for command in COMMANDS:
        refused = run(*command, "--gallery", str(not_a_gallery))
        line = refused_at_the_start(refused)  # `quality search` says what it opens first, then refuses
        assert f"{not_a_gallery} is not a pictrieve gallery" in line, (command, line)
        assert f"pictrieve index PHOTOS --gallery {not_a_gallery}" in line, (command, line)
        assert tree_state(not_a_gallery) == before, command
        absent = run(*command, "--gallery", str(missing))
        assert "no gallery at" in refused_at_the_start(absent), (command, absent.stderr)
        assert not missing.exists(), command


@pytest.mark.slow
@pytest.mark.server
def test_a_served_run_over_a_folder_without_a_gallery_writes_nothing(not_a_gallery, tmp_path):
    """The served graphs open the operator's gallery read-only: a run over a non-gallery folder fails, and
    the folder is untouched (``pictrieve serve`` refuses it at start; a hand-made langgraph.json reaches here)."""
    before = tree_state(not_a_gallery)
    root = tmp_path / "server"
    root.mkdir()
    process, url = langgraph_dev.serve_repository(root, not_a_gallery)
    try:
        reply = httpx.post(f"{url}/runs/wait", json={"assistant_id": "search", "input": {"query": "a dog"}},
                           timeout=120)
        assert "not a pictrieve gallery" in reply.text, reply.text
    finally:
        langgraph_dev.stop(process)
    assert tree_state(not_a_gallery) == before


def test_the_library_refuses_to_open_a_folder_without_a_gallery_and_writes_nothing(not_a_gallery, tmp_path):
    from pictrieve.vectorstore.gallery import Gallery, gallery_contents
    from pictrieve.vectorstore.errors import NotAGalleryError

    before = tree_state(not_a_gallery)
    with pytest.raises(NotAGalleryError, match="is not a pictrieve gallery"):
        Gallery.open(not_a_gallery, "offline", create=False)
    with pytest.raises(NotAGalleryError):
        gallery_contents(not_a_gallery)
    reader = Gallery.open(not_a_gallery, "offline")  # a write handle-to-be: still writes nothing until a write
    assert reader.count() == 0 and reader.embedder_names == [] and not reader.exists()
    assert tree_state(not_a_gallery) == before
    with pytest.raises(NotAGalleryError, match="no such folder"):
        Gallery.open(tmp_path / "missing", "offline", create=False)
    assert not (tmp_path / "missing").exists()


def test_the_stdio_mcp_server_refuses_before_speaking(not_a_gallery):
    """An MCP client starts `pictrieve mcp` itself: it ends at once with the one line on stderr."""
    before = tree_state(not_a_gallery)
    ended = subprocess.run([*CLI, "mcp", "--gallery", str(not_a_gallery)], capture_output=True, text=True,
                           timeout=300, env=server_env(), input="")
    assert ended.returncode == 2 and ended.stdout == ""
    assert "is not a pictrieve gallery" in one_clear_line(ended)
    assert tree_state(not_a_gallery) == before


@pytest.mark.slow
def test_searching_an_existing_gallery_writes_nothing_into_its_folder(tmp_path, tiny_clip_name):
    """A plain search (hybrid: the keyword index), a filtered one (the filter columns), ``info`` and a search in
    this process add nothing to an existing gallery's folder: the indexes derived from it live in the user's cache
    (``$PICTRIEVE_CACHE``), built there on first use. (The folder is not byte-identical: chromadb 1.x itself
    rewrites its HNSW segment files and touches chroma.sqlite3 when a client opens and queries a collection, as a
    bare ``chromadb.PersistentClient`` query does; pictrieve's own files are what is checked here.)"""
    from pictrieve.tools.core.pypi_assets import cache_root
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.photo_filter import PhotoFilter
    from helpers import make_photo

    photos, location = tmp_path / "photos", tmp_path / "gallery"
    for i in range(4):
        make_photo(photos / f"lisbon_{i}.png", seed=i)
    indexed = run("index", str(photos), "--gallery", str(location), "-e", tiny_clip_name)  # written, closed
    assert indexed.returncode == 0, indexed.stderr
    before = set(tree_state(location))
    for command in [("search", "lisbon", "-e", tiny_clip_name), ("search", "lisbon", "--folder", str(photos), "-e",
                                                                tiny_clip_name), ("info",)]:
        done = run(*command, "--gallery", str(location))
        assert done.returncode == 0, (command, done.stderr)
        assert set(tree_state(location)) == before, command
    assert list((cache_root() / "gallery-indexes").rglob("*.npz"))  # built, in the cache

    async def mcp_searches() -> None:  # a new cache for the server: it builds its indexes again, there
        env = {**server_env(), "PICTRIEVE_CACHE": str(tmp_path / "mcp-cache")}
        async with stdio_session(["--gallery", str(location), "-e", tiny_clip_name], env=env) as session:
            for arguments in ({"query": "lisbon"}, {"query": "lisbon", "folder": str(photos.resolve())}):
                found = await session.call_tool("search_images", {**arguments, "k": 2})
                assert not found.isError and len(found.structuredContent["hits"]) == 2, found.content

    asyncio.run(mcp_searches())
    assert set(tree_state(location)) == before
    assert list((tmp_path / "mcp-cache" / "gallery-indexes").rglob("*.npz"))
    reader = Gallery.open(location, tiny_clip_name, create=False)
    assert len(reader.search_text("lisbon", k=2, where=PhotoFilter(folder=str(photos.resolve())), hybrid=True)) == 2
    assert set(tree_state(location)) == before
