"""A gallery on read-only storage (issue 38, item 5): `search` (plain, hybrid, filtered), `info`, `duplicates`,
`sync --dry-run`, `pictrieve mcp` and `pictrieve ui` work and leave the folder byte-identical; `index` and `sync`
are refused in one line. Chroma cannot open a database it may not write, so these read a private copy of the
gallery's files in the user's cache (vectorstore/readonly_copy.py), copied again when the gallery changes.

Read-only for real, two ways: a read-only bind mount in a mount namespace of the command's own (``unshare
--mount``: EROFS, as on a read-only disk or share), and ``chmod -R a-w`` with root's file-permission override
dropped (``setpriv``: EACCES, as for another user's gallery). Root ignores file modes, so ``chmod`` alone would
test nothing. Galleries are real Chroma with the tiny random CLIP model; the commands are real processes."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from helpers import free_port, make_photo, stop_process
from helpers.cli import CLI, one_clear_line, run
from helpers.mcp import server_env

def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: mode, size, mtime and a file's bytes (as in test_opening_never_writes)."""
    state = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        state[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns,
                                              path.read_bytes() if path.is_file() else None)
    return state


def _works(prefix: list[str], folder: Path) -> bool:
    """Whether ``touch`` under ``prefix`` is refused in ``folder`` (the prefix really makes it read-only)."""
    probe = subprocess.run([*prefix, "touch", str(folder / "probe")], capture_output=True, text=True)
    (folder / "probe").unlink(missing_ok=True)
    return probe.returncode != 0


def read_only_mount(folder: Path) -> list[str]:
    """A command prefix that runs the command with ``folder`` bind-mounted read-only over itself, in a mount
    namespace of its own (nothing outside the command sees the mount)."""
    return ["unshare", "--mount", "sh", "-c", f'mount --bind -o ro "{folder}" "{folder}" && exec "$@"', "sh"]


def without_root_override() -> list[str]:
    """A command prefix under which file modes bind root too."""
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


@pytest.fixture(params=["read-only mount", "chmod a-w"])
def read_only(request, tmp_path, tiny_clip_name):
    """``(gallery folder, photos folder, prefix)``: a gallery of four photos that the commands run with
    ``prefix`` cannot write."""
    photos, gallery = tmp_path / "photos", tmp_path / "gallery"
    for i in range(4):
        make_photo(photos / f"lisbon_{i}.png", seed=i)
    indexed = run("index", str(photos), "--gallery", str(gallery), "-e", tiny_clip_name)
    assert indexed.returncode == 0, indexed.stderr
    if request.param == "read-only mount":
        if os.geteuid() != 0 or not shutil.which("unshare"):
            pytest.skip("a read-only bind mount needs root and unshare")
        prefix = read_only_mount(gallery)
    else:
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            pytest.skip("root without setpriv: file modes would not bind")
        prefix = without_root_override()
        for path in [gallery, *gallery.rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    if not _works(prefix, gallery):
        pytest.skip(f"{request.param} did not make the folder read-only here")
    yield gallery, photos, prefix
    for path in [gallery, *gallery.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.slow
def test_the_commands_that_read_work_and_write_nothing(read_only, tiny_clip_name):
    from pictrieve.tools.core.pypi_assets import cache_root

    gallery, photos, prefix = read_only
    before = tree_state(gallery)
    for command in [("search", "lisbon", "-e", tiny_clip_name, "-k", "3"),
                    ("search", "lisbon", "-e", tiny_clip_name, "-k", "3", "--no-hybrid"),
                    ("search", "lisbon", "-e", tiny_clip_name, "-k", "3", "--folder", str(photos))]:
        done = run(*command, "--gallery", str(gallery), prefix=prefix)
        assert done.returncode == 0, (command, done.stderr)
        assert len(done.stdout.splitlines()) == 3 and "lisbon_" in done.stdout, (command, done.stdout)
        assert "readonly database" not in done.stderr
    info = run("info", "--gallery", str(gallery), prefix=prefix)
    assert info.returncode == 0 and "4 images" in info.stdout, info.stderr
    duplicates = run("duplicates", "--gallery", str(gallery), prefix=prefix)
    assert duplicates.returncode == 0 and "among 4 photos" in duplicates.stdout, duplicates.stderr
    (photos / "lisbon_0.png").rename(photos.parent / "moved.png")
    dry = run("sync", "--dry-run", "--gallery", str(gallery), prefix=prefix)
    assert dry.returncode == 0 and "would remove 1 images" in dry.stdout, dry.stderr
    assert tree_state(gallery) == before  # byte for byte: nothing of Chroma's or pictrieve's was written
    assert list((cache_root() / "readonly-galleries").rglob("chroma.sqlite3"))  # what was read instead

    # Writing is refused in one line that says what to do, and writes nothing either.
    for command in [("sync", "--yes"), ("index", str(photos), "-e", tiny_clip_name)]:
        refused = run(*command, "--gallery", str(gallery), prefix=prefix)
        line = one_clear_line(refused)
        assert refused.returncode == 2 and f"cannot use gallery folder {gallery} to write: it is read-only" in line, (command, line)
        assert "cp -r" in line, line
    assert tree_state(gallery) == before


@pytest.mark.slow
def test_the_private_copy_follows_the_gallery(read_only, tiny_clip_name):
    """Its owner indexes another photo (the folder writable for them): the next read-only search sees it."""
    gallery, photos, prefix = read_only
    assert "4 images" in run("info", "--gallery", str(gallery), prefix=prefix).stdout
    for path in [gallery, *gallery.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    make_photo(photos / "porto.png", seed=9)
    assert run("index", str(photos), "--gallery", str(gallery), "-e", tiny_clip_name).returncode == 0
    if "setpriv" in prefix:
        for path in [gallery, *gallery.rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    assert "5 images" in run("info", "--gallery", str(gallery), prefix=prefix).stdout
    found = run("search", "porto", "-e", tiny_clip_name, "-k", "1", "--json", "--gallery", str(gallery), prefix=prefix)
    assert found.returncode == 0, found.stderr
    assert "porto.png" in found.stdout


@pytest.mark.slow
def test_mcp_and_the_page_search_a_read_only_gallery(read_only, tiny_clip_name):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    gallery, photos, prefix = read_only
    before = tree_state(gallery)

    async def mcp_searches() -> None:
        command = [*prefix, *CLI, "mcp", "--gallery", str(gallery), "-e", tiny_clip_name]
        params = StdioServerParameters(command=command[0], args=command[1:], env=server_env())
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for arguments in ({"query": "lisbon"}, {"query": "lisbon", "folder": str(photos.resolve())}):
                found = await session.call_tool("search_images", {**arguments, "k": 2})
                assert not found.isError and len(found.structuredContent["hits"]) == 2, found.content
            groups = await session.call_tool("find_duplicates", {})
            assert not groups.isError, groups.content

    asyncio.run(mcp_searches())
    assert tree_state(gallery) == before

    port = free_port()
    page = subprocess.Popen([*prefix, *CLI, "ui", "--gallery", str(gallery), "-e", tiny_clip_name, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=server_env())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert page.poll() is None and time.time() < deadline, page.stdout.read() if page.poll() is not None else "slow"
                time.sleep(0.5)
        headers = {"Origin": url}
        found = httpx.post(f"{url}/api/search", json={"query": "lisbon", "k": 3}, headers=headers, timeout=120)
        assert found.status_code == 200 and len(found.json()["hits"]) == 3, found.text
        listed = httpx.get(f"{url}/api/duplicates", headers=headers, timeout=120)
        assert listed.status_code == 200, listed.text
    finally:
        stop_process(page)
    assert tree_state(gallery) == before


def test_a_private_copy_is_made_once_per_state_of_the_gallery(tmp_path, monkeypatch, caplog):
    """Copied on first use, reused while the files stay the same, copied again (beside the older copy, which a
    running reader may still hold) when one changes; pictrieve's own lock and counter files are not copied."""
    from pictrieve.vectorstore.readonly_copy import copies_of, private_copy

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    gallery = tmp_path / "gallery"
    (gallery / "segment").mkdir(parents=True)
    (gallery / "chroma.sqlite3").write_bytes(b"database")
    (gallery / "segment" / "header.bin").write_bytes(b"header")
    (gallery / ".pictrieve-generation").write_text("1\n")
    first = private_copy(gallery)
    assert first.parent == copies_of(gallery) and (first / "segment" / "header.bin").read_bytes() == b"header"
    assert not (first / ".pictrieve-generation").exists()
    (first / "chroma.sqlite3").write_bytes(b"what Chroma rewrites in the copy")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert private_copy(gallery) == first  # the gallery did not change: not copied again, nothing said
    assert not caplog.records and (first / "chroma.sqlite3").read_bytes() == b"what Chroma rewrites in the copy"
    (gallery / "segment" / "header.bin").write_bytes(b"header, rewritten")
    second = private_copy(gallery)
    assert second != first and (second / "segment" / "header.bin").read_bytes() == b"header, rewritten"
    assert (second / "chroma.sqlite3").read_bytes() == b"database" and first.is_dir()
