"""VisRet's parts: run settings, input and output schemas, and its nodes (rewrite, visualize, retrieve, read).

Each node is a top-level function taking what it works with (the chat model, the visualizer, the
gallery's views, the reader) as keyword arguments, so it runs and is tested without a graph;
:func:`pictrieve.graphs.visret.build_visret_graph` binds them and wires the nodes.

- ``rewrite`` asks the LLM for a visualization prompt (the query itself without an LLM);
- ``visualize`` asks the visualizer (:mod:`pictrieve.tools.models.visualizers`) for ``guides`` pictures, kept as
  file paths in the state (:mod:`pictrieve.agents.guided`);
- ``retrieve`` ranks the gallery by each guide (image-to-image) and fuses the rankings by reciprocal rank
  fusion with constant ``rrf_k`` (1, as in the authors' code), together with the text query's own ranking
  weighted ``text_weight`` against 1 per guide (0: guides only, as in the paper);
- ``read`` answers the input's ``question`` from the top ``reader_k`` images (visual RAG:
  :mod:`pictrieve.agents.visret.reader`; a VLM sees the pictures, a text-only model reads their captions).

Deliberate differences from the authors' code: a visualizer that yields fewer images than asked
simply contributes fewer rankings (no black placeholder images are searched with), the fused
list is deduplicated by image id, and the text query's own ranking can join the fusion. The paper
fuses the guides only; found photos (the exemplar visualizer) are a weaker stand-in for a generated
picture, and fused with the text ranking at equal weight they cost more than they gave against the
trained ``offline`` text search, so their default text weight was learned (:data:`EXEMPLAR_TEXT_WEIGHT`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from langgraph.graph import END
from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve import prompts
from pictrieve.agents.guided import GalleryViews, Guide, as_visualizers, guides_from
from pictrieve.agents.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.fusion import fuse_hits
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.search_request import DEFAULT_K

logger = logging.getLogger(__name__)


EXEMPLAR_TEXT_WEIGHT = 8.0
"""Default ``text_weight`` for guides that are found photos (a visualizer whose ``generates`` is False,
the offline ``exemplar:`` one): learned on flickr8k-train's dev rows, exemplars from its other rows,
the text ranking from an ``offline`` head that never saw those rows, images by ``efficientnet-lite0``,
the weight with the best mean nDCG@10 (``benchmarks/visret_text_weight.py``; BENCHMARKS.md, "VisRet's
text weight"). It belongs to that pairing: with other embedders, measure again."""
GENERATED_TEXT_WEIGHT = 0.0
"""Default ``text_weight`` for generated guides: the paper's VisRet (guides only). No text-to-image
model can run offline here, so no other weight has been measured for them."""


@dataclass
class VisRetSettings(RunSettings):
    """Run settings of :func:`build_visret_graph`."""

    k: Annotated[int, Field(description="How many images to return.")] = DEFAULT_K
    guides: Annotated[int, Field(le=16, description="How many guide images to visualize (the paper's m).")] = 3
    candidate_k: Annotated[int, Field(le=10_000, description=(
        "How deep each per-guide ranking goes before fusion."))] = 100
    rrf_k: Annotated[float, Field(description="Reciprocal rank fusion constant (the authors' code uses 1).")] = 1.0
    text_weight: Annotated[float | None, Field(description=(
        "Weight of the text query's own ranking in the fusion, against 1 for each guide's ranking: 0 leaves it out "
        "(guides only, the paper), 1 counts it as one more guide, larger trusts it more. ``None``: by the guides' "
        "family, :data:`EXEMPLAR_TEXT_WEIGHT` for found photos (``exemplar:``), 0 for generated ones "
        "(:func:`default_text_weight`)."))] = None
    seed: Annotated[int, Field(description="Seed passed to the visualizer.")] = 0
    reader_k: Annotated[int, Field(le=100, description="Images the reader answers from (the paper: 1 or 10).")] = 1
    reader_images: Annotated[bool | None, Field(description=(
        "Send the pictures to the reader (None: when it accepts images, else their descriptions)."))] = None
    image_embedder: Annotated[str | None, Field(description=(
        "Gallery embedder for the image-to-image searches (default: the gallery's own). Offline, index "
        "``efficientnet-lite0`` next to the text embedder and name it here; text fusion keeps the gallery's."))] = None

    def validate(self) -> None:
        require_positive(self, "k", "guides", "candidate_k", "reader_k")
        if self.rrf_k < 0:
            raise SettingsError(f"rrf_k must be >= 0, got {self.rrf_k}")
        weight = self.text_weight
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                                   or not math.isfinite(weight) or weight < 0):
            raise SettingsError(f"text_weight must be a number >= 0 (0: guides only) or None (the visualizer "
                                f"family's default), got {weight!r}")


class VisRetInput(TypedDict):
    query: Annotated[str, Field(description="What to find, in words.")]
    question: NotRequired[Annotated[str, Field(description=(
        "Optional: a question answered from the retrieved images (default: none, retrieval only)."))]]


class VisRetOutput(TypedDict):
    hits: list[ImageHit]
    prompt: NotRequired[Annotated[str, Field(description=(
        "What was visualized: the query, or the LLM's rewrite of it."))]]
    guides: NotRequired[Annotated[list[Guide], Field(description=(
        "The guide pictures searched with (file paths; ``generated`` False for found photos)."))]]
    answer: NotRequired[str]
    reasoning: NotRequired[str]


class VisRetState(VisRetInput, VisRetOutput, total=False):
    pass


def default_text_weight(guides: Sequence[Guide]) -> float:
    """The text ranking's weight when the run does not set one, by the guides' family: found photos
    (every guide has ``generated`` False) get :data:`EXEMPLAR_TEXT_WEIGHT`, generated ones (or none at
    all) :data:`GENERATED_TEXT_WEIGHT`."""
    found = bool(guides) and not any(guide["generated"] for guide in guides)
    return EXEMPLAR_TEXT_WEIGHT if found else GENERATED_TEXT_WEIGHT


def one_visualizer(visualizers: Any) -> Any:
    """The builder's ``visualizers`` (one visualizer, or a list of at most one; objects or names) as one
    visualizer object, or ``None``. VisRet visualizes with one model, as in the paper; NEEDLE takes several."""
    found = as_visualizers(visualizers)
    if len(found) > 1:
        raise SettingsError(f"VisRet searches with one visualizer, got {len(found)} "
                            f"({', '.join(str(getattr(v, 'name', v)) for v in found)}); NEEDLE takes several")
    return found[0] if found else None


def rewrite_prompt_template() -> str:
    return prompts.text("visret", "rewrite")


def visualization_prompt(query: str, llm: Any = None) -> str:
    """The text to visualize for ``query``: the LLM's rewrite, or the query itself without an LLM
    (or when its reply holds no line to use; logged). A failed call raises
    :class:`~pictrieve.tools.models.llm_calls.ModelCallError`: a search must not quietly go on without
    the model it was asked to use."""
    if llm is None:
        return query
    from pictrieve.tools.models.llm_calls import complete, note_fallback

    reply = complete(llm, rewrite_prompt_template().format(query=query))
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    rewritten = lines[0].strip('"\'').strip() if lines else ""
    if not rewritten:
        note_fallback(logger, "the rewrite of the query into a visualization prompt was empty; using the query")
    return rewritten or query


# --- the nodes ----------------------------------------------------------------------------------------


def rewrite(state: VisRetState, *, llm: Any = None) -> dict[str, Any]:
    """The visualization ``prompt`` for the state's ``query`` (rewritten by ``llm`` when there is one)."""
    query = (state.get("query") or "").strip()
    if not query:
        raise SettingsError("VisRet needs a text 'query' in its input")
    return {"prompt": visualization_prompt(query, llm)}


def visualize(state: VisRetState, runtime: Runtime[VisRetSettings] | None = None, *, visualizer: Any,
              cache_dir: Any = None) -> dict[str, Any]:
    """``guides`` pictures of the state's ``prompt`` by ``visualizer`` (generated ones kept under
    ``cache_dir``, default the pictrieve cache), as guide records."""
    settings = settings_of(runtime, VisRetSettings)
    if visualizer is None:  # checked here, not at build time, so a server can list the graph
        raise SettingsError("VisRet needs a visualizer, e.g. visualizers=['exemplar:/path/to/captioned-folder'] "
                            "(served: configurable.visualizer or $PICTRIEVE_VISUALIZER)")
    return {"guides": guides_from(visualizer, state["prompt"], settings.guides, seed=settings.seed,
                                  cache_dir=cache_dir)}


def retrieve(state: VisRetState, runtime: Runtime[VisRetSettings] | None = None, *,
             views: GalleryViews) -> dict[str, Any]:
    """The ``k`` best images: each guide's ranking (through ``image_embedder``) and the text's, fused."""
    settings = settings_of(runtime, VisRetSettings)
    guides = list(state.get("guides") or [])
    images_view = views.view(settings.image_embedder)
    rankings = [images_view.search_image(guide["path"], k=settings.candidate_k) for guide in guides]
    weights = [1.0] * len(rankings)
    text_weight = settings.text_weight if settings.text_weight is not None else default_text_weight(guides)
    if text_weight > 0 or not rankings:  # no guides at all: the text ranking alone
        rankings.append(views.index.search_text(state["query"], k=settings.candidate_k))
        weights.append(text_weight if text_weight > 0 else 1.0)
    return {"hits": fuse_hits(rankings, weights, k=settings.k, rrf_k=settings.rrf_k),
            "guides": [{**guide, "status": "used"} for guide in guides]}


def after_retrieve(state: VisRetState) -> str:
    """``read`` when the input asks a question, else the end."""
    return "read" if (state.get("question") or "").strip() else END


def read(state: VisRetState, runtime: Runtime[VisRetSettings] | None = None, *, reader: Any,
         captioner: Callable[[list[str]], list[str]] | None = None) -> dict[str, Any]:
    """The ``reader``'s answer to the state's ``question`` from the top ``reader_k`` hits."""
    from pictrieve.agents.visret.reader import read_images

    settings = settings_of(runtime, VisRetSettings)
    if reader is None:
        raise SettingsError("answering a question needs a reader: build_visret_graph(..., reader=chat_model) "
                            "or llm=...")
    found = read_images(state["question"], state["hits"][: settings.reader_k], reader,
                        images=settings.reader_images, captioner=captioner)
    return {"answer": found["answer"], "reasoning": found["reasoning"]}
