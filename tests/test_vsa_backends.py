"""Search-backend and VLM plumbing of the Vision Search Assistant, without the network."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from PIL import Image

from pictrieve.tools.web import search as web_search
from pictrieve.tools.web.search import DDGSearch, SearchUnavailableError, as_search_backend


class _Limited:
    calls = 0

    def text(self, query, max_results=6, region=None):
        type(self).calls += 1
        if type(self).calls < 3:
            raise RuntimeError("https://duckduckgo.com/ 202 Ratelimit")
        return [{"href": "https://example.org/a", "title": "A", "body": "about a"}]


def test_ddgs_backs_off_on_rate_limits_then_answers(monkeypatch):
    monkeypatch.setattr(DDGSearch, "_client", staticmethod(lambda: _Limited()))
    monkeypatch.setattr(web_search.time, "sleep", lambda s: None)
    results = DDGSearch(retries=3, backoff_s=0.01).search("q", k=2)
    assert _Limited.calls == 3 and results[0].url == "https://example.org/a"


def test_ddgs_gives_one_clear_error_when_still_limited(monkeypatch):
    class Always:
        def text(self, *a, **k):
            raise RuntimeError("Ratelimit")

    monkeypatch.setattr(DDGSearch, "_client", staticmethod(lambda: Always()))
    monkeypatch.setattr(web_search.time, "sleep", lambda s: None)
    with pytest.raises(SearchUnavailableError, match="local:DIR"):
        DDGSearch(retries=1).search("q")


def test_a_langchain_retriever_is_a_search_backend():
    class Fixed(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            return [Document(page_content="Horses have 36 to 44 teeth.", metadata={"source": "https://h.org", "title": "H"})]

    results = as_search_backend(Fixed()).search("horse teeth")
    assert results[0].url == "https://h.org" and "44 teeth" in results[0].text


def test_unknown_backend_is_one_clear_error():
    with pytest.raises(web_search.UnknownSearchBackendError, match="ddgs"):
        as_search_backend("bing")


def test_vlm_sends_the_image_and_prompt_to_an_openai_compatible_endpoint():
    from pictrieve.tools.models.vlm import create_vlm

    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            seen["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "A red car, a 1967 coupe."}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        vlm = create_vlm("fake-llava", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", max_retries=0)
        out = vlm.caption([Image.new("RGB", (20, 10), (200, 0, 0))], prompt="Describe the car; which model is it?")
    finally:
        httpd.shutdown()
    assert out == ["A red car, a 1967 coupe."]
    content = seen["body"]["messages"][0]["content"]
    assert content[0]["text"].startswith("Describe the car")
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert seen["body"]["temperature"] == 0.2


def test_ddgs_distinguishes_found_nothing_from_every_engine_failing(monkeypatch):
    """ddgs raises "No results found." when its engines answered with nothing (an empty result here)
    and the last engine's error when all of them failed (a one-line error naming the cause)."""
    exceptions = pytest.importorskip("ddgs.exceptions")  # a submodule: `import ddgs` alone may not load it
    from helpers.openai_fake import dead_endpoint

    class NothingFound:
        def text(self, *a, **k):
            raise exceptions.DDGSException(web_search.NO_RESULTS)

    monkeypatch.setattr(DDGSearch, "_client", staticmethod(lambda: NothingFound()))
    assert DDGSearch().search("a query nobody wrote") == []
    monkeypatch.undo()
    with dead_endpoint() as url:  # every engine through a proxy where nothing listens: as with no network
        monkeypatch.setenv("DDGS_PROXY", url.removesuffix("/v1"))
        with pytest.raises(SearchUnavailableError) as failed:
            DDGSearch().search("dog breeds")
    message = str(failed.value)
    assert "\n" not in message and "Connect" in message and "internet connection" in message
    assert "rate-limit" not in message and "--search local:DIR" in message


def test_ask_with_a_web_search_that_cannot_reach_anything_says_so(tmp_path):
    """Issue 19.4 as a person met it: `ask ... --search ddgs` offline answered "The search found nothing"."""
    import os
    import subprocess
    import sys

    pytest.importorskip("ddgs")
    from helpers.openai_fake import dead_endpoint

    photo = tmp_path / "dog.png"
    Image.new("RGB", (96, 80), (150, 110, 60)).save(photo)
    with dead_endpoint() as url:
        result = subprocess.run(
            [sys.executable, "-m", "pictrieve.cli.main", "ask", str(photo), "What breed is this dog?", "--search", "ddgs"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "DDGS_PROXY": url.removesuffix("/v1")})
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert "every search failed" in errors[0] and "--search local:DIR" in errors[0]
    assert "found nothing" not in result.stdout


@pytest.mark.parametrize("name, error", [("bogus", "unknown search backend 'bogus'"),
                                         ("local:/nonexistent/pages", "no page folder at /nonexistent/pages")])
def test_a_wrong_search_name_is_refused_when_the_graph_is_built(name, error):
    """Issue 19.10: `--search bogus` was refused only after half a minute of loading models; the graph now
    checks the name when it is built, before any model (the detector here could never load)."""
    from pictrieve.errors import PictrieveError
    from pictrieve.graphs.vsa import build_vsa_graph

    with pytest.raises(PictrieveError, match=error):
        build_vsa_graph(None, llm="offline", detector="zeroshot:/nonexistent/detector", search=name)
