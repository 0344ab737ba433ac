"""The language-model paths against a real OpenAI-compatible server running a real model (issue 39.6).

Every ``--llm openai:...`` path was tested only against :mod:`helpers.openai_fake`, which answers what a test
scripts. Here ``transformers serve`` runs the bundled SmolLM2-135M on loopback (:mod:`helpers.model_server`), as a
user's Ollama or vLLM would, and langchain-openai talks to it: a plain call and a stream, an unknown model's
error, and the commands and served graphs that call a chat model (``chat``, ``ask``, VisRet's rewrite, PlugIR
and VisRet through ``langgraph dev``). A 135M model writes poor text; these tests check that the calls are made,
answered and carried through, never what the text says (quality is measured elsewhere). The fake stays for fault
cases (tests/test_model_errors.py, tests/test_endpoint_check.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import make_photo
from helpers.cli import CLI
from helpers.galleries import captioned_cli_gallery  # noqa: F401  (fixture)
from helpers.model_server import ModelServer, serving_command, start_model_server

pytestmark = [pytest.mark.slow, pytest.mark.server]

API_KEY = {"OPENAI_API_KEY": "unused-by-a-local-server"}
"""langchain-openai wants a key; the local server ignores it."""


@pytest.fixture(scope="module")
def model_server(smollm2_checkpoint, tmp_path_factory) -> ModelServer:
    if serving_command() is None:
        pytest.skip("`transformers serve` needs FastAPI and uvicorn (pip install -e '.[test]')")
    server = start_model_server(smollm2_checkpoint, tmp_path_factory.mktemp("model-server"))
    yield server
    server.stop()


def pictrieve(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **API_KEY})


# ---------------------------------------------------------------- the client against the server


def test_a_chat_model_answers_and_streams_from_a_real_server(model_server, monkeypatch):
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.llm_calls import complete

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY["OPENAI_API_KEY"])
    llm = create_chat_model(model_server.llm, base_url=model_server.base_url)
    reply = llm.invoke("Name one colour.", max_tokens=12, temperature=0.0)
    assert isinstance(reply.content, str) and reply.content.strip()
    assert 0 < reply.usage_metadata["output_tokens"] <= 12  # the token limit reached the server
    chunks = [chunk.content for chunk in llm.stream("Name one colour.", max_tokens=12, temperature=0.0)]
    assert len([c for c in chunks if c]) >= 2 and "".join(chunks).strip()  # streamed piece by piece
    assert complete(llm, "Say yes or no: is snow cold?", max_tokens=8).strip()


def test_an_unknown_model_at_a_real_server_is_one_clear_error(model_server, monkeypatch, captioned_cli_gallery):
    """The server answers HTTP 400 for a model it does not serve: the call fails naming the model and the
    endpoint, and a command stops with one line, never with an empty answer."""
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.llm_calls import ModelCallError, complete

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY["OPENAI_API_KEY"])
    with pytest.raises(ModelCallError) as failed:
        complete(create_chat_model("openai:no-such-model", base_url=model_server.base_url), "Is it red?")
    assert "\n" not in str(failed.value)
    assert "'no-such-model'" in str(failed.value) and model_server.base_url in str(failed.value)
    gallery, photos = captioned_cli_gallery
    result = pictrieve("search", "thing number 2", "-g", gallery, "--method", "visret", "--visualizer",
                       f"exemplar:{photos}", "--llm", "openai:no-such-model", "--base-url", model_server.base_url)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert "'no-such-model'" in errors[0] and "HTTP 400" in errors[0], errors[0]


# ---------------------------------------------------------------- the commands


def test_chat_asks_with_a_real_model(model_server, captioned_cli_gallery, tmp_path):
    """`pictrieve chat` with the paper's LLM questioner at a real server: its questions, the redundancy
    filter and the reformulation are real completions, and the budget of one round ends with the final query."""
    gallery, _ = captioned_cli_gallery
    before = model_server.completion_requests()
    result = pictrieve("chat", "a photo of a thing", "-g", gallery, "--llm", model_server.llm, "--base-url",
                       model_server.base_url, "--arm", "cr+rce+f", "--rounds", "1", "--questions", "2",
                       "--filter-attempts", "1", "--reformulation-tokens", "48", "--top-n", "6", "-k", "3",
                       "--captioner", "none", "--checkpoint", str(tmp_path / "s.sqlite"), stdin="red\nstop\n")
    assert result.returncode == 0, result.stderr[-3000:]
    question = next(line for line in result.stdout.splitlines() if line.startswith("Q1:"))
    assert question[len("Q1:"):].strip()
    assert "Final query:" in result.stdout, result.stdout  # the reformulated query after the answer
    assert model_server.completion_requests() - before >= 2  # questions, then the reformulation


def test_ask_answers_with_a_real_model(model_server, tmp_path):
    """`pictrieve ask` with the LLM answerer at a real server, over the offline local pages: an answer comes
    back on stdout, written by the server's model."""
    from helpers import REPO_ROOT

    photo = make_photo(tmp_path / "p.png", seed=3, size=(96, 80))
    before = model_server.completion_requests()
    result = pictrieve("ask", str(photo), "How many teeth does a horse have?", "--llm", model_server.llm,
                       "--base-url", model_server.base_url, "--answerer", "llm", "--max-plan-turns", "1",
                       "--search", f"local:{REPO_ROOT / 'examples' / 'vsa-offline' / 'pages'}", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout)
    assert answer["answerer"] == "llm" and answer["answer"].strip()
    assert model_server.completion_requests() - before >= 1


def test_visret_rewrites_with_a_real_model(model_server, captioned_cli_gallery):
    gallery, photos = captioned_cli_gallery
    before = model_server.completion_requests()
    result = pictrieve("search", "thing number 2", "-g", gallery, "--method", "visret", "--visualizer",
                       f"exemplar:{photos}", "--llm", model_server.llm, "--base-url", model_server.base_url,
                       "-k", "3", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    hits = json.loads(result.stdout)
    hits = hits["hits"] if isinstance(hits, dict) else hits
    assert len(hits) == 3
    assert model_server.completion_requests() - before >= 1  # the rewrite was asked of the server


# ---------------------------------------------------------------- the served graphs


@pytest.fixture(scope="module")
def served(model_server, captioned_cli_gallery, tmp_path_factory):
    """`langgraph dev` over the gallery whose operator set the real server as the chat models' endpoint."""
    from helpers.langgraph_dev import serve_repository, stop
    from pictrieve.graphs.serving import ENV_ALLOW

    gallery, photos = captioned_cli_gallery
    root = tmp_path_factory.mktemp("served-real-model")
    allowed = {"llm": [model_server.llm], "visualizer": [f"exemplar:{photos}"]}
    process, url = serve_repository(root, Path(gallery), PICTRIEVE_BASE_URL=model_server.base_url,
                                    **API_KEY, **{ENV_ALLOW: json.dumps(allowed)})
    yield {"url": url, "photos": photos}
    stop(process)


def test_served_visret_streams_the_real_models_rewrite(model_server, served):
    """A VisRet run over the LangGraph server chooses the real model; in ``messages`` mode the rewrite's tokens
    arrive as they are generated, and the run's prompt is the model's text."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=served["url"])
    assistant = client.assistants.create("visret", config={"configurable": {
        "llm": model_server.llm, "visualizer": f"exemplar:{served['photos']}"}})
    before = model_server.completion_requests()
    pieces, values = [], None
    for part in client.runs.stream(None, assistant["assistant_id"], input={"query": "thing number 2"},
                                   context={"k": 3}, stream_mode=["messages-tuple", "values"]):
        if part.event == "messages":
            message, _metadata = part.data
            if message.get("content"):
                pieces.append(message["content"])
        elif part.event == "values":
            values = part.data
        assert part.event != "error", part.data
    assert len(pieces) >= 2  # token by token, not one final message
    assert values and values["prompt"].strip() and len(values["hits"]) == 3
    assert model_server.completion_requests() - before >= 1


def test_served_plugir_asks_the_real_models_question(model_server, served):
    import httpx
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=served["url"], timeout=httpx.Timeout(600.0))
    assistant = client.assistants.create("plugir", config={"configurable": {"llm": model_server.llm}})
    thread = client.threads.create()
    context = {"max_rounds": 1, "candidate_k": 6, "clusters": 2, "shown_k": 3, "questions_per_round": 2,
               "filter_attempts": 1}
    before = model_server.completion_requests()
    client.runs.wait(thread["thread_id"], assistant["assistant_id"], input={"description": "a photo of a thing"},
                     context=context)
    state = client.threads.get_state(thread["thread_id"])
    (pending,) = [i for task in state["tasks"] for i in task["interrupts"]]
    assert pending["value"]["question"].strip() and len(pending["value"]["shown"]) == 3
    assert model_server.completion_requests() - before >= 1
