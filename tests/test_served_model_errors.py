"""A served run whose language model cannot be called fails with the one-line error as the run's error.

The real ``langgraph dev`` (started by tests/helpers/langgraph_dev.py, as in tests/test_langgraph_server.py) serves the repository's
graphs over a tiny gallery; its operator points the chat model's endpoint (a run never chooses one) at the
OpenAI-compatible fake answering 401, or at a port where nothing listens: one server for each.
"""

from __future__ import annotations

import json

import pytest

from helpers import make_photo
from helpers.openai_fake import EXPECTED_ERRORS, OpenAIFake, dead_endpoint
from helpers.langgraph_dev import serve_repository, stop

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=["401", "closed"])
def served(request, tmp_path_factory, tiny_clip_name):
    """`langgraph dev` over six captioned photos, its model endpoint failing as ``request.param`` says;
    yields (url, captioned folder, case, base URL)."""
    from pictrieve.graphs.serving import ENV_ALLOW
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("served-errors")
    photos = root / "photos"
    for i in range(6):
        make_photo(photos / f"{i}.png", seed=i)
    (photos / "captions.jsonl").write_text(
        "\n".join(json.dumps({"image": f"{i}.png", "captions": [f"square number {i}"]}) for i in range(6)))
    Gallery.open(root / "g.gallery", tiny_clip_name).add(photos, progress=False)
    allowed = {"llm": ["openai:fake-llm"], "visualizer": [f"exemplar:{photos}"]}
    with OpenAIFake(status=401) as fake, dead_endpoint() as closed:
        base_url = {"401": fake.base_url, "closed": closed}[request.param]
        process, url = serve_repository(root, root / "g.gallery", PICTRIEVE_BASE_URL=base_url,
                                        **{ENV_ALLOW: json.dumps(allowed)})
        yield url, photos, request.param, base_url
        stop(process)


def test_a_served_run_reports_a_failing_model_as_its_error(served):
    from langgraph_sdk import get_sync_client

    url, photos, case, base_url = served
    client = get_sync_client(url=url)
    assistant = client.assistants.create("visret", config={"configurable": {
        "llm": "openai:fake-llm", "visualizer": f"exemplar:{photos}"}})
    thread = client.threads.create()
    run = client.runs.create(thread["thread_id"], assistant["assistant_id"], input={"query": "square number 2"})
    joined = client.runs.join(thread["thread_id"], run["run_id"])
    error = joined["__error__"]
    assert error["error"] == "ModelCallError" and client.threads.get(thread["thread_id"])["status"] == "error"
    message = error["message"]
    assert "\n" not in message and "'fake-llm'" in message and base_url in message and EXPECTED_ERRORS[case] in message
