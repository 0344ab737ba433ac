"""The structured results of the MCP tools (each tool's ``outputSchema``), as pydantic models.

A tool's result carries one of these as ``structuredContent``, the same JSON as its first text block
(for clients that read only text), and, for tools that find photos, the photos as image content.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Hit(BaseModel):
    """One photo found."""

    id: str = Field(description="Gallery id: pass it to search_by_image or ask_about_image, or read "
                                "pictrieve://image/{id}")
    rank: int = Field(description="1 for the best match")
    score: float = Field(description="How well it matches (higher is better; cosine similarity for plain search)")
    relevant: bool | None = Field(default=None, description="Whether it matches the query well (its score reaches "
                                  "the embedder's calibrated cutoff); false: only the closest there is")
    caption: str = Field(default="", description="The photo's first stored caption, if it has one")
    keyword_match: bool = Field(default=False, description="Whether the photo's own words (folder or file name, "
                                "caption, place, text in the photo) matched the query")
    matched_by: str | None = Field(default=None, description="Why it is there: vector (what it shows is among the "
                                   "closest), words (its own words matched), both, or filters (browsing)")
    path: str = Field(default="", description="The photo's file on the server")
    copies: list[str] = Field(default_factory=list, description="With collapse_duplicates: the files of the "
                              "near-identical photos this one stands for")
    taken_at: str = Field(default="", description="When the photo was taken (ISO 8601, from its EXIF, with its "
                          "offset when the camera wrote one), if known")
    file_date: str = Field(default="", description="For a photo without an EXIF capture time: its file's time (ISO "
                           "8601), which may not be when it was taken")
    date: str = Field(default="", description="The day it was taken by the photo's own clock (YYYY-MM-DD), or "
                      "'YYYY-MM-DD (file date)' when only the file's date is known")
    place: str = Field(default="", description="Where it was taken (city, region, country), when the photo has a "
                       "GPS position")
    camera: str = Field(default="", description="The camera or phone that took it, from its EXIF")
    photo_text: str = Field(default="", description="Text read in the photo (signs, screenshots), when the gallery "
                                                  "was indexed with --ocr")


class SearchResult(BaseModel):
    method: str = Field(description="The retrieval method that ranked the photos")
    summary: str = Field(default="", description="In words to pass on: how many photos match well, that none "
                                                 "does and these are only the closest, or why none came back")
    why: str = Field(default="", description="When no photo came back, why: which filter left nothing and what the "
                                             "gallery has, that none passed the relevance cutoff, or that the gallery "
                                             "is empty")
    hits: list[Hit] = Field(description="The photos, best first; the image content shows them in this order")


class Source(BaseModel):
    number: int = Field(description="The number the answer cites as [n]")
    title: str
    url: str
    cited: bool = Field(description="Whether the answer cites it")


class ImageAnswer(BaseModel):
    answer: str = Field(description="The answer, citing sources as [n]")
    sources: list[Source] = Field(description="The pages read, numbered")
    answerer: str = Field(default="", description="How the answer was written: llm, or extractive (quoted sentences)")


class GalleryAnswer(BaseModel):
    answer: str
    answerer: str = Field(default="llm", description="'llm': written by the server's chat model; 'extractive': "
                                                     "quoted from the photos' captions and text (the offline "
                                                     "default writes no answers)")
    hits: list[Hit] = Field(description="The photos the answer was read from (Picture n is hits[n-1])")


class PhotoSession(BaseModel):
    session: str = Field(description="Pass it to answer_question")
    done: bool = Field(description="True when the session has ended (found, stopped, or out of questions)")
    round: int = Field(description="The question's number")
    question: str = Field(default="", description="The question to answer next (empty when done)")
    options: list[str] = Field(default_factory=list, description="The choices, for a multiple-choice question")
    query: str = Field(default="", description="The description the photos are searched with now")
    results: list[Hit] = Field(description="The current best photos (the final ones when done)")
    found: Hit | None = Field(default=None, description="The photo picked as the one, when one was")
    note: str = Field(default="", description="Anything else to know (e.g. the person declined to answer)")


class RelevanceInfo(BaseModel):
    """The rule that marks this embedder's hits relevant ("matches well"), and where it came from."""

    rule: str = Field(description="cosine (one cutoff for every query) or a per-query rule (e.g. over-median)")
    threshold: float | None = Field(description="The rule's threshold (None: the relative fallback, no cutoff known)")
    source: str = Field(description="shipped (with pictrieve), gallery (chosen by `pictrieve calibrate` on a captioned "
                                    "folder) or relative (uncalibrated: hits near the best are relevant)")
    description: str = Field(description="The rule in words, with where it came from (as `pictrieve info` says it)")


class ReplyField(BaseModel):
    """One field of the reply a method's question takes."""

    name: str
    type: str = Field(description="str (text), bool, list[str] (ids), or a choice among `choices`")
    description: str = ""
    required: bool
    picks: bool = Field(description="A list of ids among the items `shown` with the question")
    choices: list[Any] | None = None


class MethodQuestion(BaseModel):
    kind: str = Field(description="Which of the method's questions this is ('' when it asks one kind)")
    question: str = Field(description="The question, for the person")
    options: list[str] = Field(default_factory=list, description="Its choices, for a question with options")
    shown: list[dict[str, Any]] = Field(default_factory=list, description="What is shown with the question (photos "
                                        "as hits), each with an id")
    reply: list[ReplyField] = Field(description="The fields of the reply answer_method takes")


class MethodSession(BaseModel):
    session: str = Field(description="Pass it to answer_method")
    method: str
    done: bool = Field(description="True when the method has finished")
    question: MethodQuestion | None = Field(default=None, description="What it asks the person now (none when done)")
    hits: list[Hit] = Field(default_factory=list, description="The photos it found (when done, its results)")
    output: dict[str, Any] = Field(default_factory=dict, description="Its other output values")


class EmbedderInfo(BaseModel):
    name: str
    dim: int
    images: int
    default: bool
    relevance: RelevanceInfo | None = Field(default=None, description="What marks its hits relevant")


class ObjectsInfo(BaseModel):
    """How many photos have their detected objects stored (``pictrieve index --objects``), and whether the relevance
    rule reads them: the coverage of that evidence."""

    photos: int = Field(description="Photos of the gallery (default embedder)")
    analysed: int = Field(description="Of those, photos whose COCO objects the offline detector found at index time")
    told: bool = Field(description="New and changed photos get their objects as they are indexed")
    rule_uses: bool = Field(description="The default embedder's relevance rule lets them confirm or deny what a query "
                                        "names")
    said: str = Field(description="The same in words (as `pictrieve info` says it)")


class GalleryInfo(BaseModel):
    gallery: str = Field(description="Where the gallery is (a folder or a Chroma server)")
    images: int = Field(description="How many photos it holds (for the default embedder)")
    embedders: list[EmbedderInfo]
    search_methods: list[str] = Field(description="What search_images' method accepts on this server")
    needs: dict[str, str | None] = Field(description=(
        "What the server was started with for each need of its methods, by need name (`pictrieve methods` says "
        "what each is and which methods take it); None: not set up"))
    allowed_dirs: list[str] = Field(description="Folders whose files image arguments may name (empty: ids and "
                                                "base64 only)")
    max_image_bytes: int
    objects: ObjectsInfo | None = Field(default=None, description="The photos' detected objects (None: empty gallery)")
