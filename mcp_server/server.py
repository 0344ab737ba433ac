"""The MCP server: tools and resources over a :class:`~pictrieve.mcp_server.service.PictrieveService`.

Tools (names fixed: agents and configs refer to them): ``search_images``, ``search_by_image``,
``ask_about_image``, ``ask_gallery``, ``find_photo``, ``answer_question``, ``gallery_info``, ``find_duplicates``
(:mod:`pictrieve.mcp_server.duplicates`). Resources:
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

import functools
import io
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from io import TextIOWrapper
from typing import Annotated, Any, BinaryIO, Literal

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from pictrieve.agents.settings import MAX_TEXT
from pictrieve.errors import PictrieveError, causes
from pictrieve.mcp_server.progress import StepProgress
from pictrieve.mcp_server.schemas import GalleryAnswer, GalleryInfo, ImageAnswer, PhotoSession, SearchResult
from pictrieve.mcp_server.service import MAX_K, PictrieveService
from pictrieve.vectorstore.hits import ImageHit, hit_json, photo_blocks

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
pictrieve searches the user's own photo gallery with language.
- search_images: photos matching a description in words (returns ids, scores, captions and the photos).
- search_by_image: photos like a given one (a gallery id from a search, or base64 image data).
- ask_about_image: a question about one photo, answered from what it shows and a search, citing sources.
- ask_gallery: a question about the user's photos, answered from the best-matching ones.
- find_photo then answer_question: narrow down one photo the user remembers by answering questions.
- gallery_info: what the gallery holds and what this server is set up for.
- find_duplicates: groups of near-identical photos (resized, recompressed, cropped copies); read-only.
Photo ids from any result work in every tool, and pictrieve://image/{id} gives a photo's full image."""

IMAGE_ARGUMENT = ("The photo: a gallery id from an earlier result (e.g. 3f2a...), base64 image data or a "
                  "data:image/...;base64 URL, or a file path inside the folders the server allows (gallery_info "
                  "lists them; none by default)")
Text = Annotated[str, Field(max_length=MAX_TEXT)]
"""A text argument (a query, a question, an answer, a filter): at most MAX_TEXT characters, as on the page."""
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


# --- results ------------------------------------------------------------------------------------------------

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


def session_result(view: dict[str, Any]) -> CallToolResult:
    shown = view["results"]
    structured = PhotoSession(
        session=view["session"], done=view["done"], round=view["round"], question=view["question"],
        options=view["options"], query=view["query"], results=[hit_json(h) for h in shown],
        found=hit_json(view["found"]) if view.get("found") is not None else None, note=view.get("note", ""))
    if view["done"]:
        line = "The session has ended: " + (f"the photo is {view['found'].id}." if view.get("found") is not None
                                            else "these are the final results.")
    else:
        options = f" (options: {', '.join(view['options'])})" if view["options"] else ""
        line = (f"Question {view['round']}: {view['question']}{options}\nAnswer it with answer_question("
                f"session='{view['session']}', answer=...): your answer, 'found N' when photo N is the one, or 'stop'.")
    return result(structured, shown, line + (f"\nNote: {view['note']}" if view.get("note") else ""))


# --- the server ---------------------------------------------------------------------------------------------

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


class PersonAnswer(BaseModel):
    """What the person answers to one of find_photo's questions (MCP elicitation)."""

    answer: Text = Field(description="Your answer; or 'found N' when photo N is the one; or 'stop' to end")


def create_server(service: PictrieveService, *, host: str = "127.0.0.1", port: int = 8765,
                  max_request_bytes: int | None = None, allowed_origins: Sequence[str] = ()) -> PictrieveMCP:
    """The MCP server over ``service``: its tools and resources (``host``/``port``: where streamable HTTP listens;
    bound to loopback, browsers' requests are accepted only from this server's own origin and
    ``allowed_origins``, see :func:`~pictrieve.mcp_server.http.transport_security`)."""
    from pictrieve.tools.core.exposure import normalise_host
    from pictrieve.mcp_server.http import transport_security

    body_limit = max_request_bytes or service.settings.max_image_bytes * 4 // 3 + 2**20
    server = PictrieveMCP(name="pictrieve", instructions=INSTRUCTIONS, host=normalise_host(host), port=port,
                          log_level="WARNING", max_request_body_size=body_limit,
                          transport_security=transport_security(host, port, allowed_origins))
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    # search_images offers every registered method that takes a text query (as `pictrieve search --method`),
    # plugins included: the enum is the registry's when the server starts.
    offered = tuple(service.search_methods())
    plain = service.plain_method()
    SearchMethod = Literal[offered]  # type: ignore[valid-type]

    @server.tool(name="search_images", title="Search photos by description", annotations=read_only)
    async def search_images(
        ctx: Context,
        query: Annotated[Text, Field(description="What the photos should show, in words, e.g. 'two dogs playing in "
                                                 "the snow'; leave it empty to browse the photos that pass the "
                                                 "filters, newest first")] = "",
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many photos to return, best first")] = 5,
        method: Annotated[SearchMethod, Field(
            description=f"The retrieval method: '{plain}' (fast, the default) or another registered method that "
                        "takes a text query (slower; some need what the server was started with, e.g. a visualizer: "
                        "gallery_info's search_methods lists those this server can run)")] = plain,
        only_relevant: Annotated[bool, Field(description="Return only the photos that match well (maybe none); "
                                                         "default: the k closest, each marked relevant or not")] = False,
        after: Annotated[Text | None, Field(description="Only photos taken on or after this date, YYYY-MM-DD")] = None,
        before: Annotated[Text | None, Field(description="Only photos taken before this date, YYYY-MM-DD")] = None,
        near: Annotated[Text | None, Field(description="Only photos taken near 'LAT,LON' or a city ('Lisbon', "
                                                      "'Paris, FR'); see radius_km")] = None,
        radius_km: Annotated[float | None, Field(description="Kilometres around near, above 0 (default 10)")] = None,
        place: Annotated[Text | None, Field(description="Only photos whose city, region or country (name or code) "
                                                       "has these words, case aside (e.g. 'lisbon', 'Portugal', "
                                                       "'PT')")] = None,
        camera: Annotated[Text | None, Field(description="Only photos whose camera name, make or model has these "
                                                        "words, case aside (e.g. 'iphone', 'pixel 7')")] = None,
        folder: Annotated[Text | None, Field(description="Only photos in this folder or inside it (its full path), "
                                                        "or whose folder path holds these folder names")] = None,
        exif_dates_only: Annotated[bool, Field(description="With after/before: leave out photos without an EXIF "
                                                           "capture time (dated only by their file)")] = False,
        hybrid: Annotated[bool, Field(description="Match the photos' own words too (folder and file names, "
                                                  "captions, place, text in the photo), fused with what they show; "
                                                  "false: by what they show alone")] = True,
        collapse_duplicates: Annotated[bool, Field(
            description="Show each group of near-identical photos (resized, recompressed, cropped copies) once; "
                        "the hit's 'copies' lists the others")] = False,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Find photos in the user's gallery that match a description, or (filters alone) list those that pass the
        filters, newest first. Says whether any matches well ("No photo in the gallery matches ... well" when none
        does), or why none came back (a filter that left nothing, and what the gallery has), then each photo's
        gallery id, score, relevant and caption (JSON), then the photos themselves, best first."""
        filters = {name: value for name, value in dict(after=after, before=before, near=near, radius_km=radius_km,
                                                       place=place, camera=camera, folder=folder).items()
                   if value is not None}
        if exif_dates_only:
            filters["exif_dates_only"] = True
        answer = await in_thread(ctx, functools.partial(service.search, filters=filters, hybrid=hybrid,
                                                        collapse_duplicates=collapse_duplicates,
                                                        only_relevant=only_relevant),
                                 query, k, method, first=f"search_images: searching with {method}")
        return answer_result(method, answer)

    @server.tool(name="search_by_image", title="Search photos like a photo", annotations=read_only)
    async def search_by_image(
        ctx: Context,
        image: Annotated[str, Field(description=IMAGE_ARGUMENT)],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many photos to return, best first")] = 5,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Find the photos in the user's gallery that look most like a given photo (a gallery photo finds itself
        first). Returns ids, scores and captions (JSON), then the photos."""
        answer = await in_thread(ctx, service.search_by_image, image, k, first="search_by_image: reading the photo")
        return answer_result(service.image_method(), answer)

    @server.tool(name="ask_about_image", title="Ask about a photo (Vision Search Assistant)",
                 annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=service.settings.search == "ddgs"))
    async def ask_about_image(
        ctx: Context,
        image: Annotated[str, Field(description=IMAGE_ARGUMENT)],
        question: Annotated[Text, Field(description="The question about the photo, e.g. 'what breed is this dog?'")],
    ) -> Annotated[CallToolResult, ImageAnswer]:
        """Answer a question about a photo: finds what is in it, searches (the web or the server's page folder)
        and answers citing numbered sources [n]. Returns the answer and the sources (title, URL). Can take a
        minute on a CPU."""
        answer = await in_thread(ctx, service.ask_about_image, image, question,
                                 first="ask_about_image: reading the photo")
        structured = ImageAnswer(**answer)
        listed = "\n".join(f"[{s.number}] {s.title} ({s.url})" for s in structured.sources if s.cited)
        return result(structured, text=structured.answer + (f"\n\nSources:\n{listed}" if listed else ""))

    @server.tool(name="ask_gallery", title="Ask about the user's photos", annotations=read_only)
    async def ask_gallery(
        ctx: Context,
        question: Annotated[Text, Field(description="A question about the user's photos, e.g. 'what colour is the "
                                                   "boat in my beach photos?'")],
        k: Annotated[int, Field(ge=1, le=10, description="How many of the best-matching photos to read")] = 3,
    ) -> Annotated[CallToolResult, GalleryAnswer]:
        """Answer a question about the user's own photos (visual RAG): finds the photos that best match the
        question and answers from them. Returns the answer, then the photos it read (Picture n = hits[n-1]).
        With the offline default no answer is written: the caption or photo text that answers is quoted
        (answerer 'extractive'), or the answer says none does; read the photos yourself then."""
        found = await in_thread(ctx, service.ask_gallery, question, k, first="ask_gallery: finding the photos to read")
        return result(GalleryAnswer(answer=found["answer"], answerer=found["answerer"],
                                    hits=[hit_json(h) for h in found["hits"]]),
                      found["hits"], text=found["answer"])

    @server.tool(name="find_photo", title="Find one photo by answering questions (PlugIR)")
    async def find_photo(
        ctx: Context,
        description: Annotated[Text, Field(description="What the user remembers of the photo, e.g. 'a dog in the "
                                                      "snow'")],
        ask_person: Annotated[bool, Field(description="Ask the person the questions directly in the client, when "
                                                      "it supports that (MCP elicitation); otherwise answer them "
                                                      "with answer_question")] = False,
    ) -> Annotated[CallToolResult, PhotoSession]:
        """Start finding one particular photo: searches with the description and asks a question whose answer
        best narrows the photos down. Returns a session id, the question and the current best photos. Answer
        with answer_question(session, answer) until the photo shows up ('found N' picks photo N)."""
        view = await in_thread(ctx, service.find_photo, description, first="find_photo: starting a session")
        if ask_person and _client_elicits(ctx):
            view = await _ask_person(ctx, service, view)
        elif ask_person:
            view["note"] = "this client cannot ask the person directly: answer with answer_question"
        return session_result(view)

    @server.tool(name="answer_question", title="Answer find_photo's question")
    async def answer_question(
        ctx: Context,
        session: Annotated[Text, Field(description="The session id find_photo returned")],
        answer: Annotated[Text, Field(description="The answer to the pending question; or 'found N' when photo N of "
                                                 "the last results is the one; or 'stop' to end")],
    ) -> Annotated[CallToolResult, PhotoSession]:
        """Answer the pending question of a find_photo session. Returns the next question and the current best
        photos, or, when the session ends, the final results."""
        view = await in_thread(ctx, service.answer_question, session, answer, first="answer_question: reading the answer")
        return session_result(view)

    @server.tool(name="gallery_info", title="What the gallery holds", annotations=read_only)
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

    from pictrieve.mcp_server.duplicates import add_duplicates_tool

    add_duplicates_tool(server, service.gallery)
    return server


def _client_elicits(ctx: Context) -> bool:
    from mcp.types import ClientCapabilities, ElicitationCapability

    try:
        return ctx.session.check_client_capability(ClientCapabilities(elicitation=ElicitationCapability()))
    except Exception:  # no session (not in a request)
        return False


async def _ask_person(ctx: Context, service: PictrieveService, view: dict[str, Any]) -> dict[str, Any]:
    """Ask the person each question through the client until the session ends; a declined or cancelled
    question leaves the session to answer_question."""
    while not view["done"]:
        photos = "\n".join(f"  {n}. {h.caption or h.path.rsplit('/', 1)[-1]}" for n, h in enumerate(view["results"], 1))
        options = f" ({' / '.join(view['options'])})" if view["options"] else ""
        message = (f"Finding your photo of {view['query'] or 'it'}. The best photos now:\n{photos}\n\n"
                   f"{view['question']}{options}")
        try:
            asked = await ctx.elicit(message=message, schema=PersonAnswer)
        except ValidationError:  # not a text, or past MAX_TEXT (the form says maxLength; a client may not keep it)
            return {**view, "note": f"the person's answer was not a text of at most {MAX_TEXT} characters and was "
                                    "not read; answer with answer_question, or ask them yourself"}
        if asked.action != "accept" or not asked.data.answer.strip():
            return {**view, "note": f"the person {'declined' if asked.action == 'decline' else 'did not answer'}; "
                                    "answer with answer_question, or ask them yourself"}
        view = await in_thread(ctx, service.answer_question, view["session"], asked.data.answer,
                               first="answer_question: reading the answer")
    return view
