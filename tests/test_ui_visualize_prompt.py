"""The Visualize tab never shows the offline chat model's rewrite of a query (issue 37, item 4).

`pictrieve ui` hands the page the offline SmolLM2-135M as a model object; VisRet's query rewriter is an optional
need, and that object is no choice for it (the chat-model need knows it is too small), so the query is visualized
as written and the page says so. A capable chat model's rewrite is shown, labelled as its rewrite.
"""

from __future__ import annotations

import uuid

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from PIL import Image

from helpers.web_page import finished, gallery, page_client  # noqa: F401  (fixture: gallery)
from pictrieve.ui.app import create_app

QUERY = "a dog running on grass"


class RecordingVisualizer:
    """Grey squares as found guides; records the prompts it was asked to picture."""

    name = "recording"
    generates = False

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.settings_key = uuid.uuid4().hex  # its own guide cache: every request reaches it

    def visualize(self, prompt, *, n=1, seed=None):
        self.prompts.append(prompt)
        return [Image.new("RGB", (32, 32), (120 + 10 * i, 120, 120)) for i in range(n)]


def visualize(gallery, tmp_path, llm):
    visualizer = RecordingVisualizer()
    app = create_app(gallery, needs={"llm": llm, "visualizers": visualizer, "captioner": "none"},
                     state_dir=tmp_path / "state")
    client = page_client(app, raise_server_exceptions=False)
    view = finished(client, client.post("/api/visualize", json={"query": QUERY, "guides": 1, "k": 3}).json())
    assert not view["error"], view["error"]
    return view, visualizer.prompts


def test_with_the_offline_model_object_the_query_is_visualized_as_written(gallery, tmp_path):
    from pictrieve.tools.models.chat_models import create_chat_model

    view, asked = visualize(gallery, tmp_path, create_chat_model("offline"))  # as `pictrieve ui` passes it
    assert asked == [QUERY]  # no rewrite reached the visualizer
    assert view["result"]["prompt"] == QUERY and len(view["result"]["hits"]) == 3
    line = next(step for step in view["steps"] if "visualizing the query as written" in step)
    assert repr(QUERY) in line and "--llm" in line, view["steps"]
    assert not any("rewritten" in step for step in view["steps"]), view["steps"]


def test_a_capable_models_rewrite_is_shown_as_its_rewrite(gallery, tmp_path):
    rewrite = "a photo of a brown dog sprinting across a green lawn"
    view, asked = visualize(gallery, tmp_path, FakeListChatModel(responses=[rewrite]))
    assert asked == [rewrite] and view["result"]["prompt"] == rewrite
    assert any(step.startswith(f"prompt (rewritten by the chat model): {rewrite!r}") for step in view["steps"])
