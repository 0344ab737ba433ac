"""A named ``--llm``/``--vlm`` endpoint is checked with one cheap call before any slow local work.

Real local HTTP servers stand in for the endpoints: a port where nothing listens (refused), one that takes
connections and never answers, one that refuses the key (401) or has no such route (404), and a healthy
OpenAI-compatible fake. Each command is the real ``pictrieve`` in a subprocess and must exit with one line
before it does its slow work. How that order is seen without timing: the endpoint's line comes instead of
what the next step would have said (a gallery that does not exist, the first step line of a run).
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from helpers.cli import one_clear_line, refused_at_the_start, run
from helpers.galleries import tiny_gallery  # noqa: F401  (fixture)
from helpers.openai_fake import OpenAIFake, dead_endpoint, silent_endpoint
from pictrieve.tools.models.llm_calls import ModelCallError, check_endpoint

LEAKED = "Incorrect API key"  # what the fake's 401 body says: a message must never quote it


def test_a_healthy_endpoint_is_asked_once_with_the_key(monkeypatch, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    with OpenAIFake(models=("served-model",)) as fake:
        check_endpoint("openai:served-model", fake.base_url)
        assert fake.listings == [{"path": "/v1/models", "authorization": "Bearer sk-test-key"}]
        assert fake.requests == []  # no completion asked: no tokens spent
        with caplog.at_level(logging.WARNING):
            check_endpoint("openai:other-model", fake.base_url)  # not listed: said, not refused
    assert "does not list model 'other-model'" in caplog.text


@pytest.mark.parametrize("status, reason, said", [(401, "auth", "refused the API key (HTTP 401)"),
                                                  (403, "permission", "(HTTP 403)"),
                                                  (404, "not_found", "no such model there (or a wrong URL) (HTTP 404)"),
                                                  (500, "server", "(HTTP 500)")])
def test_a_refusing_endpoint_is_one_line_that_never_quotes_its_reply(status, reason, said):
    with OpenAIFake(status=status) as fake:
        with pytest.raises(ModelCallError) as caught:
            check_endpoint("openai:m", fake.base_url, option="--vlm", base_option="--vlm-base-url")
    message = str(caught.value)
    assert caught.value.reason == reason and said in message and message.startswith(f"--vlm model 'm' at {fake.base_url}: ")
    assert "\n" not in message and LEAKED not in message and "does not exist" not in message


def test_a_closed_port_and_a_silent_server_fail_in_the_time_allowed():
    with dead_endpoint() as url:
        with pytest.raises(ModelCallError, match="could not connect.*check that the server is running and --base-url"):
            check_endpoint("openai:m", url)
    with silent_endpoint() as url:
        start = time.monotonic()
        with pytest.raises(ModelCallError, match=r"no answer within 0.5 s") as caught:
            check_endpoint("openai:m", url, timeout=0.5)
        assert caught.value.reason == "timeout" and time.monotonic() - start < 30


def test_local_models_and_other_providers_are_not_called():
    with dead_endpoint() as url:
        for name in ("offline", "local:/some/checkpoint", None, "anthropic:claude-x"):
            check_endpoint(name, url)  # nothing to call, or no common cheap call: no error, no wait


# --- the commands ------------------------------------------------------------------------------------------


def test_ask_stops_at_a_dead_llm_before_its_first_step(tmp_path):
    from PIL import Image

    photo = tmp_path / "photo.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(photo)
    with dead_endpoint() as url:
        result = run("ask", str(photo), "what is this?", "--llm", "openai:m", "--base-url", url)
    line = one_clear_line(result)  # no "[ 0.0s] finding regions ..." before it: the detector never loaded
    assert result.returncode == 2 and line.startswith(f"error: --llm model 'm' at {url}: could not connect"), line
    with OpenAIFake(status=401) as fake:
        result = run("ask", str(photo), "what is this?", "--vlm", "openai:v", "--vlm-base-url", fake.base_url)
    line = one_clear_line(result)
    assert result.returncode == 2 and "--vlm model 'v'" in line and "refused the API key" in line and LEAKED not in line


def test_chat_mcp_ui_and_serve_check_the_endpoint_before_anything_else(tmp_path):
    """The gallery named does not exist: a command that opened it first would say so instead."""
    missing = str(tmp_path / "no-such-gallery")
    with silent_endpoint() as url:
        start = time.monotonic()
        result = run("chat", "a dog", "-g", missing, "--llm", "openai:m", "--base-url", url)
        assert time.monotonic() - start < 120  # 5 s for the endpoint, then out (never a hang)
    line = one_clear_line(result)
    assert result.returncode == 2 and line.startswith(f"error: --llm model 'm' at {url}: no answer within 5 s"), line
    with dead_endpoint() as url:
        for command in (["mcp", "-g", missing], ["ui", "-g", missing], ["serve", "--gallery", missing]):
            result = run(*command, "--llm", "openai:m", "--base-url", url)
            line = one_clear_line(result)
            assert result.returncode == 2 and line.startswith(f"error: --llm model 'm' at {url}: could not connect"), \
                (command, line)
        result = run("mcp", "-g", missing, "--vlm", "openai:v", "--vlm-base-url", url)
        assert "--vlm model 'v'" in one_clear_line(result)


def test_visret_and_needle_stop_at_a_dead_llm_before_their_first_step(tiny_gallery, tmp_path):
    from PIL import Image

    reference = tmp_path / "reference"
    (reference / "images").mkdir(parents=True)
    Image.new("RGB", (64, 48), (200, 30, 30)).save(reference / "images" / "0.png")
    (reference / "captions.jsonl").write_text(json.dumps({"image": "images/0.png", "captions": ["a red dog"]}) + "\n")
    with OpenAIFake(status=401) as fake:
        for method in ("visret", "needle"):
            result = run("search", "a dog", "-g", str(tiny_gallery.location), "--method", method,
                         "--visualizer", f"exemplar:{reference}", "--llm", "openai:m", "--base-url", fake.base_url)
            line = refused_at_the_start(result)  # no "  loading ..." model line, no "visualize..." step: nothing ran
            assert result.returncode == 2 and "--llm model 'm'" in line and "refused the API key" in line, line
