"""Every method served by the real `langgraph dev` on 127.0.0.1, driven through langgraph-sdk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import REPO_ROOT
from helpers.galleries import tiny_gallery  # noqa: F401  (fixture)
from helpers.langgraph_dev import LANGGRAPH_JSON, serve_repository, stop
from helpers.serve import wait_for_warm_up
from helpers.vsa_fakes import save_tiny_owlvit
from pictrieve.graphs.registry import builtin_methods
from pictrieve.graphs.serving import repository_langgraph_config

pytestmark = pytest.mark.server


def test_langgraph_json_is_what_the_registry_gives():
    """The repository's langgraph.json lists exactly the built-in methods of the registry, each at its
    factory in graphs/serving.py (regenerate it from ``repository_langgraph_config()`` after adding one)."""
    assert json.loads(LANGGRAPH_JSON.read_text()) == repository_langgraph_config()
    assert set(repository_langgraph_config()["graphs"]) == set(builtin_methods())
    from pictrieve.graphs import serving

    for target in json.loads(LANGGRAPH_JSON.read_text())["graphs"].values():
        path, _, attribute = target.partition(":")
        assert (REPO_ROOT / path).resolve() == Path(serving.__file__).resolve()
        assert callable(vars(serving)[attribute])  # the server reads the module's namespace, not getattr


def _train_tiny_qc2(gallery, tmp_path_factory) -> None:
    from helpers.qc2_fakes import build_tiny_checkpoint

    from pictrieve.agents.qc2.annotation import annotate_gallery
    from pictrieve.agents.qc2.pipeline import train_on_gallery
    from pictrieve.agents.qc2.training import QC2TrainConfig
    from pictrieve.tools.models.quality_scorers import create_quality_scorer

    annotate_gallery(gallery, [create_quality_scorer("brisque")], progress=False)
    checkpoint = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama"))
    train_on_gallery(gallery, base_model=checkpoint, progress=False,
                     config=QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1))


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_clip_name):
    """`langgraph dev` serving the repository's langgraph.json over a tiny gallery.

    What a run may not choose is the operator's, set here: one fake OpenAI endpoint (each test sets its
    replies) as the chat and vision models' base URL, the photos folder for image paths, and the
    detector, search folder and visualizer that the tests' assistants choose among (``--allow``)."""
    from helpers import make_photo
    from helpers.openai_fake import OpenAIFake
    from pictrieve.graphs.serving import ENV_ALLOW, ENV_ALLOW_DIRS
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("served")
    photos = root / "photos"
    for i in range(6):
        make_photo(photos / f"img{i}.png", seed=i)
    (photos / "img0.txt").write_text("a red square\n")
    gallery = Gallery.open(root / "g.gallery", tiny_clip_name)
    gallery.add(photos, progress=False)
    _train_tiny_qc2(gallery, tmp_path_factory)  # saved as <gallery>/qc2, where the served qc2 graph looks
    reference = root / "reference"  # NEEDLE's captioned exemplars (see NEEDLE_CAPTIONS)
    reference.mkdir()
    (reference / "captions.jsonl").write_text(
        "\n".join(json.dumps({"image": str(photos / f"img{i}.png"), "captions": [caption]})
                  for i, caption in enumerate(NEEDLE_CAPTIONS)))
    pages = root / "pages"
    pages.mkdir()
    shutil.copy(REPO_ROOT / "examples" / "vsa-offline" / "pages" / "horses.md", pages / "horses.md")
    shutil.copy(REPO_ROOT / "examples" / "vsa-offline" / "pages" / "dogs.html", pages / "dogs.html")
    owl = save_tiny_owlvit(root / "owl")
    allowed = {"llm": ["openai:fake-model"], "vlm": ["openai:fake-vlm"], "detector": [f"zeroshot:{owl}"],
               "search": [f"local:{pages}"], "visualizer": [f"exemplar:{reference}"]}
    with OpenAIFake() as fake:
        process, url = serve_repository(
            root, root / "g.gallery", OPENAI_API_KEY="test-key-for-a-local-fake", PICTRIEVE_BASE_URL=fake.base_url,
            PICTRIEVE_VLM_BASE_URL=fake.base_url, **{ENV_ALLOW: json.dumps(allowed), ENV_ALLOW_DIRS: str(photos)})
        yield {"url": url, "gallery": gallery, "photos": photos, "fake": fake, "reference": reference,
               "pages": pages, "owl": owl, "root": root}
        stop(process)


@pytest.fixture
def fake(server):
    """The operator's fake OpenAI endpoint, its requests cleared; the test sets ``fake.reply``."""
    server["fake"].requests.clear()
    server["fake"].status = None
    return server["fake"]


def test_search_over_the_server_matches_the_library(server):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server["url"])
    served = {a["graph_id"] for a in client.assistants.search(limit=100)}
    assert served == set(builtin_methods())
    result = client.runs.wait(None, "search", input={"query": "a red square"}, context={"k": 3})
    expected = server["gallery"].search_text("a red square", k=3, hybrid=True)
    assert [h["id"] for h in result["hits"]] == [h.id for h in expected]
    assert result["hits"][0]["rank"] == 1 and isinstance(result["hits"][0]["score"], float)
    target = str(server["photos"] / "img4.png")
    by_image = client.runs.wait(None, "search", input={"image": target}, context={"k": 1})
    assert by_image["hits"][0]["path"] == target


def test_the_server_loads_the_methods_before_the_first_run(server):
    """The operator's gallery and models are loaded when the server starts, so the runs' graphs are built
    from cached parts: no factory call after the warm-up loads anything (the server's log would say
    what it loaded, :func:`~pictrieve.graphs.serving._graph_for_run`). Read from the log, not timed:
    LangGraph's own "Slow graph load" mark (a factory call over 250 ms) measures the machine as well."""
    from langgraph_sdk import get_sync_client

    from pictrieve.graphs.serving import LOADED_ON_REQUEST

    ready = wait_for_warm_up(server["root"], "langgraph-*.log")
    # the log of the server that answers (a start retried on another port leaves the first one's log)
    log = Path(server["root"]) / f"langgraph-{server['url'].rsplit(':', 1)[1]}.log"
    assert "search ok" in ready and "plugir ok" in ready, log.read_text()[-3000:]
    # the text side of the gallery's embedder too (open_clip builds its torch model for the first text when its
    # image tower runs from an export; built during a run, it slowed the run's graph accesses)
    assert "text queries ok" in ready, ready
    client = get_sync_client(url=server["url"])
    client.runs.wait(None, "search", input={"query": "a red square"}, context={"k": 2})
    text = log.read_text()
    after_warm_up = text[text.index("served methods ready"):]  # this run and any other test's since (runs before
    # the line may have raced the warm-up for a part, and loaded it themselves)
    loaded = [line for line in after_warm_up.splitlines() if LOADED_ON_REQUEST in line]
    assert not loaded, loaded


def test_a_served_run_logs_a_part_it_loaded_and_not_one_that_was_cached(tiny_gallery, monkeypatch,
                                                                         caplog):
    """The server's factory says in its log when a run's graph had to load a part (here the operator's gallery,
    not opened ahead), and says nothing when every part was cached: what the served-methods test reads to know
    that the warm-up loaded the first run's parts, without timing anything."""
    import asyncio
    import logging

    from pictrieve.graphs import serving
    from pictrieve.tools.core.model_cache import forget_shared_models

    location = str(tiny_gallery.location)
    monkeypatch.setenv(serving.ENV_GALLERY, location)
    forget_shared_models(lambda key: key[:2] == ("served-gallery", location))
    factory = serving._factory("search")
    with caplog.at_level(logging.INFO, logger=serving.logger.name):
        asyncio.run(factory({"configurable": {}}))
        first = [r.getMessage() for r in caplog.records if serving.LOADED_ON_REQUEST in r.getMessage()]
        caplog.clear()
        asyncio.run(factory({"configurable": {}}))
        again = [r.getMessage() for r in caplog.records if serving.LOADED_ON_REQUEST in r.getMessage()]
    assert len(first) == 1 and first[0].startswith("search: ") and f"served-gallery:{location}" in first[0], first
    assert again == []


def test_pictrieve_serve_takes_a_gallery_relative_to_the_folder_it_is_run_in(server):
    """`pictrieve serve -g ./my.gallery`, typed in the folder holding the gallery (the README's form): the
    server runs in a folder of its own, and still searches that gallery."""
    import os
    import subprocess
    import sys

    from langgraph_sdk import get_sync_client

    from helpers import free_port
    from helpers.langgraph_dev import answers
    from helpers.serve import stop_group

    folder = Path(server["gallery"].location).parent
    port = free_port()
    log = folder / f"serve-{port}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pictrieve.cli.main", "serve", "-g", "g.gallery", "--port", str(port)],
            cwd=folder, env={**os.environ, "PICTRIEVE_CACHE": str(folder / "cache"), "LANGSMITH_TRACING": "false",
                             "HF_HUB_OFFLINE": "1"},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        assert answers(process, url), f"pictrieve serve did not start: {log.read_text()[-3000:]}"
        result = get_sync_client(url=url).runs.wait(None, "search", input={"query": "a red square"}, context={"k": 2})
        assert [hit["id"] for hit in result["hits"]] == [h.id for h in server["gallery"].search_text("a red square", k=2, hybrid=True)]
    finally:
        stop_group(process)  # pictrieve serve and the langgraph dev it started


def _scripted_replies(messages):
    """What the fake OpenAI endpoint says, by the kind of PlugIR prompt it receives (control flow only)."""
    system = str(messages[0].get("content", "")) if messages else ""
    if "Uncertain" in system:
        return "Uncertain"
    if "[New Caption]" in system:
        return "a red square on a white wall"
    return "What colour is the square?"


def test_plugir_round_pauses_for_the_answer_and_resumes_over_the_server(server, fake):
    """One PlugIR round through the real server: the question arrives as an interrupt, the answer
    resumes the thread from the server's own checkpointer, and the next round's query uses it."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server["url"])
    fake.reply = _scripted_replies
    assistant = client.assistants.create("plugir", config={"configurable": {"llm": "openai:fake-model"}})
    thread = client.threads.create()
    context = {"max_rounds": 2, "candidate_k": 6, "clusters": 2, "shown_k": 3, "questions_per_round": 2}
    client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                     input={"description": "a square"}, context=context)
    state = client.threads.get_state(thread["thread_id"])
    (pending,) = [i for task in state["tasks"] for i in task["interrupts"]]
    payload = pending["value"]
    assert payload["round"] == 1 and payload["question"] == "What colour is the square?"
    assert len(payload["shown"]) == 3 and payload["shown"][0]["rank"] == 1
    result = client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                              command={"resume": "red"}, context=context)
    assert result["dialogue"] == [{"question": "What colour is the square?", "answer": "red"}]
    assert result["queries"] == ["a square", "a red square on a white wall"]
    assert any(r["path"].endswith("/chat/completions") for r in fake.requests)


def test_plugir_with_the_served_default_model_asks_offline_questions_at_once(server):
    """The server's default chat model is the offline one, handed to PlugIR as a model object from the
    shared model cache: the first question must come from the offline questioner (a question spec with
    the question's kind and terms), not from the 135M language model, which took minutes per round."""
    import httpx
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server["url"], timeout=httpx.Timeout(120.0))  # answers at all in 2 min
    thread = client.threads.create()
    client.runs.wait(thread["thread_id"], "plugir", input={"description": "a square"},
                     context={"candidate_k": 6, "shown_k": 3})
    state = client.threads.get_state(thread["thread_id"])
    (pending,) = [i for task in state["tasks"] for i in task["interrupts"]]
    spec = state["values"]["question_spec"]
    assert spec and spec["text"] == pending["value"]["question"] and spec["kind"]
    assert len(pending["value"]["shown"]) == 3


def test_qc2_over_the_server_completes_and_retrieves(server):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server["url"])
    result = client.runs.wait(None, "qc2", input={"query": "a square", "levels": {"quality": "high"}},
                              context={"k": 2, "samples": 2, "seed": 0, "max_new_tokens": 3})
    assert result["resolved_levels"]["Quality"] == "High" and len(result["completions"]) == 2
    assert all(c.startswith("a square") for c in result["completions"])
    assert [h["rank"] for h in result["hits"]] == [1, 2]


# Fixed guides for NEEDLE: one distinct caption per photo, and a rewriter that answers with the caption of
# img4 whatever it is asked, so the exemplar visualizer's best match is that photo (cosine 1 against
# captions that share no word with it). The served default rewriter, the 135M offline LLM, rewrote the
# query differently from run to run, and the exemplar choice among near-equal captions ("square number
# 3" / "... 4") followed it: the test failed about half the time.
NEEDLE_CAPTIONS = ["a red kite over a beach", "two dogs on green grass", "a yellow taxi in the rain",
                   "a child eating ice cream", "snowy mountains under a blue sky", "a brown horse in a stable"]


def test_needle_pauses_for_result_feedback_and_learns_over_the_server(server, fake):
    """NEEDLE through the real server: exemplar guides from a captioned folder, the results arrive as an
    interrupt, the marks resume the thread, and the learned trust weights are stored in the gallery."""
    from langgraph_sdk import get_sync_client

    from pictrieve.agents.needle.trust import load_trust

    photos = server["photos"]
    client = get_sync_client(url=server["url"])
    fake.reply = lambda messages: NEEDLE_CAPTIONS[4]
    assistant = client.assistants.create("needle", config={"configurable": {
        "visualizer": f"exemplar:{server['reference']}", "llm": "openai:fake-model"}})
    thread = client.threads.create()
    # One guide: its own photo must come first (with two, the second guide's photo ties with it up to
    # float noise of the tiny random CLIP, whose vectors of the random photos are all nearly alike).
    context = {"k": 3, "guides": 1, "feedback": "results", "eta": 0.5}
    client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                     input={"query": "mountains with snow", "topic": "served"}, context=context)
    state = client.threads.get_state(thread["thread_id"])
    (pending,) = [i for task in state["tasks"] for i in task["interrupts"]]
    hits = pending["value"]["hits"]
    assert state["values"]["prompt"] == NEEDLE_CAPTIONS[4]  # the rewriter's, not the query
    assert [g["path"] for g in state["values"]["guides"]] == [str(photos / "img4.png")]
    assert pending["value"]["kind"] == "results" and len(hits) == 3
    assert hits[0]["path"] == str(photos / "img4.png")  # the guide is this photo
    result = client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                              command={"resume": {"irrelevant": [hits[2]["id"]]}}, context=context)
    assert hits[2]["id"] not in {h["id"] for h in result["hits"]}
    assert [g["status"] for g in result["guides"]] == ["used"]
    assert "served" in load_trust(server["gallery"]).weights


def _vsa_replies(messages):
    """The fake OpenAI endpoint as VLM, planner, searcher and answerer of the vsa graph (control flow only)."""
    text = " ".join(str(m.get("content", "")) for m in messages)
    if "image_url" in text:
        return "a brown horse standing in a field"
    if "Findings so far" in text:
        return '{"done": true}'
    if "JSON only" in text:
        return '{"sub_questions": [{"question": "adult horse number of teeth", "region": 1}]}'
    if "Sub-question" in text:
        return "An adult horse has 36 to 44 teeth [1]."
    if "Rewrite the description" in text:
        return "a brown horse in a field"
    return "An adult horse has 36 to 44 teeth [1] [5]."  # [5] was never read: the graph must remove it


def test_vsa_answers_over_the_server_with_checked_numbered_sources(server, fake):
    """The Vision Search Assistant through the real server: a zero-shot detector from a folder (a tiny
    random OWL-ViT), VLM and LLM at a fake OpenAI endpoint, the offline local-page search. The plan, the
    searcher's pages and an answer whose citation of an unread source was removed come back over the SDK."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server["url"])
    fake.reply = _vsa_replies
    assistant = client.assistants.create("vsa", config={"configurable": {
        "llm": "openai:fake-model", "vlm": "openai:fake-vlm", "detector": f"zeroshot:{server['owl']}",
        "search": f"local:{server['pages']}"}})
    result = client.runs.wait(None, assistant["assistant_id"],
                              input={"image": str(server["photos"] / "img1.png"),
                                     "question": "How many teeth does this animal have?"},
                              context={"max_regions": 1, "pages_per_search": 1})
    assert result["plan_mode"] in ("structured", "json") and result["answerer"] == "llm"
    assert [f["question"] for f in result["findings"]] == ["adult horse number of teeth"]
    assert result["sources"][0]["url"].endswith("/horses.md")
    assert result["answer"] == "An adult horse has 36 to 44 teeth [1]."
    assert result["citations"] == {"cited": [1], "dropped": [5], "uncited": False}
    assert any("image_url" in json.dumps(r["body"]) for r in fake.requests)  # the VLM saw the crop
