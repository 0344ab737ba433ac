"""The page's search form has the CLI's filters (after, before, near + radius, place, camera, folder) and the
hybrid switch, and shows when, where and with what each hit was taken: its API in-process, then the real page
in headless Chromium. Photos are written here with EXIF (two phones, Lisbon and Porto, 2023 and 2019)."""

from __future__ import annotations

import numpy as np
import pytest

fastapi = pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra: pip install -e '.[ui]'")

from helpers.exif_photos import exif_block  # noqa: E402
from helpers.web_page import browser, page, page_client, serve  # noqa: E402,F401  (fixtures: browser, page)
from PIL import Image  # noqa: E402

from pictrieve.ui.app import create_app  # noqa: E402

LISBON, PORTO = (38.7223, -9.1393), (41.1496, -8.6109)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """lisbon/ (Pixel 7, June 2023, in Lisbon), porto/ (Canon EOS R6, January 2019, in Porto), misc/ (no EXIF)."""
    root = tmp_path_factory.mktemp("filters") / "photos"
    rng = np.random.default_rng(3)
    shots = {"lisbon": dict(taken="2023:06:14 18:02:33", gps=LISBON, make="Google", model="Pixel 7"),
             "porto": dict(taken="2019:01:02 10:00:00", gps=PORTO, make="Canon", model="Canon EOS R6"),
             "misc": None}
    for folder, exif in shots.items():
        (root / folder).mkdir(parents=True)
        for n in range(2):
            pixels = rng.integers(0, 255, size=(40, 48, 3), dtype=np.uint8)
            extra = {"exif": exif_block(**exif)} if exif else {}
            Image.fromarray(pixels).save(root / folder / f"{folder[0]}{n}.jpg", **extra)
    return root


@pytest.fixture(scope="module")
def app(library, tmp_path_factory, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(tmp_path_factory.mktemp("g") / "gallery", tiny_clip_name)
    gallery.add(library, progress=False)
    return create_app(gallery, state_dir=tmp_path_factory.mktemp("state"))


def _folders(hits) -> set[str]:
    return {h["path"].rsplit("/", 2)[-2] for h in hits}


def test_the_search_api_takes_the_clis_filters(app, library):
    client = page_client(app, raise_server_exceptions=False)

    def search(**body):
        response = client.post("/api/search", json={"query": "a photo", "k": 6, **body})
        assert response.status_code == 200, response.json()
        return response.json()["hits"]

    assert _folders(search(camera="Pixel 7")) == {"lisbon"}
    assert _folders(search(before="2020-01-01")) == {"porto"}
    assert _folders(search(after="2023-06-01", before="2023-07-01")) == {"lisbon"}
    assert _folders(search(near="Porto", radius_km="20")) == {"porto"}
    assert _folders(search(near="38.72,-9.14", radius_km=5)) == {"lisbon"}
    assert _folders(search(place="PT")) == {"lisbon", "porto"}
    assert _folders(search(folder=str(library / "misc"))) == {"misc"}
    # as people write them: by word, case aside, a country by name, folder names in a row
    assert _folders(search(camera="pixel")) == _folders(search(place="portugal")) - {"porto"} == {"lisbon"}
    assert _folders(search(place="lisbon")) == {"lisbon"} and _folders(search(folder="photos/MISC")) == {"misc"}
    # misc/ has no EXIF time: its file's date passes a date filter unless exif_dates_only
    assert _folders(search(after="2000-01-01")) == {"lisbon", "porto", "misc"}
    assert _folders(search(after="2000-01-01", exif_dates_only=True)) == {"lisbon", "porto"}
    hit = search(camera="Pixel 7")[0]
    assert hit["metadata"]["taken_at"].startswith("2023-06-14T18:02") and "Lisbon" in hit["metadata"]["place"]
    # An upload searches with the same filters (multipart fields).
    photo = (library / "misc" / "m0.jpg").read_bytes()
    found = client.post("/api/search", data={"camera": "Canon EOS R6", "k": "6"},
                        files={"image": ("q.jpg", photo, "image/jpeg")}).json()["hits"]
    assert _folders(found) == {"porto"}
    # The photos' words count unless switched off.
    assert search(query="lisbon")[0]["keyword_match"]
    assert not any(h["keyword_match"] for h in search(query="lisbon", hybrid=False))
    bad = client.post("/api/search", json={"query": "a photo", "after": "last june"})
    # A bad value is worded by the field the page shows, never a command-line option.
    assert bad.status_code == 400 and bad.json()["error"].startswith(
        "after: 'last june' is not accepted; it takes a date as YYYY-MM-DD")
    for body, words in (({"radius_km": "far"}, "radius_km: 'far' is not accepted; it takes a number of kilometres"),
                        ({"radius_km": -1, "near": "Porto"}, "radius_km: -1 is not accepted"),
                        ({"after": 123}, "after: 123 is not accepted; it takes a date as YYYY-MM-DD")):
        refused = client.post("/api/search", json={"query": "a photo", **body})
        assert refused.status_code == 400 and refused.json()["error"].startswith(words), refused.json()
        assert "--" not in refused.json()["error"]


@pytest.fixture(scope="module")
def served(app):
    with serve(app) as url:
        yield url


def _cards(page) -> list[str]:
    page.wait_for_selector("#search-grid .card")
    return page.eval_on_selector_all("#search-grid .card img", "imgs => imgs.map(i => i.alt)")


@pytest.mark.browser
def test_the_page_filters_and_shows_when_where_and_which_camera(page, served):
    page.goto(served)
    page.wait_for_function("() => document.getElementById('status').textContent.includes('6 images')")
    page.fill("#query", "a photo")
    page.click("#filters summary")
    page.fill("#f-camera", "Pixel 7")
    page.click("#search-form button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#search-grid .card').length === 2")
    about = page.eval_on_selector_all("#search-grid .card .about", "els => els.map(e => e.textContent)")
    assert len(about) == 2 and all(a.startswith("2023-06-14 18:02") and "Lisbon" in a and a.endswith("Pixel 7")
                                   for a in about), about
    page.fill("#f-camera", "")
    page.fill("#f-near", "Porto")
    page.fill("#f-radius", "20")
    page.click("#search-form button[type=submit]")
    page.wait_for_function("() => [...document.querySelectorAll('#search-grid .card .about')].length === 2 && "
                           "[...document.querySelectorAll('#search-grid .card .about')].every(e => "
                           "e.textContent.includes('Porto'))")
    page.fill("#f-near", "")
    page.fill("#f-radius", "")
    page.fill("#f-before", "2020-01-01")
    page.click("#search-form button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#search-grid .card').length === 2 && "
                           "[...document.querySelectorAll('#search-grid .card .about')].every(e => "
                           "e.textContent.startsWith('2019-01-02'))")
    page.fill("#f-before", "")
    # A photo without an EXIF time shows its file's date, marked as such.
    page.fill("#f-folder", "misc")
    page.click("#search-form button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#search-grid .card .about').length === 2 && "
                           "[...document.querySelectorAll('#search-grid .card .about')].every(e => "
                           "e.textContent.endsWith('(file date)'))")
    page.fill("#f-folder", "")
    # Hybrid on: the photos in lisbon/ come first for "lisbon", marked as matched by their words; off: none is.
    page.fill("#query", "lisbon")
    page.click("#search-form button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#search-grid .card').length === 6")
    scores = page.eval_on_selector_all("#search-grid .card .score", "els => els.map(e => e.textContent)")
    assert [s.endswith("words") for s in scores] == [True, True, False, False, False, False], scores
    page.uncheck("#hybrid")
    page.click("#search-form button[type=submit]")
    page.wait_for_function("() => ![...document.querySelectorAll('#search-grid .card .score')].some(e => "
                           "e.textContent.endsWith('words'))")
    # A filter the server cannot read is one line on the page.
    page.fill("#f-near", "Nowhere-Upon-Sea")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#error:not([hidden])")
    # worded by the one search request, with the page's field name (never a CLI option)
    assert page.text_content("#error").startswith("near: 'Nowhere-Upon-Sea' is not accepted; it takes \"LAT,LON\"")
