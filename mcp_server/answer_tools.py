"""The MCP question tools: ``ask_about_image`` (the Vision Search Assistant: a question about one photo, answered
from what it shows and a search, citing sources) and ``ask_gallery`` (a question about the user's photos, answered
from the best-matching ones).
"""

from typing import TYPE_CHECKING, Annotated

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from pictrieve.mcp_server.calls import IMAGE_ARGUMENT, READ_ONLY, Text, in_thread, result
from pictrieve.mcp_server.schemas import GalleryAnswer, ImageAnswer
from pictrieve.mcp_server.service import PictrieveService
from pictrieve.vectorstore.hits import hit_json

if TYPE_CHECKING:
    from pictrieve.mcp_server.server import PictrieveMCP


def add_answer_tools(server: "PictrieveMCP", service: PictrieveService) -> None:
    """Register ``ask_about_image`` and ``ask_gallery`` over ``service`` on ``server``."""

    @server.tool(name="ask_about_image", title="Ask about a photo (Vision Search Assistant)",
                 annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=service.searches_the_web()))
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

    @server.tool(name="ask_gallery", title="Ask about the user's photos", annotations=READ_ONLY)
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
