"""A photo's own metadata (issue 30): EXIF Orientation applied by the one loader (embedding, thumbnails,
service pictures), and when/where/with what it was taken stored on each record at index time. Photos are
written here with PIL's EXIF writer; the gallery is real Chroma with the tiny random CLIP model."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from helpers.exif_photos import exif_block
from pictrieve.tools.core.images import load_image, load_service_image
from pictrieve.tools.core.photo_metadata import READER_VERSION, read_photo_metadata
from pictrieve.tools.core.thumbnails import jpeg_thumbnail
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.gallery import Gallery
from PIL import Image


def _upright(width: int = 96, height: int = 64) -> Image.Image:
    """An asymmetric picture (so a turn changes what a model sees): a gradient with a block in one corner."""
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    pixels = np.concatenate([np.broadcast_to(x, (height, width, 1)), np.broadcast_to(y, (height, width, 1)),
                             np.full((height, width, 1), 40, np.float32)], axis=2).astype(np.uint8)
    pixels[: height // 3, : width // 4] = (255, 255, 255)
    return Image.fromarray(pixels)


def _sideways(path: Path, fmt: str = "PNG") -> Image.Image:
    """Write the upright picture as a phone does: pixels turned, Orientation 6 saying "turn 90 degrees clockwise"."""
    upright = _upright()
    path.parent.mkdir(parents=True, exist_ok=True)
    upright.transpose(Image.Transpose.ROTATE_90).save(path, format=fmt, exif=exif_block(6))
    return upright


def test_the_loader_turns_an_orientation_6_photo_upright(tmp_path):
    upright = _sideways(tmp_path / "side.png")
    with Image.open(tmp_path / "side.png") as stored:
        assert stored.size == (64, 96)  # stored sideways
    assert np.array_equal(np.asarray(load_image(tmp_path / "side.png")), np.asarray(upright))
    assert np.array_equal(np.asarray(load_service_image(tmp_path / "side.png")), np.asarray(upright))
    _sideways(tmp_path / "side.jpg", "JPEG")
    with Image.open(io.BytesIO(jpeg_thumbnail(tmp_path / "side.jpg"))) as thumb:
        assert thumb.size == (96, 64)
        top_left = np.asarray(thumb.convert("RGB"))[:10, :10].mean()
    assert top_left > 200  # the white block is back in the top-left corner


def _vectors(gallery: Gallery, paths: list[Path]) -> np.ndarray:
    return gallery.embeddings([path_id(p) for p in paths])


def test_a_sideways_photo_embeds_as_its_upright_self(tmp_path, tiny_clip_embedder):
    folder = tmp_path / "photos"
    upright = _sideways(folder / "side.png")
    upright.save(folder / "up.png")
    upright.transpose(Image.Transpose.ROTATE_90).save(folder / "raw.png")  # sideways, no tag: what was embedded before
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    side, up, raw = _vectors(gallery, [folder / "side.png", folder / "up.png", folder / "raw.png"])
    assert np.allclose(side, up, atol=1e-5)
    assert not np.allclose(raw, up, atol=1e-3)  # the model does see the turn
    meta = gallery.metadata_of([path_id(folder / "side.png")])[path_id(folder / "side.png")]
    assert (meta["width"], meta["height"], meta["orientation"], meta["reader"]) == (96, 64, 6, READER_VERSION)


def test_records_from_before_the_reader_are_reembedded_only_when_turned(tmp_path, tiny_clip_embedder):
    folder = tmp_path / "photos"
    upright = _sideways(folder / "side.png")
    upright.save(folder / "up.png")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    ids = [path_id(folder / "side.png"), path_id(folder / "up.png")]
    good = gallery.embeddings(ids)
    # what an older pictrieve stored: the sideways vector for the tagged photo, and no reader or new fields
    old_fields = ("path", "name", "size", "mtime_ns", "sha256")
    stored = gallery.metadata_of(ids)
    sideways_vector = tiny_clip_embedder.embed_images([upright.transpose(Image.Transpose.ROTATE_90)])[0]
    gallery.delete(ids)
    gallery.upsert(ids, np.stack([sideways_vector, good[1] + 0.5]),
                   [{key: stored[id_][key] for key in old_fields} for id_ in ids])
    report = gallery.add(folder, progress=False)
    assert (report.indexed, report.unchanged) == (1, 1)
    after = gallery.embeddings(ids)
    assert np.allclose(after[0], good[0], atol=1e-5)  # re-embedded upright
    assert np.allclose(after[1], good[1] + 0.5)  # kept: only its metadata was added
    meta = gallery.metadata_of(ids)
    assert all(meta[id_]["reader"] == READER_VERSION and "taken_at" in meta[id_] for id_ in ids)
    assert gallery.add(folder, progress=False).unchanged == 2  # and the next run plans nothing


def test_capture_time_place_and_camera_are_read_fromexif_block(tmp_path):
    path = tmp_path / "trip" / "lisbon.jpg"
    path.parent.mkdir()
    _upright().save(path, exif=exif_block(1, taken="2023:06:14 18:02:33", offset="+01:00", gps=(38.7223, -9.1393),
                                     make="Canon", model="Canon EOS 5D"))
    meta = read_photo_metadata(path)
    fields = meta.fields
    assert not meta.notes
    assert fields["taken_at"] == "2023-06-14T18:02:33+01:00" and fields["taken_at_source"] == "exif"
    assert fields["taken_at_ts"] == 1686762153
    assert fields["gps_lat"] == pytest.approx(38.7223, abs=1e-3) and fields["gps_lon"] == pytest.approx(-9.1393, abs=1e-3)
    assert fields["camera"] == "Canon EOS 5D" and fields["camera_make"] == "Canon"
    assert fields["folder"] == str(path.parent) and (fields["width"], fields["height"]) == (96, 64)
    assert "Lisbon" in fields["place"] and fields["place_country"] == "PT"


@pytest.mark.parametrize("offset, taken_at, utc_ts", [
    ("-05:00", "2023-06-14T18:02:33-05:00", 1686762153 + 6 * 3600),  # 23:02:33 UTC, not 13:02:33
    ("+05:30", "2023-06-14T18:02:33+05:30", 1686762153 - 4 * 3600 - 30 * 60),  # 12:32:33 UTC
    ("-03:30", "2023-06-14T18:02:33-03:30", 1686762153 + 4 * 3600 + 30 * 60),  # minutes take the sign too
])
def test_the_capture_time_offset_keeps_its_sign(tmp_path, offset, taken_at, utc_ts):
    """OffsetTimeOriginal west of Greenwich: the clock reading is local, the instant later than UTC's reading."""
    path = tmp_path / "west.jpg"
    _upright().save(path, exif=exif_block(1, taken="2023:06:14 18:02:33", offset=offset))
    fields = read_photo_metadata(path, places=False).fields
    assert fields["taken_at"] == taken_at and fields["taken_at_ts"] == utc_ts


def test_a_photo_without_exif_takes_the_file_time(tmp_path):
    path = tmp_path / "plain.png"
    _upright().save(path)
    import os

    os.utime(path, (1_600_000_000, 1_600_000_000))
    fields = read_photo_metadata(path).fields
    assert fields["taken_at_source"] == "file" and fields["taken_at_ts"] == 1_600_000_000
    assert "gps_lat" not in fields and "camera" not in fields and "place" not in fields


@pytest.mark.parametrize("exif, note", [
    (exif_block(taken="1970:01:01 00:00:00"), "capture date"),
    (exif_block(taken="2099:01:01 00:00:00"), "capture date"),
    (exif_block(taken="not a date at all"), "capture date"),
    (exif_block(gps=(0.0, 0.0)), "GPS position 0,0"),
])
def test_bad_metadata_is_a_note_never_a_failure(tmp_path, tiny_clip_embedder, exif, note):
    folder = tmp_path / "photos"
    folder.mkdir()
    _upright().save(folder / "bad.jpg", exif=exif)
    meta = read_photo_metadata(folder / "bad.jpg")
    assert any(note in line for line in meta.notes)
    assert meta.fields["taken_at_source"] == "file" and "gps_lat" not in meta.fields
    report = Gallery.open(tmp_path / "g", tiny_clip_embedder).add(folder, progress=False)
    assert report.indexed == 1 and not report.failed and any(note in line for line in report.notes)


def test_a_corrupt_exif_block_is_ignored(tmp_path, tiny_clip_embedder):
    folder = tmp_path / "photos"
    folder.mkdir()
    _upright().save(folder / "broken.jpg", exif=b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff garbage")
    meta = read_photo_metadata(folder / "broken.jpg")
    assert meta.fields["taken_at_source"] == "file" and meta.orientation == 1
    report = Gallery.open(tmp_path / "g", tiny_clip_embedder).add(folder, progress=False)
    assert report.indexed == 1 and not report.failed


@pytest.fixture
def trip_gallery(tmp_path, tiny_clip_embedder):
    """Twelve photos: six from Lisbon in June 2023 (Canon), three from Porto in 2022 (Pixel), three without EXIF."""
    folder = tmp_path / "photos"
    (folder / "lisbon").mkdir(parents=True)
    (folder / "porto").mkdir()
    for i in range(6):
        _upright().rotate(i * 7).save(folder / "lisbon" / f"l{i}.jpg", exif=exif_block(
            taken=f"2023:06:{10 + i} 12:00:00", offset="+01:00", gps=(38.72 + i * 0.001, -9.14),
            make="Canon", model="Canon EOS 5D"))
    for i in range(3):
        _upright().rotate(50 + i * 7).save(folder / "porto" / f"p{i}.jpg", exif=exif_block(
            taken=f"2022:0{i + 1}:01 09:00:00", gps=(41.15, -8.61), make="Google", model="Pixel 7"))
        _upright().rotate(90 + i * 7).save(folder / f"plain{i}.png")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    return gallery, folder


def _names(hits) -> set[str]:
    return {Path(hit.path).name for hit in hits}


def test_filters_apply_in_the_store_and_return_k_when_there_are_k(trip_gallery):
    from pictrieve.vectorstore.photo_filter import PhotoFilter

    gallery, folder = trip_gallery
    june = PhotoFilter.parse(after="2023-06-01", before="2023-07-01")
    hits = gallery.search_text("a photo", k=6, where=june)
    assert _names(hits) == {f"l{i}.jpg" for i in range(6)}  # all six, not what survives a top-6 cut
    assert hits[0].taken_at.startswith("2023-06-") and "Lisbon" in hits[0].place and hits[0].camera == "Canon EOS 5D"
    assert _names(gallery.search_text("a photo", k=12, where=PhotoFilter(camera="Pixel 7"))) == {"p0.jpg", "p1.jpg", "p2.jpg"}
    assert _names(gallery.search_text("a photo", k=12, where=PhotoFilter(place="PT"))) == \
        {f"l{i}.jpg" for i in range(6)} | {"p0.jpg", "p1.jpg", "p2.jpg"}
    assert _names(gallery.search_text("a photo", k=12, where=PhotoFilter.parse(folder=folder / "porto"))) == \
        {"p0.jpg", "p1.jpg", "p2.jpg"}
    near_porto = PhotoFilter.parse(near="41.15,-8.61", radius_km=5)
    assert _names(gallery.search_text("a photo", k=12, where=near_porto)) == {"p0.jpg", "p1.jpg", "p2.jpg"}
    assert _names(gallery.search_text("a photo", k=12, where=PhotoFilter.parse(near="Lisbon", radius_km=20))) == \
        {f"l{i}.jpg" for i in range(6)}
    # l0..l3 are all in the bounding box; the exact distance (0.14 km against 0.21 km) keeps l1 and l2 only
    close = PhotoFilter(near=(38.7215, -9.1385), radius_km=0.2)
    assert _names(gallery.search_text("a photo", k=12, where=close)) == {"l1.jpg", "l2.jpg"}


def test_the_cli_filters_and_shows_when_where_and_what(trip_gallery):
    from click.testing import CliRunner
    from pictrieve.cli.gallery_commands import search

    gallery, _ = trip_gallery
    runner = CliRunner()
    result = runner.invoke(search, ["a photo", "-g", str(gallery.location), "-k", "5", "--camera", "Pixel 7"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 3 and all("Pixel 7" in line and "2022-0" in line for line in lines)
    bad = runner.invoke(search, ["a photo", "-g", str(gallery.location), "--after", "last june"])
    assert bad.exit_code == 2 and "--after: 'last june' is not accepted; it takes a date as YYYY-MM-DD" in bad.output


def test_the_langchain_retriever_takes_a_photo_filter(trip_gallery):
    from pictrieve.vectorstore.photo_filter import PhotoFilter
    from pictrieve.vectorstore.retriever import GalleryRetriever

    gallery, _ = trip_gallery
    retriever = GalleryRetriever(gallery=gallery, k=12, where=PhotoFilter(camera="Pixel 7"))
    assert {Path(d.metadata["path"]).name for d in retriever.invoke("a photo")} == {"p0.jpg", "p1.jpg", "p2.jpg"}
    docs = retriever.invoke("a photo", where=PhotoFilter.parse(before="2023-06-12"))
    assert {Path(d.metadata["path"]).name for d in docs} == {"l0.jpg", "l1.jpg", "p0.jpg", "p1.jpg", "p2.jpg"}
    assert docs[0].metadata["metadata"]["taken_at"]


def test_the_search_graph_takes_filters_in_its_input(trip_gallery):
    from pictrieve.agents.settings import SettingsError
    from pictrieve.graphs.search import build_search_graph

    gallery, _ = trip_gallery
    graph = build_search_graph(gallery)
    out = graph.invoke({"query": "a photo", "filters": {"near": "Porto", "radius_km": 10}}, context={"k": 12})
    assert _names(out["hits"]) == {"p0.jpg", "p1.jpg", "p2.jpg"}
    with pytest.raises(SettingsError, match="^filters: 'when' is not accepted; it takes only after, before"):
        graph.invoke({"query": "a photo", "filters": {"when": "june"}})


def test_near_reads_coordinates_and_city_names():
    from pictrieve.vectorstore.photo_filter import FilterError, parse_near

    assert parse_near("41.15,-8.61") == (41.15, -8.61)
    assert parse_near("Paris") == pytest.approx((48.85, 2.35), abs=0.05)  # not Paris, Ontario
    assert parse_near("Porto") == pytest.approx((41.15, -8.61), abs=0.05)  # not Porto, Piaui
    assert parse_near("Lisbon, US")[1] < -60
    with pytest.raises(FilterError, match="not a LAT,LON nor a city"):
        parse_near("Qqxz Nowhere")
    with pytest.raises(FilterError, match="latitude must be within"):
        parse_near("91,0")


@pytest.fixture
def june_gallery(tmp_path, tiny_clip_embedder):
    """Photos around midnight of June 12-13, 2023, as their cameras' clocks read: 00:00 on June 13 in Lisbon (still
    June 12 in UTC), 23:30 on June 12 in Lisbon, 08:00 on June 12 in Tokyo (June 11 in UTC), an offset-less camera
    at 23:50 on June 12, and a screenshot without EXIF whose file is from noon UTC on June 12."""
    import os

    folder = tmp_path / "june"
    folder.mkdir()
    shots = {"midnight.jpg": ("2023:06:13 00:00:00", "+01:00"), "late.jpg": ("2023:06:12 23:30:00", "+01:00"),
             "tokyo.jpg": ("2023:06:12 08:00:00", "+09:00"), "nooffset.jpg": ("2023:06:12 23:50:00", None)}
    for n, (name, (taken, offset)) in enumerate(shots.items()):
        _upright().rotate(n * 9).save(folder / name, exif=exif_block(taken=taken, offset=offset))
    _upright().rotate(50).save(folder / "screen.png")
    noon = 1_686_571_200  # 2023-06-12 12:00 UTC: June 12 on any clock within 11 hours of UTC
    os.utime(folder / "screen.png", (noon, noon))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(folder, progress=False)
    return gallery, folder


def test_indexing_stores_the_photos_own_clock_time(june_gallery):
    _, folder = june_gallery
    midnight = read_photo_metadata(folder / "midnight.jpg", places=False).fields
    assert midnight["taken_at"] == "2023-06-13T00:00:00+01:00" and midnight["taken_at_ts"] == 1_686_610_800
    assert midnight["taken_at_local_ts"] == 1_686_614_400  # 2023-06-13 00:00 on the photo's clock
    assert read_photo_metadata(folder / "nooffset.jpg", places=False).fields["taken_at_local_ts"] == 1_686_613_800
    screen = read_photo_metadata(folder / "screen.png", places=False).fields
    assert screen["taken_at_source"] == "file" and screen["taken_at_local_ts"] // 86400 == 1_686_571_200 // 86400


def test_date_filters_compare_the_photos_own_calendar_days(june_gallery):
    """``--after 2023-06-12 --before 2023-06-13`` is June 12 on each photo's clock: the Lisbon midnight photo (June 12
    in UTC) is out, Tokyo's morning photo (June 11 in UTC) is in; ``exif_dates_only`` leaves the screenshot out."""
    from pictrieve.vectorstore.photo_filter import PhotoFilter

    gallery, _ = june_gallery
    june_12 = PhotoFilter.parse(after="2023-06-12", before="2023-06-13")
    assert _names(gallery.search_text("a photo", k=10, where=june_12)) == \
        {"late.jpg", "tokyo.jpg", "nooffset.jpg", "screen.png"}
    exif_only = PhotoFilter.parse(after="2023-06-12", before="2023-06-13", exif_dates_only=True)
    assert _names(gallery.search_text("a photo", k=10, where=exif_only)) == {"late.jpg", "tokyo.jpg", "nooffset.jpg"}
    assert _names(gallery.search_text("a photo", k=10, where=PhotoFilter.parse(after="2023-06-13"))) == {"midnight.jpg"}


def test_the_cli_shows_each_photos_own_date_and_marks_a_file_date(june_gallery):
    from click.testing import CliRunner
    from pictrieve.cli.gallery_commands import search

    gallery, _ = june_gallery
    result = CliRunner().invoke(search, ["a photo", "-g", str(gallery.location), "-k", "10", "--no-hybrid"])
    lines = {Path(line.split()[2]).name: line for line in result.output.splitlines() if "/june/" in line}
    assert "[2023-06-13]" in lines["midnight.jpg"] and "[2023-06-12]" in lines["tokyo.jpg"]
    assert "[2023-06-12 (file date)]" in lines["screen.png"]


def test_the_cli_takes_exif_dates_only_and_says_why_a_filter_found_nothing(june_gallery):
    from click.testing import CliRunner
    from pictrieve.cli.gallery_commands import search

    gallery, _ = june_gallery
    runner = CliRunner()
    june_12 = ["-g", str(gallery.location), "-k", "10", "--after", "2023-06-12", "--before", "2023-06-13"]

    def names(result) -> set[str]:
        return {Path(line.split()[2]).name for line in result.output.splitlines() if "/june/" in line}

    assert names(runner.invoke(search, ["a photo", *june_12])) == {"late.jpg", "tokyo.jpg", "nooffset.jpg", "screen.png"}
    assert names(runner.invoke(search, ["a photo", *june_12, "--exif-dates-only"])) == \
        {"late.jpg", "tokyo.jpg", "nooffset.jpg"}
    nope = runner.invoke(search, ["a photo", "-g", str(gallery.location), "--folder", "photos/nope"])
    assert nope.exit_code == 1 and "0 photos pass folder 'photos/nope' (no such folder on disk); folders here:" \
        in nope.output, nope.output


def test_exif_dates_only_is_read_from_the_words_a_form_sends():
    from pictrieve.vectorstore.search_request import SearchRequestError, parse_filters

    assert parse_filters({"after": "2023-06-12", "exif_dates_only": "on"}).exif_dates_only is True
    assert parse_filters({"after": "2023-06-12", "exif_dates_only": False}).exif_dates_only is False
    with pytest.raises(SearchRequestError, match="^exif_dates_only: 'maybe' is not accepted; it takes true or false"):
        parse_filters({"after": "2023-06-12", "exif_dates_only": "maybe"})
