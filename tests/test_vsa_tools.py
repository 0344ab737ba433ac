"""LangChain's standard tool suites on the vsa tools, plus what they return."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest
from langchain_core.messages import ToolCall
from langchain_tests.unit_tests import ToolsUnitTests
from PIL import Image

from pictrieve.integrations.langchain_tools import ask_about_image_tool, ask_gallery_tool, image_search_tool
from pictrieve.vectorstore.hits import ImageHit


class _Gallery:
    def search_text(self, query, k=5, where=None, **options):
        return [ImageHit(id=f"i{i}", path=f"/p/{i}.jpg", score=1.0 - i / 10, rank=i + 1, captions=["a dog"])
                for i in range(k)]


class _Graph:
    def invoke(self, inputs):
        return {"answer": f"about {inputs['image']}: yes [1]", "sources": [{"number": 1, "title": "T", "url": "u"}]}


class TestImageSearchTool(ToolsUnitTests):
    @property
    def tool_constructor(self):
        return image_search_tool(_Gallery())

    @property
    def tool_invoke_params_example(self):
        return {"query": "a dog", "k": 2}


class TestAskAboutImageTool(ToolsUnitTests):
    @property
    def tool_constructor(self):
        return ask_about_image_tool(_Graph())

    @property
    def tool_invoke_params_example(self):
        return {"image": "photo.jpg", "question": "what is it?"}


class _TextReader:
    """A text-only chat stand-in (control flow only): refuses pictures, answers from descriptions."""

    def __init__(self):
        self.prompts = []

    def invoke(self, messages):
        from langchain_core.messages import AIMessage

        from pictrieve.tools.models.chat_models import UnsupportedContentError

        if isinstance(messages[-1].content, list):
            raise UnsupportedContentError("text only")
        self.prompts.append(messages[-1].content)
        return AIMessage("### Reasoning: picture 1 says so\n### Answer: a dog, in picture 1")


class TestAskGalleryTool(ToolsUnitTests):
    @property
    def tool_constructor(self):
        return ask_gallery_tool(_Gallery(), reader=_TextReader())

    @property
    def tool_invoke_params_example(self):
        return {"question": "which photo shows a dog?", "k": 2}


def _call(tool, **args):
    """The ToolMessage a model gets for a call of ``tool`` with ``args``."""
    return tool.invoke(ToolCall(name=tool.name, args=args, id="1", type="tool_call"))


def test_ask_gallery_answers_from_the_best_photos_with_the_visret_reader():
    reader = _TextReader()
    message = _call(ask_gallery_tool(_Gallery(), reader=reader), question="which photo shows a dog?", k=2)
    text = message.content[0]["text"]
    assert text.startswith("a dog, in picture 1") and "Picture 2: /p/1.jpg" in text
    assert "which photo shows a dog?" in reader.prompts[0] and "Picture 2: a dog" in reader.prompts[0]
    assert message.artifact["answer"].startswith("a dog") and [h["id"] for h in message.artifact["hits"]] == ["i0", "i1"]
    # the photos' files are gone here: each is named with a line saying so, never a broken image
    assert [b["text"] for b in message.content[1:]] == ["Photo 1 (id i0): the image file cannot be read",
                                                        "Photo 2 (id i1): the image file cannot be read"]


def test_image_search_returns_json_hits_as_artifact_and_text():
    message = _call(image_search_tool(_Gallery()), query="dog", k=3)
    rows = json.loads(message.content[0]["text"])
    assert [r["rank"] for r in rows] == [1, 2, 3] and rows[0]["path"] == "/p/0.jpg" and rows[0]["id"] == "i0"
    assert message.artifact == rows


def test_image_search_shows_the_photos_as_standard_image_blocks(tmp_path):
    colours = [(200, 30, 30), (30, 200, 30)]
    paths = []
    for i, colour in enumerate(colours):
        paths.append(tmp_path / f"{i}.png")
        Image.new("RGB", (900, 600), colour).save(paths[-1])

    class _Photos:
        def search_text(self, query, k=5, where=None, **options):
            return [ImageHit(id=f"i{i}", path=str(p), score=0.5, rank=i + 1) for i, p in enumerate(paths[:k])]

    message = _call(image_search_tool(_Photos()), query="red", k=2)
    images = [b for b in message.content if b["type"] == "image"]
    assert len(images) == 2 and all(b["mime_type"] == "image/jpeg" for b in images)
    for block, colour in zip(images, colours):
        picture = Image.open(io.BytesIO(base64.b64decode(block["base64"])))
        assert picture.format == "JPEG" and picture.size == (512, 341)
        assert all(abs(a - b) < 8 for a, b in zip(picture.convert("RGB").getpixel((256, 170)), colour))
    labels = [b["text"] for b in message.content if b["type"] == "text"][2:]  # after the JSON and the summary
    assert labels == ["Photo 1 (id i0):", "Photo 2 (id i1):"]


def test_a_blank_query_is_a_tool_error_the_agent_reads():
    message = _call(image_search_tool(_Gallery()), query="  ", k=3)
    assert message.status == "error" and "blank" in message.content


def _vsa_tool(**kwargs):
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda
    from helpers.vsa_fakes import WholeImage, Words

    return ask_about_image_tool(llm=RunnableLambda(lambda m: AIMessage(content="A brown horse.")), vlm=Words(),
                                detector=WholeImage(), search=None, **kwargs)


def test_ask_about_image_runs_the_real_graph(tmp_path):
    path = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(path)
    tool = _vsa_tool(allowed_dirs=[tmp_path])
    text = tool.invoke({"image": str(path), "question": "what animal?"})
    assert text.startswith("A brown horse.") and "found nothing" in text
    message = _call(tool, image=str(path), question="what animal?")
    assert message.artifact["answer"].startswith("A brown horse.") and message.artifact["sources"] == []


def test_ask_about_image_takes_base64_and_gallery_ids(tmp_path):
    path = tmp_path / "x.png"
    Image.new("RGB", (80, 60), (10, 20, 30)).save(path)

    class _Held:
        def get(self, ids):
            if ids != ["0123456789abcdef01234567"]:
                raise KeyError(ids[0])
            return [type("Item", (), {"path": str(path)})()]

    tool = _vsa_tool(gallery=_Held())  # no folder allowed: only ids and data
    assert _call(tool, image=base64.b64encode(path.read_bytes()).decode(), question="what?").status == "success"
    assert _call(tool, image="0123456789abcdef01234567", question="what?").status == "success"
    unknown = _call(tool, image="ffffffffffffffffffffffff", question="what?")
    assert unknown.status == "error" and "no image with id ffffffffffffffffffffffff" in unknown.content


def test_ask_about_image_reads_no_path_outside_the_allowed_folders(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    secret = outside / "secret.png"
    Image.new("RGB", (8, 8)).save(secret)
    (allowed / "link.png").symlink_to(secret)  # a link inside the allowed folder, to a file outside it
    for tool, image in ((_vsa_tool(), str(secret)), (_vsa_tool(allowed_dirs=[allowed]), str(secret)),
                        (_vsa_tool(allowed_dirs=[allowed]), str(allowed / "link.png")),
                        (_vsa_tool(allowed_dirs=[allowed]), str(allowed / ".." / "outside" / "secret.png"))):
        message = _call(tool, image=image, question="what?")
        assert message.status == "error" and ("outside the folders" in message.content
                                              or "reads no image paths" in message.content), message.content
    os.remove(secret)  # the same answer whether or not the file exists: no probing outside the folders
    gone = _call(_vsa_tool(allowed_dirs=[allowed]), image=str(secret), question="what?")
    assert gone.status == "error" and "outside the folders" in gone.content
