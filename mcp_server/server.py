"""The MCP server: tools and resources over a :class:`~pictrieve.mcp_server.service.PictrieveService`.

Tools (names fixed: agents and configs refer to them): ``search_images``, ``search_by_image``
(:mod:`.search_tools`), ``ask_about_image``, ``ask_gallery`` (:mod:`.answer_tools`), ``find_photo``,
``answer_question``, ``start_method``, ``answer_method`` (:mod:`.session_tools`), ``gallery_info`` (here),
``find_duplicates`` (:mod:`.duplicates`); what they share (text bounds, worker threads with progress, the result's
shape) is :mod:`.calls`. Resources:
``pictrieve://gallery`` (what ``pictrieve info`` shows) and ``pictrieve://image/{id}`` (a gallery image's
bytes; ids only, never a path).

Each tool's result has its structured result (``structuredContent``, described by the tool's
``outputSchema``), the same JSON as the first text block, and the photos it found as MCP image content
(JPEG thumbnails, longest side at most 512 px), each after a ``Photo n (id ...)`` line. A tool that fails
returns ``isError`` with one line saying what to do (a bad argument, an unknown id or session, a path
outside the allowed folders, a model that cannot be called); nothing a client sends stops the server.

Blocking work (loading models, running graphs) runs in worker threads, never on the event loop. Every tool
that may load a model (all but ``gallery_info``) reports progress when the client asked for it: a first line
at once, a line when a model starts loading (repeated every few seconds while it loads), and each step,
with values that only increase (:mod:`pictrieve.mcp_server.progress`).
"""

import io
import logging
import re
from collections.abc import Iterable, Sequence
from io import TextIOWrapper
from typing import Annotated, Any, BinaryIO

import anyio
import anyio.to_thread
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from pictrieve.errors import PictrieveError, causes
from pictrieve.mcp_server.answer_tools import add_answer_tools
from pictrieve.mcp_server.calls import READ_ONLY, in_thread, result
from pictrieve.mcp_server.duplicates import add_duplicates_tool
from pictrieve.mcp_server.schemas import GalleryInfo
from pictrieve.mcp_server.search_tools import add_search_tools
from pictrieve.mcp_server.service import PictrieveService
from pictrieve.mcp_server.session_tools import add_session_tools

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
pictrieve searches the user's own photo gallery with language.
- search_images: photos matching a description in words (returns ids, scores, captions and the photos).
- search_by_image: photos like a given one (a gallery id from a search, or base64 image data).
- ask_about_image: a question about one photo, answered from what it shows and a search, citing sources.
- ask_gallery: a question about the user's photos, answered from the best-matching ones.
- find_photo then answer_question: narrow down one photo the user remembers by answering questions.
- start_method then answer_method: run a method that asks the person questions (put each to them).
- gallery_info: what the gallery holds and what this server is set up for.
- find_duplicates: groups of near-identical photos (resized, recompressed, cropped copies); read-only.
Photo ids from any result work in every tool, and pictrieve://image/{id} gives a photo's full image."""

MAX_ERROR_CHARS = 400


class PictrieveMCP(FastMCP):
    """FastMCP with pictrieve's failure rule (every failed call is one ``isError`` line), pictrieve's version,
    and a stdio transport whose protocol stream nothing else can write into (these last two reach the SDK's
    low-level server, ``_mcp_server``, which FastMCP offers no other way to)."""

    protocol_stdout: BinaryIO | None = None
    """The stream stdio messages go to (the process's original stdout, see ``pictrieve mcp``); ``None``: stdout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from pictrieve import __version__

        super().__init__(*args, **kwargs)
        # The version clients see in serverInfo is pictrieve's (FastMCP would report the SDK's own).
        self._mcp_server.version = __version__

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            return await super().call_tool(name, arguments)
        except Exception as exc:  # bad input or a failed model: the model reads one line; the server goes on
            return CallToolResult(isError=True, content=[TextContent(type="text", text=error_line(exc, name))])

    async def read_resource(self, uri: Any) -> Iterable[ReadResourceContents]:
        try:
            contents = list(await super().read_resource(uri))
        except Exception as exc:
            from mcp.server.fastmcp.exceptions import ResourceError

            raise ResourceError(error_line(exc, str(uri))) from None
        # A template has one MIME type; a photo's own comes from its bytes (JPEG, PNG, WebP, ...).
        return [ReadResourceContents(content=c.content, mime_type=_image_mime(c.content) or c.mime_type, meta=c.meta)
                if isinstance(c.content, bytes) else c for c in contents]

    async def list_resource_templates(self) -> list[Any]:
        # The photos' MIME type varies (read it from each read), so the template names none.
        return [t.model_copy(update={"mimeType": None}) if t.uriTemplate.startswith("pictrieve://image/") else t
                for t in await super().list_resource_templates()]

    async def run_stdio_async(self) -> None:
        if self.protocol_stdout is None:
            return await super().run_stdio_async()
        out = anyio.wrap_file(TextIOWrapper(self.protocol_stdout, encoding="utf-8"))
        async with stdio_server(stdout=out) as (read_stream, write_stream):
            await self._mcp_server.run(read_stream, write_stream, self._mcp_server.create_initialization_options())


def error_line(exc: BaseException, what: str) -> str:
    """One line for a failed call: a bad argument's field and problem, or our error's own message (no traces)."""
    chain = list(causes(exc))
    for cause in chain:  # the innermost reason we raised on purpose, under the SDK's wrapping
        if isinstance(cause, ValidationError):
            first = cause.errors()[0]
            field = ".".join(str(part) for part in first.get("loc", ())) or "arguments"
            got = f" (got {first['input']!r:.60})" if "input" in first and not isinstance(first["input"], dict) else ""
            return _one_line(f"{field}: {first['msg']}{got}")
        if isinstance(cause, PictrieveError):
            return _one_line(str(cause))
    for cause in chain:
        if isinstance(cause, (ValueError, LookupError, OSError)):
            message = str(cause.args[0]) if isinstance(cause, KeyError) and cause.args else str(cause)
            return _one_line(message or type(cause).__name__)
    if isinstance(exc, ToolError) and exc.__cause__ is None:  # the SDK's own (an unknown tool)
        return _one_line(str(exc))
    log.error("%s failed", what, exc_info=exc)
    return f"internal error ({type(exc).__name__}) in {what}; see the server's log"


def _one_line(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _image_mime(data: bytes) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return Image.MIME.get(image.format or "")
    except Exception:  # not an image Pillow knows: keep the template's type
        return None


def create_server(service: PictrieveService, *, host: str = "127.0.0.1", port: int = 8765,
                  max_request_bytes: int | None = None, allowed_origins: Sequence[str] = ()) -> PictrieveMCP:
    """The MCP server over ``service``: its tools (registered by each tool module's ``add_*`` function) and resources
    (``host``/``port``: where streamable HTTP listens; bound to loopback, browsers' requests are accepted only from
    this server's own origin and
    ``allowed_origins``, see :func:`~pictrieve.mcp_server.http.transport_security`)."""
    from pictrieve.tools.core.exposure import normalise_host
    from pictrieve.mcp_server.http import transport_security

    body_limit = max_request_bytes or service.settings.max_image_bytes * 4 // 3 + 2**20
    server = PictrieveMCP(name="pictrieve", instructions=INSTRUCTIONS, host=normalise_host(host), port=port,
                          log_level="WARNING", max_request_body_size=body_limit,
                          transport_security=transport_security(host, port, allowed_origins))
    add_search_tools(server, service)
    add_answer_tools(server, service)
    add_session_tools(server, service)
    add_gallery_info(server, service)
    add_duplicates_tool(server, service.gallery)
    return server


def add_gallery_info(server: PictrieveMCP, service: PictrieveService) -> None:
    """Register ``gallery_info`` and the resources (``pictrieve://gallery``, ``pictrieve://image/{id}``)."""

    @server.tool(name="gallery_info", title="What the gallery holds", annotations=READ_ONLY)
    async def gallery_info(ctx: Context) -> Annotated[CallToolResult, GalleryInfo]:
        """What the gallery holds (images, embedders) and what this server is set up for (search methods, web
        search, folders image paths may come from). Loads no model."""
        info = GalleryInfo(**await in_thread(ctx, service.info))
        return result(info)

    @server.resource("pictrieve://gallery", name="gallery", title="The gallery", mime_type="application/json",
                     description="What the gallery holds and what this server is set up for (as gallery_info).")
    async def gallery_resource() -> str:
        return GalleryInfo(**await anyio.to_thread.run_sync(service.info)).model_dump_json(indent=2)

    @server.resource("pictrieve://image/{image_id}", name="image", title="A gallery photo",
                     description="The bytes of the gallery photo with this id (ids come from search results).")
    async def image_resource(image_id: str) -> bytes:
        return await anyio.to_thread.run_sync(service.image_bytes, image_id)
