"""``pictrieve mcp`` reports progress on every tool that may load a model, with values that only increase.

Each server here is a fresh ``pictrieve mcp`` process (the real command, the official Python client over
stdio and over streamable HTTP), so a tool's first call really loads its models: the client hears a first
line at once, a ``loading the ... embedder`` line while the model loads, then each step; MCP requires
each notification's progress value to exceed the last.
"""

from __future__ import annotations

import threading

import pytest

from helpers.mcp import HttpServer, served, stdio_session  # noqa: F401  (fixture: served)
from pictrieve.mcp_server.progress import StepProgress

pytestmark = pytest.mark.server


class Heard:
    """A client's progress callback that keeps every notification of one call."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.messages: list[str] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.values.append(progress)
        self.messages.append(message or "")

    def check(self, tool: str) -> None:
        """At least one notification, the first naming the tool, every value above the one before."""
        assert self.values, f"{tool} sent no progress"
        assert self.messages[0].startswith(f"{tool}: "), self.messages
        assert all(b > a for a, b in zip(self.values, self.values[1:])), list(zip(self.values, self.messages))
        assert all(self.messages), self.messages


async def call(session, tool: str, arguments: dict) -> tuple[dict, Heard]:
    heard = Heard()
    result = await session.call_tool(tool, arguments, progress_callback=heard)
    assert not result.isError, result.content
    heard.check(tool)
    return result.structuredContent, heard


def loaded_the_embedder(heard: Heard) -> bool:
    return any(m.startswith("loading the ") and "embedder" in m for m in heard.messages)


async def test_every_tool_that_may_load_a_model_reports_progress_over_stdio(served):
    async with stdio_session(served.args) as session:
        # the first call of a fresh server loads the embedder, and says so while it does
        _, heard = await call(session, "search_by_image", {"image": served.ids["a green field"], "k": 2})
        assert loaded_the_embedder(heard), heard.messages
        assert heard.messages[-1] == "found 2 photos"
        _, heard = await call(session, "search_images", {"query": "a red square", "k": 3})
        assert not loaded_the_embedder(heard), heard.messages  # loaded once per server
        _, heard = await call(session, "ask_about_image", {"image": served.ids["a brown horse in a field"],
                                                           "question": "How many teeth does an adult horse have?"})
        # the detector's load is announced as its step starts, before the step's own line
        regions = next(i for i, m in enumerate(heard.messages) if m.startswith("regions: "))
        assert any(m.startswith("finding regions") for m in heard.messages[:regions]), heard.messages
        view, heard = await call(session, "find_photo", {"description": "a red square"})
        assert "searched the gallery" in heard.messages
        _, heard = await call(session, "answer_question", {"session": view["session"], "answer": "no"})
        assert "read the answer" in heard.messages


async def test_ask_gallery_reports_progress_and_its_first_call_loads_the_embedder(served):
    from helpers.openai_fake import OpenAIFake

    with OpenAIFake(lambda messages: "### Reasoning: picture 1 is red\n### Answer: the red one, picture 1") as fake:
        args = [*served.args, "--llm", "openai:fake-reader", "--base-url", fake.base_url]
        async with stdio_session(args) as session:
            answer, heard = await call(session, "ask_gallery", {"question": "which photo is red?", "k": 2})
    assert answer["answer"] == "the red one, picture 1"
    assert loaded_the_embedder(heard) and heard.messages[-1] == "answered", heard.messages


async def test_a_first_search_by_image_over_http_reports_the_embedders_load(served):
    server = HttpServer(served.args)
    try:
        async with server.session() as session:
            _, heard = await call(session, "search_by_image", {"image": served.ids["a blue sky"], "k": 1})
    finally:
        server.stop()
    assert loaded_the_embedder(heard), heard.messages


def test_step_progress_values_only_increase_whatever_the_callers_give():
    sent: list[tuple[float, str]] = []
    report = StepProgress(lambda value, message: sent.append((value, message)))
    report("one")
    report("explicit", 5)
    report("lower than the last", 2)  # raised above the last one, never sent as it is
    report("same as the last", 6)
    report("next")
    values = [v for v, _ in sent]
    assert values == [1, 5, 6, 7, 8] and [m for _, m in sent][2] == "lower than the last"
    # from several threads at once: every value distinct, and sent in increasing order
    many: list[float] = []
    report = StepProgress(lambda value, message: many.append(value))
    threads = [threading.Thread(target=lambda: [report("step") for _ in range(200)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert many == sorted(set(many)) and len(many) == 800
