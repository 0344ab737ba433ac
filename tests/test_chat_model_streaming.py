"""The offline chat model streams: token by token, the same text as ``invoke``, off the event loop,
and a consumer that stops reading stops the generation.

Code paths run on the tiny random chat checkpoint of ``test_chat_models`` (its replies are random
bytes, which exercises unfinished UTF-8 characters too); nothing here reads quality from it.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import aclosing, contextmanager

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage
from langchain_core.runnables import RunnableConfig

from pictrieve.tools.models.chat_models import LocalChatModel, _cut_at_stop, _visible_reply
from helpers.qc2_fakes import one_thread  # noqa: F401  (autouse: one torch thread)
from helpers.chat_checkpoints import private_cache, tiny_chat_checkpoint  # noqa: F401  (fixtures)

PROMPTS = ["Hello", "say yes", "a dog runs on the grass"]


@pytest.fixture
def chat(tiny_chat_checkpoint):  # noqa: F811
    return LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=24, device="cpu")


def _streamed(chunks: list[AIMessageChunk]) -> str:
    return "".join(chunk.content for chunk in chunks)


@contextmanager
def counting_forward_passes(model_name: str):
    """Count the shared model's forward passes (a hook on the real module) and the threads they run on."""
    from pictrieve.tools.models.causal_lm import shared_causal_lm

    model, _ = shared_causal_lm(model_name, "cpu")
    calls: list[threading.Thread] = []
    handle = model.register_forward_hook(lambda *_: calls.append(threading.current_thread()))
    try:
        yield calls
    finally:
        handle.remove()


HELD_PASS = 8
"""The forward pass at which :func:`held_until_the_consumer_leaves` holds the worker (the first piece comes
before it: the prompt's pass and a token's or two)."""


@contextmanager
def held_until_the_consumer_leaves(model_name: str, monkeypatch):
    """Count the shared model's forward passes and hold pass :data:`HELD_PASS` until the stream's consumer has
    left (its generation's ``cancelled`` event): how many passes run after leaving then depends on the code,
    not on how soon a loaded machine schedules the consumer (the generation runs ahead of the reader)."""
    from pictrieve.tools.models import chat_models

    generations: list[chat_models._StreamedGeneration] = []
    real_init = chat_models._StreamedGeneration.__init__

    def noting_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        generations.append(self)

    monkeypatch.setattr(chat_models._StreamedGeneration, "__init__", noting_init)
    with counting_forward_passes(model_name) as passes:
        from pictrieve.tools.models.causal_lm import shared_causal_lm

        model, _ = shared_causal_lm(model_name, "cpu")

        def hold(*_):
            if len(passes) == HELD_PASS:
                assert generations[-1]._shown, f"no piece reached the reader before pass {HELD_PASS}"
                assert generations[-1].cancelled.wait(60), "the consumer never left"

        handle = model.register_forward_hook(hold)  # after the counting hook: this pass is already counted
        try:
            yield passes
        finally:
            handle.remove()


def _stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "LocalChatModel-stream"]


# -- the same reply, token by token ------------------------------------------------------------------


def test_stream_gives_invokes_text_in_several_chunks_with_the_counts_last(chat):
    for prompt in PROMPTS:
        reply = chat.invoke(prompt)
        chunks = list(chat.stream(prompt))
        assert _streamed(chunks) == reply.content and reply.content
        assert sum(1 for c in chunks if c.content) > 1  # token by token, not one piece at the end
        assert chunks[-1].chunk_position == "last"
        assert [c.usage_metadata for c in chunks[:-1]] == [None] * (len(chunks) - 1)
        assert chunks[-1].usage_metadata == reply.usage_metadata
        assert reply.usage_metadata["output_tokens"] == 24  # no end-of-turn from random weights
        assert chunks[-1].response_metadata["model_name"] == chat.model_name


def test_stop_strings_end_stream_invoke_and_batch_at_the_same_place(chat):
    """Stop strings taken from the model's own greedy reply (they begin and end inside tokens)."""
    checked = 0
    for prompt in PROMPTS:
        full = chat.invoke(prompt).content
        for stop in {full[i:i + k] for i in range(1, len(full) - 3, 4) for k in (1, 2, 3)}:
            reply = chat.invoke(prompt, stop=[stop])
            chunks = list(chat.stream(prompt, stop=[stop]))
            batched = chat.batch([prompt, "another, longer prompt"], stop=[stop])[0]
            assert reply.content == _cut_at_stop(full, [stop]).strip()
            assert _streamed(chunks) == reply.content == batched.content, (prompt, stop)
            assert chunks[-1].usage_metadata == reply.usage_metadata == batched.usage_metadata, (prompt, stop)
            assert reply.usage_metadata["output_tokens"] < 24  # generation stopped at the stop string
            checked += 1
    assert checked > 20


def test_shown_text_never_has_to_be_taken_back():
    """Every partial reply is a prefix of the final one (held back: a possible stop-string start,
    an unfinished UTF-8 character, trailing spaces), and the final one is cut like ``invoke``'s."""
    cases = [("a dog. Then more", ["Then"]), ("say yes\n\nUser: no", ["\nUser:", "User"]),
             ("  two words  ", []), ("caf\ufffd\ufffd au lait", ["au lait"]), ("ab ab abc", ["abc", "b a"])]
    for text, stops in cases:
        final = _visible_reply(text, stops, final=True)[0]
        assert final == _cut_at_stop(text, stops).strip()
        for end in range(len(text) + 1):
            shown, stopped = _visible_reply(text[:end], stops, final=False)
            assert final.startswith(shown), (text, end, shown)
            assert not stopped or shown == final


def test_astream_gives_the_same_chunks_and_generates_off_the_event_loop(chat):
    async def collect():
        with counting_forward_passes(chat.model_name) as passes:
            chunks = [chunk async for chunk in chat.astream("say yes")]
        return chunks, passes

    chunks, passes = asyncio.run(collect())
    assert _streamed(chunks) == chat.invoke("say yes").content
    assert chunks[-1].usage_metadata == chat.invoke("say yes").usage_metadata
    assert passes and threading.main_thread() not in passes


def test_the_event_loop_runs_while_a_token_is_being_generated(chat):
    """The second forward pass waits until another coroutine on the loop lets it go: if the stream
    blocked the loop while waiting for a token, that coroutine could not run and the pass would wait
    out its (generous) bound."""
    from pictrieve.tools.models.causal_lm import shared_causal_lm

    model, _ = shared_causal_lm(chat.model_name, "cpu")
    reached, release, waited_out = threading.Event(), threading.Event(), []

    def hold_second_pass(module, args, output, calls=[]):  # noqa: B006
        calls.append(1)
        if len(calls) == 2:
            reached.set()
            if not release.wait(timeout=60):
                waited_out.append(True)

    async def main():
        async def release_when_reached():
            while not reached.is_set():
                await asyncio.sleep(0.01)
            release.set()

        opener = asyncio.create_task(release_when_reached())
        chunks = [chunk async for chunk in chat.astream("say yes")]
        await opener
        return chunks

    handle = model.register_forward_hook(hold_second_pass)
    try:
        chunks = asyncio.run(main())
    finally:
        handle.remove()
    assert not waited_out and _streamed(chunks) == chat.invoke("say yes").content


# -- a consumer that stops reading stops the generation -------------------------------------------------


def test_closing_a_stream_stops_the_generation(tiny_chat_checkpoint, monkeypatch):  # noqa: F811
    chat = LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=200, device="cpu")
    with held_until_the_consumer_leaves(chat.model_name, monkeypatch) as passes:
        stream = chat.stream("a dog runs on the grass")
        first = next(stream)
        stream.close()
        after_close = len(passes)
        assert not _stream_threads()  # closing waited for the worker to end
    assert first.content and after_close <= HELD_PASS  # 200 tokens were asked for; none after the held pass
    assert chat.invoke("hi", max_tokens=3).content  # the model is free again


def test_leaving_an_async_stream_stops_the_generation(tiny_chat_checkpoint, monkeypatch):  # noqa: F811
    chat = LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=200, device="cpu")

    async def read_one_then_leave():
        async with aclosing(chat.astream("a dog runs on the grass")) as stream:
            async for chunk in stream:
                return chunk

    async def main():
        first = await read_one_then_leave()
        for _ in range(3000):  # the worker ends after its current step; bound: 30 s
            if not _stream_threads():
                break
            await asyncio.sleep(0.01)
        return first

    with held_until_the_consumer_leaves(chat.model_name, monkeypatch) as passes:
        first = asyncio.run(main())
        assert not _stream_threads()
    assert first.content and len(passes) <= HELD_PASS


def test_a_failing_model_is_raised_by_the_stream_not_an_empty_reply(tmp_path):
    from pictrieve.tools.models.causal_lm import ModelUnavailableError

    chat = LocalChatModel(model_name=str(tmp_path / "no-such-checkpoint"), device="cpu")
    with pytest.raises(ModelUnavailableError):
        list(chat.stream("hi"))
    with pytest.raises(ModelUnavailableError):
        asyncio.run(_drain(chat.astream("hi")))
    assert not _stream_threads()


async def _drain(stream):
    return [chunk async for chunk in stream]


# -- LangGraph ----------------------------------------------------------------------------------------


def _one_node_graph(chat, *, samples: int = 1):
    from langgraph.graph import END, START, MessagesState, StateGraph

    def answer(state: MessagesState, config: RunnableConfig) -> dict:
        if samples > 1:  # as PlugIR draws several questions, with the run's callbacks (tracing, streaming)
            result = chat.generate([state["messages"]], n=samples, callbacks=config["callbacks"])
            return {"messages": [g.message for g in result.generations[0]]}
        return {"messages": [chat.invoke(state["messages"])]}

    return StateGraph(MessagesState).add_node("answer", answer).add_edge(START, "answer") \
        .add_edge("answer", END).compile()


def test_langgraph_messages_mode_streams_the_reply_token_by_token(chat):
    graph = _one_node_graph(chat)
    question = {"messages": [HumanMessage("say yes")]}
    pieces = [message for message, meta in graph.stream(question, stream_mode="messages")
              if isinstance(message, AIMessageChunk) and meta["langgraph_node"] == "answer"]
    assert sum(1 for p in pieces if p.content) > 1
    expected = chat.invoke("say yes").content
    assert _streamed(pieces) == expected
    assert graph.invoke(question)["messages"][-1].content == expected

    async def astream():
        return [m async for m, _ in graph.astream(question, stream_mode="messages") if isinstance(m, AIMessageChunk)]

    apieces = asyncio.run(astream())
    assert sum(1 for p in apieces if p.content) > 1 and _streamed(apieces) == expected


def test_several_samples_in_messages_mode_are_drawn_not_streamed(chat):
    """``generate(n=k)`` under a streaming callback (LangGraph's messages mode) still draws k samples
    in one batched generate; a stream has one reply to give."""
    graph = _one_node_graph(chat, samples=3)
    values = None
    for mode, payload in graph.stream({"messages": [HumanMessage("say yes")]}, stream_mode=["messages", "values"]):
        if mode == "values":
            values = payload
    replies = values["messages"][1:]
    assert len(replies) == 3 and all(r.content == chat.invoke("say yes").content for r in replies)  # greedy


# -- the real offline model, only when it is already on this machine (conftest.offline_llm) -------------


@pytest.mark.slow
def test_offline_model_streams_what_it_answers(offline_llm):
    greedy = offline_llm.bind(temperature=0.0, max_tokens=24)
    for stop in (None, [","]):
        reply = greedy.invoke("List three colors, separated by commas.", stop=stop)
        chunks = list(greedy.stream("List three colors, separated by commas.", stop=stop))
        assert _streamed(chunks) == reply.content and sum(1 for c in chunks if c.content) > 1
        assert chunks[-1].usage_metadata == reply.usage_metadata
    assert "," not in reply.content
