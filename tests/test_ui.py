"""The web page (``pictrieve ui``): its JSON API in-process, then the page itself in headless Chromium.

The gallery is six small photos indexed with the tiny random CLIP model (real code path, fast); one
caption and one chat question carry markup that must be shown as text, never run. The chat uses a
scripted chat model (control flow only: no claim about question quality).
"""

from __future__ import annotations

from pathlib import Path

import pytest

fastapi = pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra: pip install -e '.[ui]'")

from helpers import make_photo  # noqa: E402
from helpers.plugir_fakes import ScriptedChatModel  # noqa: E402
from helpers.web_page import browser, chat_step, gallery, page, page_client, serve  # noqa: E402,F401  (fixtures: browser, gallery, page)

from pictrieve.ui.app import create_app  # noqa: E402

SCRIPT_QUESTION = "Is it <img src=x onerror=\"window.__pwned=2\"> red?"


def make_app(gallery, tmp_path, **kwargs):
    llm = ScriptedChatModel(questions=[SCRIPT_QUESTION])
    return create_app(gallery, needs={"llm": llm, "captioner": "none"}, state_dir=tmp_path / "state", **kwargs)


@pytest.fixture
def client(gallery, tmp_path):
    return page_client(make_app(gallery, tmp_path), raise_server_exceptions=False)


# --- API, in-process -------------------------------------------------------------------------------


def test_status_lists_count_embedders_and_methods(client, gallery):
    body = client.get("/api/status").json()
    assert body["count"] == 6 and body["embedder"] == gallery.embedder_name
    assert {"search", "plugir", "qc2"} <= set(body["methods"])


def test_text_search_returns_hits_whose_images_are_served(client, gallery):
    hits = client.post("/api/search", json={"query": "a red square", "k": 4}).json()["hits"]
    assert len(hits) == 4 and [h["rank"] for h in hits] == [1, 2, 3, 4]
    image = client.get(f"/api/image/{hits[0]['id']}")
    assert image.status_code == 200 and image.content == Path(hits[0]["path"]).read_bytes()


@pytest.mark.parametrize("bad", ["../../../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd",
                                 "/etc/passwd", "..", "img0.png", "0" * 24])
def test_image_bytes_only_for_gallery_ids(client, bad):
    response = client.get(f"/api/image/{bad}")
    assert response.status_code == 404
    assert b"root:" not in response.content


def test_static_files_only_by_exact_name(client):
    assert client.get("/app.js").status_code == 200
    for bad in ["/..%2Fapp.py", "/%2Fetc%2Fpasswd", "/__init__.py"]:
        response = client.get(bad)
        assert response.status_code == 404 and b"import" not in response.content


def test_a_refused_request_is_answered_without_raising_to_the_server(gallery, tmp_path):
    """A refused request (empty query, bad k, unknown method) is answered with its reason and goes no
    further: raised on to the server (a TestClient that raises server exceptions), uvicorn logged a
    traceback for each and closed the client's connection."""
    strict = page_client(make_app(gallery, tmp_path))  # raise_server_exceptions=True
    empty = strict.post("/api/search", json={"query": " "})
    assert empty.status_code == 400 and "type what you are looking for" in empty.json()["error"]
    assert strict.post("/api/search", json={"query": "a dog", "k": "many"}).status_code == 400
    assert strict.post("/api/methods/nosuch/run", json={"input": {}}).status_code == 400
    assert strict.post("/api/needle/nosuch/nostage", json={}).status_code == 404  # SessionNotFound


def test_upload_search_decodes_with_the_guarded_loader(client, tmp_path):
    photo = make_photo(tmp_path / "q.png", seed=3, size=(64, 48))
    hits = client.post("/api/search", files={"image": ("q.png", photo.read_bytes(), "image/png")}).json()["hits"]
    assert hits and hits[0]["path"].endswith("img3.png")  # the same pixels rank first
    response = client.post("/api/search", files={"image": ("x.png", b"not an image", "image/png")})
    assert response.status_code == 400 and "not a readable image" in response.json()["error"]


def test_upload_size_is_capped(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path, max_upload_bytes=1000), raise_server_exceptions=False)
    photo = make_photo(tmp_path / "big.png", seed=1, size=(200, 200))
    response = client.post("/api/search", files={"image": ("big.png", photo.read_bytes(), "image/png")})
    assert response.status_code == 413 and "larger than" in response.json()["error"]


def test_errors_are_one_readable_line(client):
    response = client.post("/api/search", json={"query": "  "})
    assert response.status_code == 400 and response.json() == {"error": "type what you are looking for, drop a picture, or fill in a filter to browse by"}
    assert "Traceback" not in client.post("/api/search", json={"query": "x", "k": "many"}).text
    assert "between 1 and" in client.post("/api/search", json={"query": "x", "k": 0}).json()["error"]


def test_chat_with_the_offline_model_asks_offline_questions_without_loading_it(gallery, tmp_path, monkeypatch):
    import pictrieve.tools.models.causal_lm as causal_lm

    def no_llm(*args, **kwargs):
        raise AssertionError("the offline chat must not load a language model")

    monkeypatch.setattr(causal_lm, "shared_causal_lm", no_llm)  # the model's object is made, its weights never load
    app = create_app(gallery, needs={"llm": None, "captioner": "none"}, state_dir=tmp_path / "state")
    client = page_client(app, raise_server_exceptions=False)
    view = chat_step(client, client.post("/api/chat/start", json={"description": "a square"}))
    assert view["question"] and view["question"] != SCRIPT_QUESTION and not view["done"]
    view = chat_step(client, client.post("/api/chat/reply", json={"thread": view["thread"], "answer": "yes"}))
    assert view["round"] == 1 and view["dialogue"][0]["answer"] == "yes"


def test_page_chat_with_the_offline_model_object_asks_offline_questions_at_once(gallery, tmp_path):
    """`pictrieve ui` hands the page the offline model as an object, not a name: on a real uvicorn the
    first question must still come from the offline questioner (its question spec is in the session's
    state), not from the 135M language model, which took minutes per round."""
    import httpx

    from pictrieve.graphs.plugir import build_plugir_graph
    from pictrieve.graphs.checkpoints import sqlite_checkpointer
    from pictrieve.tools.models.chat_models import create_chat_model

    app = create_app(gallery, needs={"llm": create_chat_model("offline"), "captioner": "none"},
                     state_dir=tmp_path / "state")
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        view = chat_step(http, http.post("/api/chat/start", json={"description": "a square"}))
    saved = build_plugir_graph(gallery, checkpointer=sqlite_checkpointer(tmp_path / "state" / "chat.sqlite"))
    spec = saved.get_state({"configurable": {"thread_id": view["thread"]}}).values["question_spec"]
    assert spec and spec["text"] == view["question"] and not view["done"]


def test_more_like_this_puts_the_image_first(client, gallery):
    target = gallery.ids()[2]
    hits = client.post("/api/search", json={"like": target}).json()["hits"]
    assert hits[0]["id"] == target


def test_chat_round_and_found_survive_a_new_server(gallery, tmp_path):
    client = page_client(make_app(gallery, tmp_path), raise_server_exceptions=False)
    view = chat_step(client, client.post("/api/chat/start", json={"description": "a red square"}))
    assert view["question"] == SCRIPT_QUESTION and len(view["shown"]) == 6 and not view["done"]
    view = chat_step(client, client.post("/api/chat/reply", json={"thread": view["thread"], "answer": "yes, bright red"}))
    assert view["round"] == 1 and view["dialogue"][0]["answer"] == "yes, bright red"
    # A new app on the same state folder (a server restart) still knows the session.
    again = page_client(make_app(gallery, tmp_path), raise_server_exceptions=False)
    assert again.get(f"/api/chat/{view['thread']}").json()["question"] == view["question"]
    pick = view["shown"][1]["id"]
    done = chat_step(again, again.post("/api/chat/reply", json={"thread": view["thread"], "found": pick}))
    assert done["done"] and done["found"]["id"] == pick
    assert "ended" in again.post("/api/chat/reply", json={"thread": view["thread"], "answer": "x"}).json()["error"]
    assert again.get("/api/chat/..%2Fetc").status_code in (400, 404)


def test_steer_without_a_trained_model_says_how_to_train(client):
    try:
        import pictrieve.agents.qc2.pipeline  # noqa: F401
    except ImportError as exc:  # QC2's own modules broken: its tests report that, not this one
        pytest.skip(f"QC2 cannot be imported here: {exc}")
    response = client.post("/api/steer", json={"query": "a dog", "relevance": "high", "quality": "high"})
    assert response.status_code == 400 and "pictrieve quality train" in response.json()["error"]


# --- the page in a real browser --------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(gallery, tmp_path_factory):
    """The app on a free loopback port, served by uvicorn in a thread."""
    with serve(make_app(gallery, tmp_path_factory.mktemp("served"))) as url:
        yield url


def loaded_images(page, grid: str) -> list[int]:
    page.wait_for_function(f"() => [...document.querySelectorAll('#{grid} img')].length > 0 && "
                           f"[...document.querySelectorAll('#{grid} img')].every(i => i.complete)")
    return page.eval_on_selector_all(f"#{grid} img", "imgs => imgs.map(i => i.naturalWidth)")


@pytest.mark.browser
def test_page_searches_by_text_and_shows_images_and_status(page, served):
    page.goto(served)
    page.wait_for_function("() => document.getElementById('status').textContent.includes('6 images')")
    page.fill("#query", "a red square")
    page.click("#search-form button")
    widths = loaded_images(page, "search-grid")
    assert len(widths) == 6 and all(w > 0 for w in widths)
    # The caption with markup is shown as text and never runs.
    assert page.locator(".card .cap", has_text="<script>").count() == 1
    assert page.evaluate("window.__pwned") is None
    page.locator(".card").first.click()
    assert page.locator("#viewer").is_visible()
    page.click("#viewer-like")
    assert all(w > 0 for w in loaded_images(page, "search-grid"))


@pytest.mark.browser
def test_page_searches_by_uploaded_image(page, served, tmp_path):
    photo = make_photo(tmp_path / "q.png", seed=4, size=(64, 48))
    page.goto(served)
    page.set_input_files("#upload", str(photo))
    page.wait_for_selector("#search-grid .card")
    assert "img4.png" in page.locator("#search-grid .card .cap").first.text_content()


@pytest.mark.browser
def test_page_shows_errors_as_text(page, served):
    page.goto(served)
    page.wait_for_function("() => document.getElementById('status').textContent.includes('images')")
    page.click("#search-form button")
    page.wait_for_selector("#error:not([hidden])")
    assert page.text_content("#error") == "type what you are looking for, drop a picture, or fill in a filter to browse by"


@pytest.mark.browser
def test_page_chat_round_survives_reload_and_found_by_click(page, served):
    page.goto(served + "/#chat")
    page.wait_for_selector("#tab-chat:not([hidden])")
    page.fill("#chat-description", "a red square")
    page.click("#chat-start button")
    page.wait_for_selector("#chat-grid .card")
    assert SCRIPT_QUESTION in page.text_content("#chat-question")  # the LLM's markup is text
    assert page.evaluate("window.__pwned") is None
    page.fill("#chat-reply", "yes")
    page.click("#chat-answer button[type=submit]")
    page.wait_for_function("() => document.getElementById('chat-dialogue').children.length === 1")
    page.reload()
    page.wait_for_function("() => document.getElementById('chat-dialogue').children.length === 1")
    assert "Round 2" in page.text_content("#chat-question")
    page.locator("#chat-grid .card").nth(1).click()
    page.wait_for_function("() => document.getElementById('chat-outcome').textContent.startsWith('Found')")
