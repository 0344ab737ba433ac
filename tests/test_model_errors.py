"""A language model that cannot be called is reported in one line, never hidden (issues 19.4 and 21.6).

Real clients against real local endpoints: the OpenAI-compatible fake answering 401 (wrong key) or 404
(unknown model), and a port where nothing listens (a dead endpoint). The command-line cases run the
real ``pictrieve`` in subprocesses, the three endpoints of one command side by side.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import ExitStack
from typing import Iterator

import pytest

from helpers import make_photo
from helpers.cli import CLI
from helpers.galleries import captioned_cli_gallery  # noqa: F401  (fixture)
from helpers.openai_fake import EXPECTED_ERRORS, OpenAIFake, dead_endpoint


@pytest.fixture()
def endpoints() -> Iterator[dict[str, str]]:
    """``{"401": url, "404": url, "closed": url}``, served for the test's duration."""
    with ExitStack() as stack:
        urls = {str(status): stack.enter_context(OpenAIFake(status=status)).base_url for status in (401, 404)}
        urls["closed"] = stack.enter_context(dead_endpoint())
        yield urls


def run_side_by_side(commands: dict[str, list[str]], stdin: str = "") -> dict[str, subprocess.CompletedProcess]:
    """Run each named command line of ``pictrieve`` at once; their results by name."""
    started = {name: subprocess.Popen([*CLI, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for name, args in commands.items()}
    results = {}
    for name, process in started.items():
        out, err = process.communicate(stdin, timeout=600)
        results[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return results


def assert_one_line_naming(result: subprocess.CompletedProcess, model: str, url: str, expected: str) -> None:
    """Exit 2, no traceback, and exactly one ``error:`` line naming the model, the endpoint and the cause."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert f"'{model}'" in errors[0] and url in errors[0] and expected in errors[0], errors[0]
    assert "During task" not in result.stderr and "chat model call failed" not in result.stderr


# ---------------------------------------------------------------- the helper itself


@pytest.mark.parametrize("case", ["401", "404", "closed"])
def test_a_failed_call_is_one_line_naming_model_endpoint_and_cause(case, endpoints):
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.llm_calls import ModelCallError, complete

    llm = create_chat_model("openai:fake-model", base_url=endpoints[case])
    with pytest.raises(ModelCallError) as failed:
        complete(llm, "Is it red?")
    message = str(failed.value)
    assert "\n" not in message and EXPECTED_ERRORS[case] in message
    assert "'fake-model'" in message and endpoints[case] in message
    assert failed.value.reason == {"401": "auth", "404": "not_found", "closed": "connection"}[case]
    # No word of the endpoint's reply is quoted (OpenAI's 401 body shows part of the key: the fake's "test-***-key")
    assert "test-***-key" not in message and "does not exist" not in message and "Incorrect" not in message


def test_openai_models_retry_a_failing_endpoint_once():
    """The openai client's default is two retries with backoff; across an agent's many calls that made a
    dead endpoint take minutes to surface. An endpoint failing with HTTP 500 is asked twice in all."""
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.llm_calls import ModelCallError, complete

    with OpenAIFake(status=500) as fake:
        with pytest.raises(ModelCallError, match="the endpoint failed"):
            complete(create_chat_model("openai:fake-model", base_url=fake.base_url), "Is it red?")
    assert len(fake.requests) == 2


def test_a_batch_with_one_failed_call_raises_instead_of_an_empty_reply():
    """PlugIR's filter asks in batches; one failed call must not become an empty answer."""
    from langchain_core.messages import HumanMessage

    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.llm_calls import ModelCallError, complete_batch

    with OpenAIFake(status=401) as fake:
        llm = create_chat_model("openai:fake-model", base_url=fake.base_url)
        with pytest.raises(ModelCallError, match="refused the API key"):
            complete_batch(llm, [[HumanMessage("a?")], [HumanMessage("b?")]])


# ---------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> str:
    return str(make_photo(tmp_path_factory.mktemp("photo") / "p.png", seed=3, size=(96, 80)))


def test_ask_reports_a_failing_llm_in_one_line(endpoints, photo):
    results = run_side_by_side({case: ["ask", photo, "What is this?", "--llm", "openai:fake-llm", "--base-url", url]
                                for case, url in endpoints.items()})
    for case, result in results.items():
        assert_one_line_naming(result, "fake-llm", endpoints[case], EXPECTED_ERRORS[case])


def test_ask_shows_each_step_without_being_asked(photo):
    """Without -v, `pictrieve ask` still prints a line per step on stderr as it finishes (it ran for 27 s
    without a word on a loaded machine); the answer alone is on stdout."""
    with OpenAIFake(lambda messages: "A small brown square.") as fake:
        result = subprocess.run([*CLI, "ask", photo, "What is this?", "--llm", "openai:fake-llm", "--base-url",
                                 fake.base_url, "--vlm", "openai:fake-vlm", "--vlm-base-url", fake.base_url],
                                capture_output=True, text=True, timeout=600, env={**os.environ, "OPENAI_API_KEY": "test"})
    assert result.returncode == 0, result.stderr
    steps = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if line.startswith("[")]
    assert any(s.startswith("regions:") for s in steps) and any(s.startswith("answered") for s in steps), result.stderr
    assert "A small brown square." in result.stdout and "regions:" not in result.stdout


def test_chat_with_a_failing_llm_stops_at_once_with_one_line(endpoints, captioned_cli_gallery, tmp_path):
    gallery, _ = captioned_cli_gallery
    results = run_side_by_side(
        {case: ["chat", "a photo", "-g", gallery, "--llm", "openai:fake-llm", "--base-url", url,
                "--checkpoint", str(tmp_path / f"{case}.sqlite"), "--captioner", "none"]
         for case, url in endpoints.items()},
        stdin="red\nstop\n")
    for case, result in results.items():
        assert_one_line_naming(result, "fake-llm", endpoints[case], EXPECTED_ERRORS[case])
        assert "Q1:" not in result.stdout  # no fallback question was asked


def test_visret_search_with_a_failing_llm_reports_it(endpoints, captioned_cli_gallery):
    gallery, photos = captioned_cli_gallery
    results = run_side_by_side(
        {case: ["search", "thing number 2", "-g", gallery, "--method", "visret", "--visualizer", f"exemplar:{photos}",
                "--llm", "openai:fake-llm", "--base-url", url] for case, url in endpoints.items()})
    for case, result in results.items():
        assert_one_line_naming(result, "fake-llm", endpoints[case], EXPECTED_ERRORS[case])
