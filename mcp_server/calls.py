"""What every MCP tool shares: its text arguments' bound, running blocking work in a worker thread with progress,
and the shape of its result (structured JSON, its text, a line for the model, then the photos as MCP images).

The tools themselves are registered by :func:`~pictrieve.mcp_server.server.create_server` from
:mod:`.search_tools`, :mod:`.answer_tools`, :mod:`.session_tools` and :mod:`.duplicates`.
"""

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.fastmcp import Context
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from pictrieve.agents.settings import MAX_TEXT
from pictrieve.mcp_server.progress import StepProgress
from pictrieve.mcp_server.schemas import SearchResult
from pictrieve.vectorstore.hits import ImageHit, hit_json, photo_blocks

log = logging.getLogger(__name__)

IMAGE_ARGUMENT = ("The photo: a gallery id from an earlier result (e.g. 3f2a...), base64 image data or a "
                  "data:image/...;base64 URL, or a file path inside the folders the server allows (gallery_info "
                  "lists them; none by default)")
Text = Annotated[str, Field(max_length=MAX_TEXT)]
"""A text argument (a query, a question, an answer, a filter): at most MAX_TEXT characters, as on the page."""
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
"""A tool that changes nothing and reaches nothing beyond the gallery."""

def photo_content(hits: Sequence[ImageHit]) -> list[Any]:
    """Each hit's label and JPEG thumbnail (:func:`~pictrieve.vectorstore.hits.photo_blocks`, as the LangChain tools
    show them) as MCP content."""
    return [ImageContent(type="image", data=block["base64"], mimeType=block["mime_type"]) if block["type"] == "image"
            else TextContent(type="text", text=block["text"]) for block in photo_blocks(hits)]


def result(structured: BaseModel, photos: Sequence[ImageHit] = (), text: str | None = None) -> CallToolResult:
    """A tool result: the structured JSON (and its text), an optional line for the model, then the photos."""
    data = structured.model_dump(mode="json")
    content: list[Any] = [TextContent(type="text", text=structured.model_dump_json())]
    if text:
        content.append(TextContent(type="text", text=text))
    return CallToolResult(content=[*content, *photo_content(photos)], structuredContent=data)


def answer_result(method: str, answer: Any) -> CallToolResult:
    """A search's result from its :class:`~pictrieve.vectorstore.search_request.SearchAnswer`: the hits, the
    summary (how many match well, or why none came back) and ``why``, then the photos."""
    summary = answer.summary()
    return result(SearchResult(method=method, summary=summary, why=answer.why, hits=[hit_json(h) for h in answer.hits]),
                  answer.hits, text=summary)


async def in_thread(ctx: Context, work: Callable[..., Any], *args: Any, first: str | None = None) -> Any:
    """Run ``work(*args)`` in a worker thread.

    With ``first`` (a tool that may load a model), ``first`` is reported at once and ``work`` gets a
    ``progress(message)`` that reports each later step: an MCP progress notification when the client asked
    for progress (values strictly increasing, :class:`~pictrieve.mcp_server.progress.StepProgress`), and a
    log line either way.
    """
    if first is None:
        return await anyio.to_thread.run_sync(functools.partial(work, *args))
    token = anyio.lowlevel.current_token()  # a heartbeat thread reports too, not only anyio's worker

    def send(value: float, message: str) -> None:
        log.info("%s", message)
        if ctx.request_context.meta is None or ctx.request_context.meta.progressToken is None:
            return
        try:
            anyio.from_thread.run(ctx.report_progress, value, None, message, token=token)
        except Exception:  # the client went away: the work finishes, the result is dropped
            log.debug("could not report progress", exc_info=True)

    report = StepProgress(send)

    def run() -> Any:
        from pictrieve.tools.core.model_cache import announcing_model_loads

        # each labelled model a step loads is a line too ("loading the MiniLM sentence encoder ..."); another
        # call's loads meanwhile are heard as well (models are shared by the whole server)
        with announcing_model_loads(lambda label: report(f"loading {label} ...")):
            return work(*args, progress=report)

    await anyio.to_thread.run_sync(report, first)
    return await anyio.to_thread.run_sync(run)
