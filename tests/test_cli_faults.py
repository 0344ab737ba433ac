"""The command line under bad input and faults (issue: tried as a new user would). Real processes.

Permission cases drop root's override (``setpriv --bounding-set=-dac_override,-dac_read_search``):
as root, ``chmod 0`` stops nothing, so without it these tests would pass for the wrong reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import make_photo
from helpers.cli import CLI, one_clear_line, run
from helpers.held_index import held_after_first_write


@pytest.fixture(scope="module")
def unprivileged() -> list[str]:
    """A command prefix under which file modes are enforced (empty when not root)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("root without setpriv: cannot test permission errors")
    probe = Path(f"/tmp/pictrieve-probe-{os.getpid()}")
    probe.write_text("x")
    probe.chmod(0)
    try:
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
        if subprocess.run([*prefix, "cat", str(probe)], capture_output=True).returncode == 0:
            pytest.skip("setpriv did not drop root's file-permission override here")
        return prefix
    finally:
        probe.unlink()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_clip_name):
    """A gallery of six photos built once for the search tests."""
    root = tmp_path_factory.mktemp("indexed")
    for i in range(6):
        make_photo(root / "photos" / f"{i}.png", seed=i)
    result = run("index", str(root / "photos"), "-g", str(root / "g"), "-e", tiny_clip_name)
    assert result.returncode == 0, result.stderr
    return root


# ---------------------------------------------------------------- 1, 5: queries and k


def test_blank_queries_and_bad_k_are_one_line_usage_errors(indexed):
    gallery = str(indexed / "g")
    blank = run("search", "   ", "-g", gallery)
    assert blank.returncode == 2 and "Traceback" not in blank.stderr and "QUERY is empty" in blank.stderr
    empty = run("search", "", "-g", gallery)
    assert empty.returncode == 2 and "QUERY is empty" in empty.stderr and "not both" not in empty.stderr
    for k in ("0", "-1"):
        bad = run("search", "a dog", "-g", gallery, "-k", k)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr and "-k" in bad.stderr and not bad.stdout


# ---------------------------------------------------------------- 2, 7: what the folder walk meets


def test_symlink_loops_dangling_links_and_symlinked_folders(tmp_path, tiny_clip_name):
    photos = tmp_path / "photos"
    make_photo(photos / "good.png", seed=1)
    (photos / "a.jpg").symlink_to(photos / "b.jpg")
    (photos / "b.jpg").symlink_to(photos / "a.jpg")
    (photos / "dangling.png").symlink_to(tmp_path / "elsewhere" / "gone.png")
    make_photo(tmp_path / "trip" / "beach.png", seed=2)
    (photos / "trip").symlink_to(tmp_path / "trip", target_is_directory=True)
    (tmp_path / "trip" / "loop").symlink_to(tmp_path / "trip", target_is_directory=True)
    result = run("index", str(photos), "-g", str(tmp_path / "g"), "-e", tiny_clip_name, "--json")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 2  # good.png and trip/beach.png, once despite the loop
    failed = {Path(f["path"]).name: f["error"] for f in report["failed"]}
    assert set(failed) == {"a.jpg", "b.jpg", "dangling.png"}
    assert "symlink loop" in failed["a.jpg"]
    assert str(photos / "dangling.png") in failed["dangling.png"] and "broken symlink" in failed["dangling.png"]


def test_two_sibling_links_to_a_parent_folder_are_walked_once(tmp_path):
    """Each folder is entered once even when two links in one folder both lead back up: without that,
    the walk branches twice per level until the kernel's 40-link limit (2**40 folders), so it would
    never end. One loop alone ends after 40 levels (and resolving paths drops the repeats), which is
    why this needs two. Run in a child process so a regression fails on the time bound, not hangs."""
    photos = tmp_path / "photos"
    make_photo(photos / "top.png", seed=1)
    make_photo(photos / "sub" / "deep.png", seed=2)
    (photos / "sub" / "up1").symlink_to(photos, target_is_directory=True)
    (photos / "sub" / "up2").symlink_to(photos, target_is_directory=True)
    code = ("import sys; from pictrieve.tools.core.images import iter_image_files; "
            "print(*iter_image_files(sys.argv[1]), sep='\\n')")
    try:
        walked = subprocess.run([sys.executable, "-c", code, str(photos)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("walking a folder with two links back to its parent did not end within 60 s")
    assert walked.returncode == 0, walked.stderr
    assert walked.stdout.split() == [str(photos / "top.png"), str(photos / "sub" / "deep.png")]


def test_an_unreadable_subfolder_is_reported(tmp_path, tiny_clip_name, unprivileged):
    photos = tmp_path / "photos"
    make_photo(photos / "ok.png", seed=1)
    make_photo(photos / "private" / "secret.png", seed=2)
    (photos / "private").chmod(0)
    try:
        result = run("index", str(photos), "-g", str(tmp_path / "g"), "-e", tiny_clip_name, "--json",
                     prefix=unprivileged)
    finally:
        (photos / "private").chmod(0o755)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 1 and report["total"] == 2
    assert report["failed"][0]["path"] == str(photos / "private") and "cannot read folder" in report["failed"][0]["error"]


def test_an_unreadable_file_is_reported_and_the_rest_indexed(tmp_path, tiny_clip_name, unprivileged):
    photos = tmp_path / "photos"
    for i in range(3):
        make_photo(photos / f"{i}.png", seed=i)
    (photos / "1.png").chmod(0)
    result = run("index", str(photos), "-g", str(tmp_path / "g"), "-e", tiny_clip_name, "--json", prefix=unprivileged)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 2 and [Path(f["path"]).name for f in report["failed"]] == ["1.png"]


# ---------------------------------------------------------------- 3, 4: unwritable places


def test_a_gallery_in_an_unwritable_folder_is_one_clear_error(tmp_path, tiny_clip_name, unprivileged):
    make_photo(tmp_path / "photos" / "x.png", seed=1)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    result = run("index", str(tmp_path / "photos"), "-g", str(locked / "g"), "-e", tiny_clip_name, prefix=unprivileged)
    assert result.returncode == 2 and "cannot use gallery folder" in one_clear_line(result)

    existing = tmp_path / "existing"
    assert run("index", str(tmp_path / "photos"), "-g", str(existing), "-e", tiny_clip_name).returncode == 0
    make_photo(tmp_path / "photos" / "y.png", seed=2)
    existing.chmod(0o555)
    try:
        again = run("index", str(tmp_path / "photos"), "-g", str(existing), prefix=unprivileged)
    finally:
        existing.chmod(0o755)
    assert again.returncode == 2 and "cannot use gallery folder" in one_clear_line(again)


def test_results_are_printed_before_an_unwritable_contact_sheet_is_reported(indexed, tmp_path, unprivileged):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    result = run("search", "a dog", "-g", str(indexed / "g"), "-k", "2", "--html", str(locked / "out.html"),
                 prefix=unprivileged)
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 2  # the two hits
    assert "could not write the contact sheet" in one_clear_line(result)


# ---------------------------------------------------------------- 6: decompression bombs


def _png_header_only(path: Path, width: int, height: int) -> None:
    """A PNG that declares ``width`` x ``height`` (its pixels never need to exist to be refused)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))


def test_images_above_the_pixel_cap_are_refused_before_decoding(tmp_path, tiny_clip_name):
    photos = tmp_path / "photos"
    make_photo(photos / "ok.png", seed=1)
    _png_header_only(photos / "bomb.png", 24_000, 24_000)  # 576 MP
    result = run("index", str(photos), "-g", str(tmp_path / "g"), "-e", tiny_clip_name, "--json")
    assert result.returncode == 0 and "DecompressionBomb" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 1 and "576 MP is above the cap of 180 MP" in report["failed"][0]["error"]
    assert "--max-pixels" in report["failed"][0]["error"]  # the flag a command-line user has (issue 19.10)

    capped = run("index", str(photos / "ok.png"), "-g", str(tmp_path / "g2"), "-e", tiny_clip_name,
                 "--max-pixels", "1000", "--json")
    assert "above the cap" in json.loads(capped.stdout)["failed"][0]["error"]


def _png_of_zeros(path: Path, width: int, height: int, exif: bytes | None = None, late_exif: bool = False) -> Path:
    """A valid greyscale PNG of zeros (a few hundred KB that decode to ``width * height`` bytes), with an ``eXIf``
    chunk before or after its image data."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(9)
    row = b"\0" * (width + 1)  # filter byte + pixels
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    exif_chunk = chunk(b"eXIf", exif) if exif else b""
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + (b"" if late_exif else exif_chunk) + chunk(b"IDAT", idat) + (exif_chunk if late_exif else b"")
                     + chunk(b"IEND", b""))
    return path


def test_reading_a_photos_header_never_decodes_it(tmp_path, monkeypatch):
    """Orientation, size and dates come from the header: Pillow's PNG plugin decodes the whole picture to look for
    an EXIF chunk after the image data, so a 0.4 MB PNG of 20,000 x 20,000 was decoded (0.6 s, 800 MB) by
    ``read_photo_metadata`` on every index, before the pixel cap was ever checked. A late EXIF chunk is still read."""
    from PIL import Image, PngImagePlugin

    from pictrieve.tools.core.images import ImageDecodeError, load_image
    from pictrieve.tools.core.photo_metadata import read_photo_metadata

    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: turned
    bomb = _png_of_zeros(tmp_path / "bomb.png", 15_000, 15_000)  # 225 MP, above the 180 MP cap
    early = _png_of_zeros(tmp_path / "early.png", 40, 20, exif.tobytes())
    late = _png_of_zeros(tmp_path / "late.png", 40, 20, exif.tobytes(), late_exif=True)
    raw = tmp_path / "raw-profile.png"  # EXIF as ImageMagick writes it into a PNG: hex in a compressed text chunk
    exif[0x0132] = "2019:05:06 07:08:09"  # DateTime
    block = b"Exif\x00\x00" + exif.tobytes()
    text = PngImagePlugin.PngInfo()
    text.add_text("Raw profile type exif", f"\nexif\n{len(block)}\n{block.hex()}", zip=True)
    Image.new("RGB", (40, 20), "red").save(raw, pnginfo=text)
    assert bomb.stat().st_size < 400_000

    def no_decoding(image, *args, **kwargs):
        raise AssertionError(f"{image.filename} decoded while reading its header")

    with monkeypatch.context() as patched:
        patched.setattr(PngImagePlugin.PngImageFile, "load", no_decoding)
        read = read_photo_metadata(bomb)
        assert read.fields["width"] == 15_000 and read.notes == []
        for photo in (early, late, raw):
            read = read_photo_metadata(photo)
            assert (read.fields["orientation"], read.fields["width"], read.fields["height"]) == (6, 20, 40), photo
            assert read.notes == []
        assert read.fields["taken_at"].startswith("2019-05-06T07:08:09")  # the photo's own date, not the file's
    with pytest.raises(ImageDecodeError, match="225 MP is above the cap"):
        load_image(bomb)
    assert load_image(late).size == (20, 40)  # the loader turns it by the late chunk too


def test_the_pixel_cap_is_per_call_and_bounds_memory(tmp_path):
    from PIL import Image

    from pictrieve.tools.core.images import ImageDecodeError, load_image

    big = tmp_path / "big.jpg"
    Image.new("RGB", (4000, 3000), (200, 10, 10)).save(big, quality=80)
    with pytest.raises(ImageDecodeError, match="above the cap of 0 MP"):
        load_image(big, max_pixels=100)
    assert load_image(big).size == (4000, 3000)
    assert load_image(big, draft_size=(1024, 1024)).size == (1000, 750) or load_image(
        big, draft_size=(1024, 1024)).size[0] < 4000  # JPEG draft decoding at a reduced scale


# ---------------------------------------------------------------- 8: sync


def test_the_command_line_hint_names_the_gallery_the_error_is_about(tmp_path):
    """A refusal's hint is a command to copy: it names the gallery (quoted for the shell), and says
    GALLERY only where the error does not know which."""
    from pictrieve.cli.errors import error_line
    from pictrieve.vectorstore.gallery import gallery_contents
    from pictrieve.vectorstore.errors import GalleryError, MissingFoldersError
    from pictrieve.vectorstore.syncing import check_removal

    location = str(tmp_path / "my photos.gallery")
    with pytest.raises(MissingFoldersError) as refused:
        check_removal([str(tmp_path / "gone" / "a.jpg")], 10, location=location)
    line = error_line(refused.value)
    assert f"pictrieve sync --gallery '{location}' --dry-run" in line and "GALLERY" not in line
    assert "allow_missing_folders=True" not in line  # the Python advice is replaced by the flag

    with pytest.raises(GalleryError) as missing:
        gallery_contents(location)  # what `pictrieve info` reads
    assert f"pictrieve index PHOTOS --gallery '{location}'" in error_line(missing.value)
    assert "--gallery GALLERY" in error_line(GalleryError("no gallery at somewhere"))


def test_sync_refuses_a_missing_folder_previews_lists_and_asks(tmp_path, tiny_clip_name):
    photos = tmp_path / "drive" / "photos"
    for i in range(5):
        make_photo(photos / f"{i}.png", seed=i)
    gallery = str(tmp_path / "g")
    assert run("index", str(photos), "-g", gallery, "-e", tiny_clip_name).returncode == 0

    photos.rename(tmp_path / "drive" / "moved")  # the drive is unplugged
    refused = run("sync", "-g", gallery)
    assert refused.returncode != 0 and str(photos) in refused.stderr and "nothing removed" in refused.stderr
    assert f"pictrieve sync --gallery {gallery} --dry-run" in refused.stderr  # the hint names this gallery
    preview = json.loads(run("sync", "-g", gallery, "--dry-run", "--json").stdout)
    assert preview["dry_run"] and len(preview["removed"]) == 5
    listed = run("sync", "-g", gallery, "--dry-run")  # says that the real sync will refuse
    assert "would remove 5" in listed.stdout and str(photos) in listed.stderr and "refuses" in listed.stderr
    assert run("info", "-g", gallery, "--json").stdout.count('"images": 5') == 1

    (tmp_path / "drive" / "moved").rename(photos)
    (photos / "0.png").unlink()
    (photos / "1.png").unlink()
    asked = run("sync", "-g", gallery)  # 2 of 5 is a large share; stdin is not a terminal
    assert asked.returncode != 0 and "--yes" in asked.stderr
    done = run("sync", "-g", gallery, "--yes")
    assert done.returncode == 0 and str(photos / "0.png") in done.stdout and "removed 2 images" in done.stdout


def test_index_with_sync_is_guarded_like_sync_when_a_folder_is_unplugged(tmp_path, tiny_clip_name):
    """Issue 19.1: `index A --sync` while folder B of the same gallery is unplugged deleted all of B."""
    drive = tmp_path / "drive"
    for i in range(4):
        make_photo(drive / "A" / f"{i}.png", seed=i)
    for i in range(4, 10):
        make_photo(drive / "B" / f"{i}.png", seed=i)
    gallery = str(tmp_path / "g")
    assert run("index", str(drive / "A"), str(drive / "B"), "-g", gallery, "-e", tiny_clip_name).returncode == 0
    (drive / "B").rename(drive / "B-unplugged")

    refused = run("index", str(drive / "A"), "-g", gallery, "--sync")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert str(drive / "B") in refused.stderr and "nothing removed" in refused.stderr
    assert "unchanged 4" in refused.stdout  # what was indexed is still reported
    assert "Gallery.open" not in refused.stderr and "allow_missing_folders" not in refused.stderr
    assert run("info", "-g", gallery, "--json").stdout.count('"images": 10') == 1
    also_refused = run("sync", "-g", gallery)
    assert also_refused.returncode != 0 and "nothing removed" in also_refused.stderr

    large = run("index", str(drive / "A"), "-g", gallery, "--sync", "--allow-missing-folders")
    assert large.returncode != 0 and "--yes" in large.stderr  # 6 of 10 is more than a fifth
    assert run("info", "-g", gallery, "--json").stdout.count('"images": 10') == 1
    done = run("index", str(drive / "A"), "-g", gallery, "--sync", "--allow-missing-folders", "--yes", "--json")
    assert done.returncode == 0 and len(json.loads(done.stdout)["removed"]) == 6
    assert run("info", "-g", gallery, "--json").stdout.count('"images": 4') == 1


def test_index_with_sync_drops_deleted_files(tmp_path, photo_folder, tiny_clip_name):
    gallery = str(tmp_path / "g")
    assert run("index", str(photo_folder), "-g", gallery, "-e", tiny_clip_name).returncode == 0
    (photo_folder / "a" / "img2.png").unlink()
    report = json.loads(run("index", str(photo_folder), "-g", gallery, "--sync", "--json").stdout)
    assert report["removed"] == [str(photo_folder / "a" / "img2.png")] and report["unchanged"] == 5


# ---------------------------------------------------------------- a torch/torchvision mismatch

BROKEN_TORCHVISION = """
import sys


class BrokenTorchvision:
    \"\"\"`import torchvision` fails as it does next to a torch it was not built for.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            raise RuntimeError("operator torchvision::nms does not exist")
        return None


sys.meta_path.insert(0, BrokenTorchvision())
"""


def test_a_torchvision_built_for_another_torch_is_one_line_naming_both(tmp_path, photo_folder, tiny_clip_name):
    """Issue 19.10: the README's CPU-only torch beside an incompatible torchvision ended in a 40-line
    traceback ending `operator torchvision::nms does not exist`."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BROKEN_TORCHVISION)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    # --runtime torch: with the tower already exported (the session's shared ONNX cache), indexing would not import
    # torch or torchvision at all, and there would be nothing to refuse
    result = subprocess.run([*CLI, "index", str(photo_folder), "-g", str(tmp_path / "g"), "-e", tiny_clip_name,
                             "--runtime", "torch"], capture_output=True, text=True, timeout=600, env=env)
    line = one_clear_line(result)
    assert result.returncode == 2 and line.startswith("error: torchvision ")
    assert "torch " in line and "torchvision::nms" in line and "pip install --force-reinstall torch torchvision" in line


# ---------------------------------------------------------------- 9: failed index leaves nothing


def test_a_failed_index_leaves_no_gallery_behind(tmp_path, tiny_clip_name):
    make_photo(tmp_path / "photos" / "x.png", seed=1)
    missing = run("index", str(tmp_path / "nope"), "-g", str(tmp_path / "g1"), "-e", tiny_clip_name)
    unknown = run("index", str(tmp_path / "photos"), "-g", str(tmp_path / "g2"), "-e", "clipz")
    unloadable = run("index", str(tmp_path / "photos"), "-g", str(tmp_path / "g3"),
                     "-e", "open_clip:ViT-B-32/no-such-pretrained-tag")
    for result in (missing, unknown, unloadable):
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert not any((tmp_path / name).exists() for name in ("g1", "g2", "g3"))


def test_info_on_a_missing_and_an_empty_gallery(tmp_path):
    (tmp_path / "empty").mkdir()
    empty = run("info", "-g", str(tmp_path / "empty"))  # a folder without a gallery: refused, nothing written (issue 27)
    assert empty.returncode == 2 and "is not a pictrieve gallery" in one_clear_line(empty)
    assert list((tmp_path / "empty").iterdir()) == []
    missing = run("info", "-g", str(tmp_path / "none"))
    assert missing.returncode == 2 and "no gallery at" in one_clear_line(missing)
    searched = one_clear_line(run("search", "a dog", "-g", str(tmp_path / "none")))
    # the command-line advice, not the Python call (issue 19.10)
    assert "no gallery at" in searched and "pictrieve index" in searched and "Gallery.open" not in searched


# ---------------------------------------------------------------- 13, 14: the HTML page


def test_html_honours_the_umask_and_reads_well(tmp_path, photo_folder):
    from pictrieve.vectorstore.contact_sheet import render_contact_sheet, write_contact_sheet
    from pictrieve.vectorstore.hits import ImageHit

    hit = ImageHit(id="x", path=str(photo_folder / "a" / "img0.png"), score=0.5, rank=1)
    old = os.umask(0o022)
    try:
        sheet = write_contact_sheet([hit], tmp_path / "out.html", title="one search")
    finally:
        os.umask(old)
    assert sheet.stat().st_mode & 0o777 == 0o644
    page = sheet.read_text()
    assert page.count("one search") == 2  # <title> and <h1>, not a repeated <h2>
    assert "break-all" not in page and "/<wbr>img0.png" in page
    two = render_contact_sheet([("a", [hit]), ("b", [hit])], "demo")
    assert two.count("<h2>") == 2


def test_the_query_in_the_page_headings_is_escaped(photo_folder):
    """The query becomes the page's title, <h1> and (with several searches) each <h2>: markup in it is
    shown as text, never run."""
    from pictrieve.vectorstore.contact_sheet import render_contact_sheet
    from pictrieve.vectorstore.hits import ImageHit

    hit = ImageHit(id="x", path=str(photo_folder / "a" / "img0.png"), score=0.5, rank=1)
    query = "<script>alert(1)</script> dogs & <b>cats</b>"
    single = render_contact_sheet([(query, [hit])], query)
    rounds = render_contact_sheet([(query, [hit]), ("round 2: " + query, [hit])], "<i>session</i>")
    for page in (single, rounds):
        assert "<script>" not in page and "<b>" not in page and "<i>session" not in page
    assert single.count("&lt;script&gt;alert(1)&lt;/script&gt; dogs &amp; &lt;b&gt;cats&lt;/b&gt;") == 2
    assert "<h1>&lt;i&gt;session&lt;/i&gt;</h1>" in rounds and rounds.count("<h2>") == 2


def test_the_demo_folder_is_ignored_by_git():
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(["git", "check-ignore", "-q", "pictrieve-demo/results.html"], cwd=root)
    assert result.returncode == 0


# ---------------------------------------------------------------- 16: concurrency and kill -9


def test_two_writers_and_a_kill_lose_and_duplicate_nothing(tmp_path, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.chroma_store import path_id

    photos = tmp_path / "photos"
    for i in range(40):
        make_photo(photos / f"{i:02d}.png", seed=i)
    gallery = str(tmp_path / "g")
    args = [*CLI, "index", str(photos), "-g", gallery, "-e", tiny_clip_name, "--batch-size", "2", "--workers", "1"]

    # kill -9 in the middle of a run: held after its first write of 4 photos, 36 to go
    log = tmp_path / "first.log"
    hold = held_after_first_write(tmp_path, dict(os.environ), write_rows=4)
    with open(log, "w") as stderr:
        victim = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr, env=hold.env)
        try:
            hold.wait_for_the_first_write(victim)
        finally:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
    assert victim.returncode == -signal.SIGKILL, log.read_text()
    assert 4 <= Gallery.open(gallery, create=False).count() < 40  # some written, the rest left for the resumed runs

    # two writers at once, then both finish
    both = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = [process.communicate(timeout=600) for process in both]
    assert all(process.returncode == 0 for process in both), outcomes

    store = Gallery.open(gallery, create=False)
    expected = sorted(path_id(p) for p in photos.iterdir())
    assert store.count() == 40 and sorted(store.ids()) == expected
    for path in sorted(photos.iterdir())[::7]:  # the vector index agrees with the records
        assert store.search_image(path, k=1)[0].path == str(path)


def test_a_second_writer_waits_for_the_gallery_lock(tmp_path, tiny_clip_embedder):
    """While another process holds an embedded gallery's write lock, `index` waits (saying so) and
    writes nothing; it finishes once the lock is free. The lock is released as soon as the waiting
    process says it waits: from then on it is in the lock's retry loop, and the count shows that
    nothing was written before it got there."""
    import fcntl

    from pictrieve.vectorstore.chroma_store import LOCK_FILE
    from pictrieve.vectorstore.gallery import Gallery

    make_photo(tmp_path / "photos" / "x.png", seed=1)
    gallery = tmp_path / "g"
    Gallery.open(gallery, tiny_clip_embedder).add(tmp_path / "photos", progress=False)  # the default embedder
    make_photo(tmp_path / "photos" / "y.png", seed=2)
    log = tmp_path / "waiting.log"
    with open(gallery / LOCK_FILE, "a+") as held, open(log, "w") as stderr:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = subprocess.Popen([*CLI, "index", str(tmp_path / "photos"), "-g", str(gallery)],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
        deadline = time.monotonic() + 300  # the process's start and imports, on a loaded machine
        while "is busy" not in log.read_text() and waiting.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        still_waiting = waiting.poll() is None
        count_while_held = Gallery.open(gallery, create=False).count()
    out, _ = waiting.communicate(timeout=300)
    err = log.read_text()
    assert still_waiting and "is busy" in err and count_while_held == 1, err
    assert waiting.returncode == 0 and "indexed 1, unchanged 1" in out, err


def test_sync_asks_above_a_fifth_not_at_it(tmp_path):
    """The guard's boundary: removing exactly a fifth (1 of 5) goes through; more (2 of 5) is refused
    until allowed. Files in a folder that still exists, so only the share decides."""
    from pictrieve.vectorstore.errors import LargeRemovalError
    from pictrieve.vectorstore.syncing import check_removal

    gone = [str(tmp_path / f"{i}.jpg") for i in range(2)]
    check_removal(gone[:1], 5)  # a fifth: no question asked
    with pytest.raises(LargeRemovalError):
        check_removal(gone, 5)
    check_removal(gone, 5, allow_large=True)
    check_removal(gone, 10)  # the same two are a fifth of ten
