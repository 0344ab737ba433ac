"""LangChain tools over pictrieve for agent apps: ``image_search``, ``ask_about_image`` and ``ask_gallery``.

>>> tools = [image_search_tool(gallery), ask_about_image_tool(llm=chat, search="local:./pages"),
...          ask_gallery_tool(gallery, reader=vlm)]
>>> agent = langgraph.prebuilt.create_react_agent(chat, tools)
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field


class ImageSearchArgs(BaseModel):
    query: str = Field(description="What the photos should show, in words")
    k: int = Field(default=5, ge=1, le=50, description="How many photos to return")


class AskAboutImageArgs(BaseModel):
    image: str = Field(description="Path of the image file to ask about")
    question: str = Field(description="The question about the image")


def image_search_tool(gallery: Any, *, name: str = "image_search") -> BaseTool:
    """A tool that searches ``gallery`` by text and returns the hits as JSON (path, score, caption)."""

    def run(query: str, k: int = 5) -> str:
        hits = gallery.search_text(query, k=k)
        return json.dumps([{"rank": h.rank, "path": h.path, "score": round(h.score, 4), "caption": h.caption}
                           for h in hits])

    return StructuredTool.from_function(
        run, name=name, args_schema=ImageSearchArgs,
        description="Search the user's photo gallery by a text description; returns JSON of matching photo paths.")


def ask_about_image_tool(graph: Any = None, *, name: str = "ask_about_image", **builder_kwargs: Any) -> BaseTool:
    """A tool answering a question about an image with the Vision Search Assistant graph.

    ``graph``: a compiled vsa graph; else one is built with ``builder_kwargs`` (llm, vlm, detector, search).
    """
    if graph is None:
        from pictrieve.graphs.vision_search import build_vision_search_graph

        graph = build_vision_search_graph(None, **builder_kwargs)

    def run(image: str, question: str) -> str:
        out = graph.invoke({"image": image, "question": question})
        sources = "\n".join(f"[{s['number']}] {s['title']} ({s['url']})" for s in out.get("sources") or [])
        return out["answer"] + (f"\n\nSources:\n{sources}" if sources else "")

    return StructuredTool.from_function(
        run, name=name, args_schema=AskAboutImageArgs,
        description="Answer a question about an image file from what it shows and a search, citing sources.")


class AskGalleryArgs(BaseModel):
    question: str = Field(description="A question about the user's photos, e.g. which one shows X and what it is")
    k: int = Field(default=3, ge=1, le=10, description="How many of the best-matching photos to read")


def ask_gallery_tool(gallery: Any, *, reader: Any, name: str = "ask_gallery", captioner: Any = None) -> BaseTool:
    """A visual-RAG tool: find the photos of ``gallery`` that match a question and answer from them with
    VisRet's reader (:func:`pictrieve.agents.visret.reader.answer_from_gallery`; a VLM ``reader`` sees the
    photos, a text-only one reads their captions). The answer names the photos it was given."""
    from pictrieve.agents.visret.reader import answer_from_gallery

    def run(question: str, k: int = 3) -> str:
        found = answer_from_gallery(gallery, question, reader, k=k, captioner=captioner)
        photos = "\n".join(f"Picture {n}: {hit.path}" for n, hit in enumerate(found["hits"], start=1))
        return f"{found['answer']}\n\nPhotos read:\n{photos}"

    return StructuredTool.from_function(
        run, name=name, args_schema=AskGalleryArgs,
        description="Answer a question about the user's own photos: finds the best-matching photos and "
                    "answers from what they show, naming the photo files.")
