"""LangChain tools over pictrieve for agent apps: ``image_search``, ``ask_about_image`` and ``ask_gallery``.

>>> tools = [image_search_tool(gallery), ask_about_image_tool(llm=chat, search="local:./pages", gallery=gallery),
...          ask_gallery_tool(gallery, reader=vlm)]
>>> agent = langchain.agents.create_agent(chat, tools)

Every tool answers as LangChain's content-and-artifact tool output: the ``ToolMessage`` content is what the
model reads (text blocks, and for the tools that find photos the photos themselves as standard image content
blocks: JPEG thumbnails, longest side at most 512 px, so a model that sees images sees them), and its
``artifact`` is the same result as JSON data for the program (the hits, the sources). Called with plain
arguments instead of a ``ToolCall``, a tool returns the content alone.

``ask_about_image`` takes its photo as a gallery id (with ``gallery=``), base64 image data, or a file path
inside ``allowed_dirs`` (none by default: no path is read), the rule of :mod:`pictrieve.tools.core.image_inputs`
that the MCP server follows too. Bad input (a blank query, a refused path, data that is not an image)
comes back to the model as a one-line tool error, never as a crash of the agent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from os import PathLike
from typing import Any

from langchain_core.messages.content import create_text_block
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.image_inputs import (
    DEFAULT_MAX_IMAGE_BYTES,
    AllowedDirs,
    gallery_image_lookup,
    image_argument,
)
from pictrieve.vectorstore.hits import hit_rows, photo_blocks
from pictrieve.vectorstore.search_request import FILTER_FIELDS, MODEL_K, SearchRequest, run_search

IMAGE_ARGUMENT = ("The photo: a gallery id (from image_search results), base64 image data (or a data: URL), "
                  "or a file path inside the folders this tool may read")


class ImageSearchArgs(BaseModel):
    query: str = Field(default="", description="What the photos should show, in words (leave it out to browse the "
                                               "photos that pass the filters, newest first)")
    k: int = Field(default=MODEL_K, ge=1, le=50, description="How many photos to return")
    only_relevant: bool = Field(default=False, description="Return only the photos that match the description "
                                                           "well (maybe none)")
    filters: dict[str, Any] | None = Field(default=None, description=(
        "Only photos whose own metadata match: " + "; ".join(f"{name}: {accepted}"
                                                             for name, accepted in FILTER_FIELDS.items())))
    hybrid: bool = Field(default=SearchRequest.model_fields["hybrid"].default, description=(
        "Match the photos' own words too (folder and file names, captions, place, text in the photo), fused with "
        "what they show; false: by what they show alone"))
    collapse_duplicates: bool = Field(default=SearchRequest.model_fields["collapse_duplicates"].default, description=(
        "Show each group of near-identical photos once; the hit's copies lists the others"))


class AskAboutImageArgs(BaseModel):
    image: str = Field(description=IMAGE_ARGUMENT)
    question: str = Field(description="The question about the image")


class AskGalleryArgs(BaseModel):
    question: str = Field(description="A question about the user's photos, e.g. which one shows X and what it is")
    k: int = Field(default=3, ge=1, le=10, description="How many of the best-matching photos to read")


def image_search_tool(gallery: Any, *, name: str = "image_search", pictures: bool = True) -> BaseTool:
    """A tool that searches ``gallery`` by text, as every front end does (one
    :class:`~pictrieve.vectorstore.search_request.SearchRequest`: hybrid by default, the same filters): the hits
    as JSON (rank, id, path, score, relevant, matched_by, caption), a sentence saying how many photos match well
    (or that none does, or why none came back: a filter that left nothing, say), and, with ``pictures``, each
    photo as an image block; the artifact is the list of hits. ``only_relevant`` drops the photos below the
    embedder's relevance cutoff; ``filters`` alone browse, newest first."""

    def run(query: str = "", k: int = MODEL_K, only_relevant: bool = False, filters: dict[str, Any] | None = None,
            hybrid: bool | None = None, collapse_duplicates: bool = False,
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if not query.strip() and not filters:
            raise ToolException("the query is blank: say in words what the photos should show, or give filters "
                                "to browse by")
        answer = _tool_call(lambda: run_search(gallery, SearchRequest.of(
            query=query, k=k, only_relevant=only_relevant, filters=filters, hybrid=hybrid,
            collapse_duplicates=collapse_duplicates)))
        rows = hit_rows(answer.hits)
        return [create_text_block(json.dumps(rows)), create_text_block(answer.summary()),
                *(photo_blocks(answer.hits) if pictures else [])], rows

    return StructuredTool.from_function(
        run, name=name, args_schema=ImageSearchArgs, response_format="content_and_artifact", handle_tool_error=True,
        description="Search the user's photo gallery by a text description, optionally only photos taken after or "
                    "before a date, near a place, with a camera or in a folder (filters alone browse them, newest "
                    "first); says whether any photo matches well (or why none came back), then returns the "
                    "closest photos (id, path, score, relevant, caption as JSON) and the photos themselves.")


def ask_about_image_tool(graph: Any = None, *, name: str = "ask_about_image", gallery: Any = None,
                         allowed_dirs: Iterable[str | PathLike] | None = None,
                         max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES, **builder_kwargs: Any) -> BaseTool:
    """A tool answering a question about an image with the Vision Search Assistant graph.

    ``graph``: a compiled vsa graph; else one is built with ``builder_kwargs`` (llm, vlm, detector, search).
    The image is a gallery id of ``gallery``, base64 data, or a path inside ``allowed_dirs`` (no path is read
    without them). The content is the cited answer and its sources; the artifact ``{"answer", "sources",
    "citations"}``.
    """
    if graph is None:
        from pictrieve.graphs.registry import get_method

        graph = get_method("vsa").build(None, **builder_kwargs)
    allowed = AllowedDirs.of(allowed_dirs)
    lookup = gallery_image_lookup(gallery)

    def run(image: str, question: str) -> tuple[str, dict[str, Any]]:
        if not question.strip():
            raise ToolException("the question is blank: ask something about the photo")

        def answer() -> dict[str, Any]:
            with image_argument(image, lookup_id=lookup, allowed=allowed, max_bytes=max_image_bytes) as path:
                return graph.invoke({"image": path, "question": question})

        out = _tool_call(answer)
        sources = [{"number": int(s["number"]), "title": str(s.get("title") or ""), "url": str(s.get("url") or "")}
                   for s in out.get("sources") or []]
        listed = "\n".join(f"[{s['number']}] {s['title']} ({s['url']})" for s in sources)
        text = out["answer"] + (f"\n\nSources:\n{listed}" if listed else "")
        return text, {"answer": out["answer"], "sources": sources, "citations": out.get("citations")}

    return StructuredTool.from_function(
        run, name=name, args_schema=AskAboutImageArgs, response_format="content_and_artifact", handle_tool_error=True,
        description="Answer a question about a photo from what it shows and a search, citing numbered sources.")


def ask_gallery_tool(gallery: Any, *, reader: Any, name: str = "ask_gallery", captioner: Any = None,
                     pictures: bool = True) -> BaseTool:
    """A visual-RAG tool: find the photos of ``gallery`` that match a question and answer from them with
    VisRet's reader (:func:`pictrieve.agents.visret.reader.answer_from_gallery`; a VLM ``reader`` sees the
    photos, a text-only one reads their captions; the offline chat model writes nothing: the photos' own captions
    and text are quoted, :func:`~pictrieve.agents.visret.reader.quote_photo_words`). The content is the answer,
    the photos it was given (and, with ``pictures``, those photos); the artifact ``{"answer", "answerer", "hits"}``."""
    from pictrieve.agents.visret.reader import answer_from_gallery

    def run(question: str, k: int = 3) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if not question.strip():
            raise ToolException("the question is blank: ask something about the user's photos")
        found = _tool_call(lambda: answer_from_gallery(gallery, question, reader, k=k, captioner=captioner))
        photos = "\n".join(f"Picture {n}: {hit.path} (id {hit.id})" for n, hit in enumerate(found["hits"], start=1))
        text = create_text_block(f"{found['answer']}\n\nPhotos read:\n{photos}")
        blocks = [text, *(photo_blocks(found["hits"]) if pictures else [])]
        return blocks, {"answer": found["answer"], "answerer": found["answerer"], "hits": hit_rows(found["hits"])}

    return StructuredTool.from_function(
        run, name=name, args_schema=AskGalleryArgs, response_format="content_and_artifact", handle_tool_error=True,
        description="Answer a question about the user's own photos: finds the best-matching photos and "
                    "answers from what they show, naming the photo files and showing the photos.")


def _tool_call(work: Any) -> Any:
    """Run ``work``; our anticipated failures (bad input, a model that cannot be called) become a
    ``ToolException``, which the agent gets back as a one-line tool error."""
    try:
        return work()
    except PictrieveError as exc:
        raise ToolException(" ".join(str(exc).split())) from exc
