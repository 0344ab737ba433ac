"""The page's long-running tabs: Ask (Vision Search Assistant) and Visualize (VisRet), API and browser.

Real flickr8k-dev photos (a small gallery indexed with the tiny random CLIP model: the code path, not
retrieval quality), the offline ``local:`` page search over examples/vsa-offline/pages, and the offline
``exemplar:`` visualizer over other flickr8k-dev photos. Where an LLM, a detector or a region
describer is needed, a scripted stand-in is used: these tests check control flow, progress,
escaping and safety, never answer quality. One answer carries markup that must stay text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra: pip install -e '.[ui]'")
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402

from helpers import FLICKR8K_DEV  # noqa: E402
from helpers.vsa_fakes import PAGES  # noqa: E402
from helpers.web_page import browser, finished, page, page_client, serve  # noqa: E402,F401  (the headless Chromium fixtures, helpers)

from pictrieve.tools.models.protocols import Detection  # noqa: E402
from pictrieve.tools.web.results import SearchResult  # noqa: E402
from pictrieve.ui.app import create_app  # noqa: E402

HORSE = "109202756_b97fcdc62c.jpg"
SCRIPT_ANSWER = 'A horse <img src=x onerror="window.__pwned=3">: adults have 36 to 44 teeth [1].'
GALLERY_SIZE = 8
EXEMPLARS = 6


def dev_items() -> list[dict]:
    index = FLICKR8K_DEV / "captions.jsonl"
    if not index.is_file():
        pytest.skip(f"flickr8k-dev not found at {FLICKR8K_DEV} (set PICTRIEVE_FLICKR8K_DEV)")
    return [json.loads(line) for line in index.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """PICTRIEVE_CACHE in a temporary folder (the local pages' index and the exemplar vectors go there)."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("cache")
        patch.setenv("PICTRIEVE_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name, cache):
    from pictrieve.vectorstore.gallery import Gallery

    items = dev_items()
    chosen = [i for i in items if i["image"].endswith(HORSE)] + [i for i in items if not i["image"].endswith(HORSE)][:GALLERY_SIZE - 1]
    root = tmp_path_factory.mktemp("ui-methods")
    photos = root / "photos"
    photos.mkdir()
    for item in chosen:
        source = FLICKR8K_DEV / item["image"]
        shutil.copyfile(source, photos / source.name)
        (photos / source.name).with_suffix(".txt").write_text(item["captions"][0] + "\n")
    opened = Gallery.open(root / "gallery", tiny_clip_name)
    opened.add([photos])
    return opened


@pytest.fixture(scope="module")
def exemplar(tmp_path_factory, cache):
    """The offline visualizer over flickr8k-dev photos that are not in the gallery (absolute paths)."""
    from pictrieve.tools.models.visualizers import create_visualizer

    folder = tmp_path_factory.mktemp("exemplars")
    items = dev_items()[-EXEMPLARS:]
    lines = [json.dumps({"image": str(FLICKR8K_DEV / i["image"]), "captions": i["captions"]}) for i in items]
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return create_visualizer(f"exemplar:{folder}", cache_dir=cache / "exemplar")


class OneBox:
    """A stand-in detector: one 'horse' box over the middle of any photo."""

    name = "one-box"

    def detect(self, image, *, labels=None, min_score=None):
        w, h = image.size
        return [Detection("horse", 0.9, (0.25 * w, 0.2 * h, 0.75 * w, 0.9 * h))]


class Words:
    name = "words"

    def caption(self, images, *, prompt=None):
        return ["a brown horse standing in snow"] * len(images)


def scripted_llm():
    def reply(messages):
        text = messages[0].content
        if "Sub-question" in text:
            return AIMessage(content="Adult horses have 36 to 44 teeth [1].")
        return AIMessage(content=SCRIPT_ANSWER)
    return RunnableLambda(reply)


class WebResults:
    """A search backend with page text (nothing fetched): one web page, one javascript: URL."""

    name = "web-results"

    def search(self, query, *, k=6):
        return [SearchResult(url="javascript:window.__pwned=4", title="<b>bad</b> link", text="Horses have teeth."),
                SearchResult(url="https://example.org/horses", title="Horses", text="Adult horses have 36 to 44 teeth.")][:k]


def make_app(gallery, tmp_path, *, search, visualizer=None):
    return create_app(gallery, state_dir=tmp_path / "state", settings={"vsa": {"plan_with_llm": False}},
                      needs={"llm": scripted_llm(), "search": search, "detector": OneBox(), "vlm": Words(),
                             "visualizers": visualizer})


def horse_bytes(gallery) -> bytes:
    (path,) = [i.path for i in gallery.items() if i.path.endswith(HORSE)]
    return Path(path).read_bytes()


# --- API, in-process -------------------------------------------------------------------------------


def test_ask_about_an_upload_reports_steps_regions_and_numbered_sources(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, search=WebResults()), raise_server_exceptions=False)
    started = client.post("/api/ask", data={"question": "How many teeth does this animal have?"},
                          files={"image": ("h.jpg", horse_bytes(gallery), "image/jpeg")}).json()
    assert not started.get("error"), started
    view = finished(client, started)
    assert not view["error"] and view["result"]["answer"] == SCRIPT_ANSWER
    assert any(s.startswith("regions: horse (0.90)") for s in view["steps"]) and view["steps"][-1].startswith("answered")
    (region,) = view["result"]["regions"]
    assert region["box"] == pytest.approx([0.25, 0.2, 0.75, 0.9], abs=0.01)  # fractions of the photo
    sources = view["result"]["sources"]
    assert [s["number"] for s in sources] == [1, 2]
    # Only http/https become links: the javascript: URL stays text.
    assert [s["href"] for s in sources] == [None, "https://example.org/horses"]
    assert [s["cited"] for s in sources] == [True, False]  # the answer cites [1] only
    photo = client.get(view["result"]["photo"]["url"])
    assert photo.status_code == 200 and photo.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_ask_without_a_photo_uses_the_gallerys_best_match(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, search=None), raise_server_exceptions=False)
    view = finished(client, client.post("/api/ask", json={"question": "a horse in the snow"}).json())
    assert not view["error"] and view["result"]["hits"] and view["result"]["photo"]
    assert view["result"]["sources"] == [] and view["steps"][1].startswith("found the photo in the gallery")


def test_ask_about_a_gallery_photo_by_id_only(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, search=None), raise_server_exceptions=False)
    (horse,) = [i.id for i in gallery.items() if i.path.endswith(HORSE)]
    view = finished(client, client.post("/api/ask", json={"question": "what is it?", "photo": horse}).json())
    assert not view["error"] and view["result"]["photo"]["width"] == 288  # the horse photo itself
    assert not any("found the photo in the gallery" in s for s in view["steps"])
    for bad in ["/etc/passwd", "../" + HORSE]:
        response = client.post("/api/ask", json={"question": "what is it?", "photo": bad})
        assert response.status_code == 400 and response.json() == {"error": "no such image in this gallery"}


def test_ask_refuses_bad_input_with_one_line(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, search=None), raise_server_exceptions=False)
    assert client.post("/api/ask", json={"question": " "}).json() == {"error": "type a question about the photo"}
    bad = client.post("/api/ask", data={"question": "what?"}, files={"image": ("x.jpg", b"<html>", "image/jpeg")})
    assert bad.status_code == 400 and "not a readable image" in bad.json()["error"]
    assert "pictrieve-ask" not in bad.json()["error"]  # no server paths on the page
    small = create_app(gallery, state_dir=tmp_path / "s", max_upload_bytes=1000,
                       needs={"llm": scripted_llm(), "search": None, "detector": OneBox(), "vlm": Words()})
    big = page_client(small, raise_server_exceptions=False).post("/api/ask", data={"question": "what?"},
                                 files={"image": ("h.jpg", horse_bytes(gallery), "image/jpeg")})
    assert big.status_code == 400 and "larger than 0.976562 KiB" in big.json()["error"]


def test_job_images_are_served_by_job_and_name_only(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, search=None), raise_server_exceptions=False)
    view = finished(client, client.post("/api/ask", data={"question": "what is it?"},
                                        files={"image": ("h.jpg", horse_bytes(gallery), "image/jpeg")}).json())
    for bad in ["..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "photo.png", "guide1"]:
        response = client.get(f"/api/jobs/{view['id']}/image/{bad}")
        assert response.status_code == 404 and b"root:" not in response.content
    assert "run it again" in client.get("/api/jobs/" + "0" * 32).json()["error"]
    response = client.get("/api/jobs/..%2F..%2Fetc%2Fpasswd")
    assert response.status_code == 404 and b"root:" not in response.content


def test_visualize_shows_exemplar_guides_then_results(gallery, tmp_path, exemplar):
    client = page_client(make_app(gallery, tmp_path, search=None, visualizer=exemplar), raise_server_exceptions=False)
    status = client.get("/api/status").json()
    listed = {m["name"]: m for m in status["visualize"]["methods"]}
    assert listed["visret"]["ready"] and "not generated" in status["visualize"]["about"]
    assert listed["needle"]["ready"]
    assert "no controls" in client.post("/api/visualize", json={"query": "a dog", "method": "qc9"}).json()["error"]
    view = finished(client, client.post("/api/visualize", json={"query": "a dog running on grass", "k": 5}).json())
    assert not view["error"], view["error"]
    guides = [im for im in view["images"] if im["name"].startswith("guide")]
    assert len(guides) == 3 and all("not a generated image" in g["label"] and not g["generated"] for g in guides)
    assert client.get(guides[0]["url"]).content[:4] == b"\x89PNG"
    assert len(view["result"]["hits"]) == 5 and any("exemplar photos found" in s for s in view["steps"])


def needle_step(client, response):
    assert response.status_code == 200, response.json()
    view = finished(client, response.json())
    assert not view["error"], view["error"]
    return view["result"]


def test_needle_reviews_guides_then_results_and_reports_trust_weights(gallery, tmp_path, exemplar):
    from pictrieve.agents.needle.trust import TRUST_RECORD

    client = page_client(make_app(gallery, tmp_path, search=None, visualizer=exemplar), raise_server_exceptions=False)
    view = needle_step(client, client.post("/api/visualize", json={"query": "a dog running on grass", "method": "needle",
                                                                  "guides": 3, "k": 5}))
    session = view["session"]
    assert view["stage"] == "guides" and [g["id"] for g in view["guides"]] == ["g1", "g2", "g3"]
    assert all(g["reviewing"] and not g["generated"] for g in view["guides"])
    assert view["weights"] == {gallery.embedder_name: 1.0}
    assert "path" not in json.dumps(view["guides"])  # guides are fetched by id, never by path
    assert client.get(view["guides"][0]["url"]).content[:3] == b"\xff\xd8\xff"  # the exemplar's JPEG
    view = needle_step(client, client.post(f"/api/needle/{session}/guides", json={"rejected": ["g2"]}))
    statuses = {g["id"]: g["status"] for g in view["guides"]}
    assert view["stage"] == "guides" and statuses == {"g1": "approved", "g2": "discarded", "g3": "approved", "g4": "new"}
    assert [g["replaces"] for g in view["guides"] if g["reviewing"]] == ["g2"]
    view = needle_step(client, client.post(f"/api/needle/{session}/guides", json={"rejected": []}))
    assert view["stage"] == "results" and len(view["hits"]) == 5
    marked = view["hits"][0]["id"]
    view = needle_step(client, client.post(f"/api/needle/{session}/results", json={"irrelevant": [marked]}))
    assert view["stage"] == "done" and view["irrelevant"] == [marked]
    assert marked not in {h["id"] for h in view["hits"]} and len(view["hits"]) == 5
    assert view["weights"] == {gallery.embedder_name: 1.0}  # one embedder: its trust stays 1
    # The session has ended: a further answer is refused in one line.
    again = client.post(f"/api/needle/{session}/results", json={"irrelevant": []})
    assert again.status_code == 400 and "not waiting" in again.json()["error"]
    gallery.put_json(TRUST_RECORD, {})


def test_needle_endpoints_take_ids_only_and_refuse_unknown_ones(gallery, tmp_path, exemplar):
    client = page_client(make_app(gallery, tmp_path, search=None, visualizer=exemplar), raise_server_exceptions=False)
    unknown = client.post("/api/needle/" + "0" * 32 + "/guides", json={"rejected": []})
    assert unknown.status_code == 404 and "no such NEEDLE session" in unknown.json()["error"]
    assert client.get("/api/needle/" + "0" * 32 + "/guide/g1").status_code == 404
    view = needle_step(client, client.post("/api/visualize", json={"query": "a dog", "method": "needle", "guides": 2}))
    session = view["session"]
    missing = client.get(f"/api/needle/{session}/guide/g9")
    assert missing.status_code == 404 and missing.json()["error"] == "no such guide picture in this NEEDLE session"
    for bad in ["..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", HORSE, "%2E%2E"]:
        response = client.get(f"/api/needle/{session}/guide/{bad}")
        assert response.status_code == 404 and b"root:" not in response.content
    for bad in [["g9"], ["/etc/passwd"], [str(FLICKR8K_DEV / HORSE)]]:
        response = client.post(f"/api/needle/{session}/guides", json={"rejected": bad})
        assert response.status_code == 404 and "unknown guide id" in response.json()["error"]
    assert client.post(f"/api/needle/{session}/guides", json={"rejected": "/etc/passwd"}).status_code == 400
    early = client.post(f"/api/needle/{session}/results", json={"irrelevant": []})
    assert early.status_code == 400 and "not waiting for feedback on its results" in early.json()["error"]
    assert client.post(f"/api/needle/{session}/anything", json={}).status_code == 404
    # The refused requests left the session intact: it still takes a real answer.
    assert needle_step(client, client.post(f"/api/needle/{session}/guides", json={"rejected": []}))["stage"] == "results"


def test_visualize_without_a_visualizer_says_how_to_add_one(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, search=None), raise_server_exceptions=False)
    response = client.post("/api/visualize", json={"query": "a dog"})
    assert response.status_code == 400 and "--visualizer exemplar:DIR" in response.json()["error"]
    too_many = client.post("/api/visualize", json={"query": "a dog", "guides": 9}).json()["error"]
    assert too_many == "guide images must be between 1 and 8"


def test_status_names_the_default_embedder_and_how_to_index(gallery, tmp_path):
    status = page_client(make_app(gallery, tmp_path, search=f"local:{PAGES}")).get("/api/status").json()
    assert status["count"] == GALLERY_SIZE and status["default_embedder"] == gallery.embedder_name
    assert status["index_command"] == f"pictrieve index PHOTOS --gallery {gallery.location}"
    assert status["ask"]["search"] == f"local:{PAGES}"


# --- the page in a real browser --------------------------------------------------------------------


BUSY_WATCH = """() => {
  const busy = document.getElementById('busy');
  window.__busySeen = !busy.hidden;
  new MutationObserver(records => {
    // shown now, or shown just before a change that hid it (its old value null: no 'hidden' attribute)
    if (!busy.hidden || records.some(r => r.oldValue === null)) window.__busySeen = true;
  }).observe(busy, {attributes: true, attributeFilter: ['hidden'], attributeOldValue: true});
}"""
"""Notes in ``window.__busySeen`` whether the page's busy state was shown from now on: an observer, not a wait for a
state that may already be gone when a quick job ends before the browser is asked."""


@pytest.fixture(scope="module")
def served(gallery, exemplar, tmp_path_factory):
    with serve(make_app(gallery, tmp_path_factory.mktemp("served"), search=f"local:{PAGES}",
                        visualizer=exemplar)) as url:
        yield url


@pytest.mark.browser
def test_page_asks_about_a_real_photo_with_local_pages(page, served, gallery, tmp_path):  # noqa: F811
    photo = tmp_path / HORSE
    photo.write_bytes(horse_bytes(gallery))
    page.goto(served + "/#ask")
    page.wait_for_selector("#tab-ask:not([hidden])")
    assert "local:" in page.text_content("#ask-setup")
    page.set_input_files("#ask-photo", str(photo))
    page.fill("#ask-question", "How many teeth does an adult animal like this have?")
    page.evaluate(BUSY_WATCH)
    page.click("#ask-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('ask-answer').textContent.length > 0", timeout=180_000)
    assert page.evaluate("window.__busySeen") is True  # a visible busy state while it worked (however short)
    assert page.text_content("#ask-answer") == SCRIPT_ANSWER  # the LLM's markup shown as text
    assert page.evaluate("window.__pwned") is None
    steps = page.eval_on_selector_all("#ask-steps li", "lis => lis.map(l => l.textContent)")
    assert "regions: horse (0.90)" in steps and steps[-1].startswith("answered")
    # The region is drawn on the photo (a box inside the figure), the photo has loaded.
    page.wait_for_function("() => document.getElementById('ask-img').naturalWidth > 0")  # loaded (not at once on a busy machine)
    assert page.locator("#ask-boxes .region").count() == 1 and "horse" in page.text_content("#ask-boxes")
    box = page.locator("#ask-boxes .region").bounding_box()
    figure = page.locator("#ask-figure img").bounding_box()
    assert box["width"] == pytest.approx(figure["width"] / 2, rel=0.05)
    # Numbered sources from the local pages (file:// pages are text, not links); [1] jumps to source 1.
    assert page.locator("#ask-source-1").count() == 1 and "horses.md" in page.text_content("#ask-source-1")
    assert page.locator("#ask-sources a").count() == 0
    page.click("#ask-answer a.cite")
    assert "flash" in page.get_attribute("#ask-source-1", "class")


@pytest.mark.browser
def test_page_ask_error_is_a_readable_line(page, served):  # noqa: F811
    page.goto(served + "/#ask")
    page.wait_for_selector("#tab-ask:not([hidden])")
    page.click("#ask-form button[type=submit]")
    page.wait_for_selector("#error:not([hidden])")
    assert page.text_content("#error") == "type a question about the photo"


@pytest.mark.browser
def test_page_visualize_shows_labelled_exemplars_then_results(page, served):  # noqa: F811
    page.goto(served + "/#visualize")
    page.wait_for_selector("#tab-visualize:not([hidden])")
    options = page.eval_on_selector_all("#visualize-method option", "os => os.map(o => [o.value, o.disabled])")
    assert options[0] == ["visret", False] and ["needle", False] in options
    page.fill("#visualize-query", "a dog running on grass")
    page.click("#visualize-form button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#visualize-grid .card').length > 0", timeout=180_000)
    labels = page.eval_on_selector_all("#visualize-guides .cap", "cs => cs.map(c => c.textContent)")
    assert len(labels) == 3 and all("not a generated image" in label for label in labels)
    # Guides come before results on the page, and every image has loaded.
    guides_y = page.locator("#visualize-guides").bounding_box()["y"]
    assert guides_y < page.locator("#visualize-grid").bounding_box()["y"]
    page.wait_for_function("() => [...document.querySelectorAll('#tab-visualize img')].every(i => i.complete)")
    widths = page.eval_on_selector_all("#tab-visualize img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(widths) > 3 and all(w > 0 for w in widths)


@pytest.mark.browser
def test_page_needle_reviews_guides_then_learns_from_marked_results(page, served, gallery):  # noqa: F811
    from pictrieve.agents.needle.trust import TRUST_RECORD

    page.goto(served + "/#visualize")
    page.wait_for_selector("#tab-visualize:not([hidden])")
    page.select_option("#visualize-method", "needle")
    assert page.locator("#needle-help").is_visible()
    page.fill("#visualize-query", "a dog running on grass")
    page.fill("#visualize-guides-count", "3")
    page.click("#visualize-form button[type=submit]")
    page.wait_for_selector("#needle-guides-send:not([hidden])", timeout=180_000)
    labels = page.eval_on_selector_all("#visualize-guides .cap", "cs => cs.map(c => c.textContent)")
    assert len(labels) == 3 and all("not generated" in label and "to review" in label for label in labels)
    assert page.locator("#visualize-grid .card").count() == 0  # guides first, no results yet
    assert page.text_content("#needle-weights").startswith('Trust weights for topic "default"')
    page.check("#visualize-guides .card[data-id=g2] input.needle-reject")
    page.click("#needle-guides-send")
    page.wait_for_selector("#visualize-guides .card[data-id=g4]", timeout=180_000)
    page.wait_for_selector("#needle-guides-send:not([hidden])")
    assert "replaces g2" in page.text_content("#visualize-guides .card[data-id=g4] .cap")
    assert "rejected, replaced" in page.text_content("#visualize-guides .card[data-id=g2] .cap")
    assert page.locator("#visualize-guides input.needle-reject").count() == 1  # only the new one is reviewed
    page.click("#needle-guides-send")  # approve the replacement
    page.wait_for_selector("#needle-results-send:not([hidden])", timeout=180_000)
    shown = page.eval_on_selector_all("#visualize-grid .card", "cs => cs.map(c => c.dataset.id)")
    assert len(shown) > 1
    page.wait_for_function("() => [...document.querySelectorAll('#tab-visualize img')].every(i => i.complete)")
    widths = page.eval_on_selector_all("#tab-visualize img", "imgs => imgs.map(i => i.naturalWidth)")
    assert all(w > 0 for w in widths)
    page.locator("#visualize-grid input.needle-irrelevant").first.check()
    page.click("#needle-results-send")
    page.wait_for_function("() => !document.getElementById('visualize-steps').querySelector('li.current') && "
                           "document.getElementById('needle-results-send').hidden && "
                           "!document.querySelector('#visualize-grid input')", timeout=180_000)
    after = page.eval_on_selector_all("#visualize-grid .card", "cs => cs.map(c => c.dataset.id)")
    assert shown[0] not in after and len(after) >= 1
    weights = page.text_content("#needle-weights")
    assert f"{gallery.embedder_name} 1.000" in weights and "one embedder" in weights
    steps = page.eval_on_selector_all("#visualize-steps li", "lis => lis.map(l => l.textContent)")
    assert any("trust weights updated" in step for step in steps)
    assert page.is_hidden("#error")
    gallery.put_json(TRUST_RECORD, {})


@pytest.mark.browser
def test_page_asks_about_a_gallery_photo_from_the_viewer(page, served):  # noqa: F811
    page.goto(served)
    page.wait_for_function("() => document.getElementById('status').textContent.includes('images')")
    page.fill("#query", "a horse")
    page.click("#search-form button")
    page.locator("#search-grid .card").first.click()
    page.click("#viewer-ask")
    page.wait_for_selector("#tab-ask:not([hidden])")
    assert page.locator("#ask-chosen").is_visible() and "gallery photo" in page.text_content("#ask-chosen-text")
    page.fill("#ask-question", "What is this?")
    page.click("#ask-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('ask-answer').textContent.length > 0", timeout=180_000)
    page.wait_for_function("() => document.getElementById('ask-img').naturalWidth > 0")  # loaded (not at once on a busy machine)
