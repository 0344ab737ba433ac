"""LangChain's standard integration suite for tools (langchain-tests) on every tool pictrieve exports,
wired to real parts: ``image_search`` and ``ask_gallery`` on a real gallery (tiny random CLIP), the
reader and the Vision Search Assistant's language model the local chat model (tiny random checkpoint),
``ask_about_image`` the real graph with a tiny random OWL-ViT detector, the example pages searched
offline and a local OpenAI-compatible server as the VLM. The unit suite (``ToolsUnitTests``) for the
same tools is in ``test_vsa_tools.py``; the retriever's standard suite in ``test_retriever_standard.py``.

The tools' outputs from random weights mean nothing: the suite checks the tool-call contract
(``ToolMessage`` content from a ``ToolCall``, sync and async), and each class checks what came back names
what it should.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np

import pytest
from langchain_core.messages import ToolCall
from langchain_tests.integration_tests import ToolsIntegrationTests
from PIL import Image

from helpers import make_photo
from pictrieve.integrations.langchain_tools import ask_about_image_tool, ask_gallery_tool, image_search_tool
from pictrieve.tools.models.chat_models import LocalChatModel
from helpers.qc2_fakes import one_thread  # noqa: F401  (autouse: one torch thread)
from helpers.chat_checkpoints import tiny_chat_checkpoint  # noqa: F401  (fixture)
from helpers.vsa_fakes import pages, tiny_owlvit_detector  # noqa: F401  (fixture: the example pages, searched offline)

CAPTIONS = ["a black dog runs on the grass", "two children on a sandy beach", "a man rides a red bike"]


@pytest.fixture(scope="module")
def captioned_gallery(tmp_path_factory, tiny_clip_embedder):
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("tools-gallery")
    for i, caption in enumerate(CAPTIONS):
        make_photo(root / "photos" / f"{i}.png", seed=200 + i)
        (root / "photos" / f"{i}.txt").write_text(caption + "\n")  # a sidecar caption
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery


@pytest.fixture(scope="module")
def tiny_chat(tiny_chat_checkpoint):  # noqa: F811
    return LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=12, device="cpu")


@pytest.fixture(scope="module")
def vlm_endpoint():
    from helpers.openai_fake import OpenAIFake

    with OpenAIFake(lambda messages: "a brown horse standing in the snow") as fake:
        yield fake


def _mean_difference(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).mean())


class _StandardToolSuite(ToolsIntegrationTests):
    """The suite's tests unchanged; each subclass also checks one result of its own."""

    tool_instance = None

    @property
    def tool_constructor(self):
        return self.tool_instance

    def _message(self):
        call = ToolCall(name=self.tool_instance.name, args=self.tool_invoke_params_example, id="1", type="tool_call")
        message = self.tool_instance.invoke(call)
        assert message.tool_call_id == "1" and message.status == "success" and message.artifact is not None
        return message


class TestImageSearchToolStandard(_StandardToolSuite):
    @pytest.fixture(autouse=True)
    def _tool(self, captioned_gallery):
        self.tool_instance = image_search_tool(captioned_gallery)

    @property
    def tool_invoke_params_example(self) -> dict:
        return {"query": "a dog on the grass", "k": 2}

    def test_returns_json_hits_of_the_gallery_and_their_photos(self, captioned_gallery):
        message = self._message()
        rows = json.loads(message.content[0]["text"])
        assert rows == message.artifact
        assert [r["rank"] for r in rows] == [1, 2] and all(Path(r["path"]).is_file() for r in rows)
        assert {r["caption"] for r in rows} <= set(CAPTIONS)
        assert [h.id for h in captioned_gallery.search_text("a dog on the grass", k=2)] == [r["id"] for r in rows]
        images = [b for b in message.content if b["type"] == "image"]
        assert len(images) == 2
        files = sorted(Path(rows[0]["path"]).parent.glob("*.png"))
        for row, block in zip(rows, images):  # each picture is the hit's own photo (the nearest of all three)
            shown = Image.open(io.BytesIO(base64.b64decode(block["base64"])))
            assert shown.format == "JPEG" and shown.size == (48, 40)  # small photos are never enlarged
            nearest = min(files, key=lambda f: _mean_difference(shown.convert("RGB"), Image.open(f).convert("RGB")))
            assert str(nearest) == row["path"]


class TestAskGalleryToolStandard(_StandardToolSuite):
    @pytest.fixture(autouse=True)
    def _tool(self, captioned_gallery, tiny_chat):
        self.tool_instance = ask_gallery_tool(captioned_gallery, reader=tiny_chat)

    @property
    def tool_invoke_params_example(self) -> dict:
        return {"question": "which photo shows a dog?", "k": 2}

    def test_answer_names_the_photos_it_read(self):
        message = self._message()
        text = message.content[0]["text"]
        assert "Photos read:" in text and text.count("Picture ") == 2
        assert len(message.artifact["hits"]) == 2 and sum(b["type"] == "image" for b in message.content) == 2


class TestAskAboutImageToolStandard(_StandardToolSuite):
    @pytest.fixture(autouse=True)
    def _tool(self, tiny_chat, vlm_endpoint, pages, tmp_path_factory):  # noqa: F811
        from pictrieve.graphs.vsa import build_vsa_graph
        from pictrieve.tools.models.vlm import create_region_captioner

        self.photo = make_photo(tmp_path_factory.mktemp("ask-photo") / "horse.png", seed=7, size=(96, 80))
        graph = build_vsa_graph(
            None, llm=tiny_chat, detector=tiny_owlvit_detector(), search=pages,
            vlm=create_region_captioner("openai:fake-vlm", base_url=vlm_endpoint.base_url))
        self.tool_instance = ask_about_image_tool(graph, allowed_dirs=[self.photo.parent])

    @property
    def tool_invoke_params_example(self) -> dict:
        return {"image": str(self.photo), "question": "How many teeth does a horse have?"}

    def test_the_graph_saw_the_photo_through_the_vlm(self, vlm_endpoint):
        before = len(vlm_endpoint.requests)
        assert self._message().content
        sent = vlm_endpoint.requests[before:]
        assert sent and all(r["path"].endswith("/chat/completions") for r in sent)
        assert any(part.get("type") == "image_url" for r in sent for m in r["body"]["messages"]
                   if isinstance(m.get("content"), list) for part in m["content"])
