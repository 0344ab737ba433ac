"""VisRet (visualize, then retrieve): search a gallery with pictures of the query instead of its text.

    START -> rewrite -> visualize -> retrieve -> END
                                             -> read -> END     (when the input has a question)

``rewrite`` asks the LLM for a visualization prompt (the query itself without an LLM); ``visualize``
asks a visualizer (:mod:`pictrieve.tools.visualizers`) for ``m`` guide images; ``retrieve`` ranks the
gallery by each guide image (image-to-image) and fuses the rankings by reciprocal rank fusion with
constant ``rrf_k`` (1, as in the authors' code), together with the text query's own ranking weighted
``text_weight`` against 1 per guide (0: guides only, as in the paper). With the offline ``exemplar:``
visualizer the guides are found photos, not generations.
With a ``question`` in the input, ``read`` answers it from the top ``reader_k`` images (visual RAG:
:mod:`pictrieve.agents.visret.reader`; a VLM sees the pictures, a text-only model reads their captions).

Deliberate differences from the authors' code: a visualizer that yields fewer images than asked
simply contributes fewer rankings (no black placeholder images are searched with), the fused
list is deduplicated by image id, and the text query's own ranking can join the fusion. The paper
fuses the guides only; found photos (the exemplar visualizer) are a weaker stand-in for a generated
picture, and fused with the text ranking at equal weight they cost more than they gave against the
trained ``offline`` text search, so their default text weight was learned (:data:`EXEMPLAR_TEXT_WEIGHT`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict

from pictrieve.graphs.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.fusion import fuse_hits
from pictrieve.vectorstore.hits import ImageHit

EXEMPLAR_TEXT_WEIGHT = 8.0
"""Default ``text_weight`` for guides that are found photos (a visualizer whose ``generates`` is False,
the offline ``exemplar:`` one): learned on flickr8k-train's dev rows, exemplars from its other rows,
the text ranking from an ``offline`` head that never saw those rows, images by ``efficientnet-lite0``,
the weight with the best mean nDCG@10 (``benchmarks/visret_text_weight.py``; BENCHMARKS.md, "VisRet's
text weight"). It belongs to that pairing: with other embedders, measure again."""
GENERATED_TEXT_WEIGHT = 0.0
"""Default ``text_weight`` for generated guides: the paper's VisRet (guides only). No text-to-image
model can run offline here, so no other weight has been measured for them."""


def default_text_weight(visualizer: Any) -> float:
    """The text ranking's weight when the run does not set one: by the guides' family (found or generated)."""
    return GENERATED_TEXT_WEIGHT if getattr(visualizer, "generates", True) else EXEMPLAR_TEXT_WEIGHT


@dataclass
class VisRetSettings(RunSettings):
    """Run settings of :func:`build_visret_graph`."""

    k: int = 10
    """How many images to return."""
    m: int = 3
    """How many guide images to visualize (the paper's m)."""
    candidate_k: int = 100
    """How deep each per-guide ranking goes before fusion."""
    rrf_k: float = 1.0
    """Reciprocal rank fusion constant (the authors' code uses 1)."""
    text_weight: float | None = None
    """Weight of the text query's own ranking in the fusion, against 1 for each guide's ranking: 0 leaves
    it out (guides only, the paper), 1 counts it as one more guide, larger trusts it more. ``None``: by
    the guides' family, :data:`EXEMPLAR_TEXT_WEIGHT` for found photos (``exemplar:``), 0 for generated
    ones (:func:`default_text_weight`)."""
    seed: int = 0
    """Seed passed to the visualizer."""
    reader_k: int = 1
    """Images the reader answers from (the paper: 1 or 10)."""
    reader_images: bool | None = None
    """Send the pictures to the reader (None: when it accepts images, else their descriptions)."""
    image_embedder: str | None = None
    """Gallery embedder for the image-to-image searches (default: the gallery's own). Offline, index
    ``efficientnet-lite0`` next to the text embedder and name it here; text fusion keeps the gallery's."""

    def validate(self) -> None:
        require_positive(self, "k")
        require_positive(self, "m")
        require_positive(self, "candidate_k")
        require_positive(self, "reader_k")
        if self.rrf_k < 0:
            raise SettingsError(f"rrf_k must be >= 0, got {self.rrf_k}")
        weight = self.text_weight
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                                   or not math.isfinite(weight) or weight < 0):
            raise SettingsError(f"text_weight must be a number >= 0 (0: guides only) or None (the visualizer "
                                f"family's default), got {weight!r}")


class VisRetInput(TypedDict):
    query: str
    question: NotRequired[str]
    """Optional: a question answered from the retrieved images (default: none, retrieval only)."""


class VisRetOutput(TypedDict):
    hits: list[ImageHit]
    prompt: NotRequired[str]
    guides: NotRequired[int]
    answer: NotRequired[str]
    reasoning: NotRequired[str]


class VisRetState(VisRetInput, VisRetOutput, total=False):
    pass


def build_visret_graph(
    index: Any,
    *,
    llm: Any = None,
    checkpointer: Any = None,
    name: str = "visret",
    visualizer: Any = None,
    reader: Any = None,
    captioner: Any = None,
) -> CompiledStateGraph:
    """Compile VisRet over ``index`` (a Gallery) with ``visualizer`` (an object or a name such as
    ``exemplar:/data/flickr8k-train``). ``llm`` (optional) rewrites queries into visualization prompts;
    ``reader`` (default: ``llm``) answers questions from the retrieved images; ``captioner`` (a
    Captioner or a name such as ``offline``) describes images without captions to a text-only reader."""
    from pictrieve.agents.visret import visualization_prompt

    if isinstance(visualizer, str):
        from pictrieve.tools.visualizers import create_visualizer

        visualizer = create_visualizer(visualizer)
    guide_images: dict[str, list[Any]] = {}
    views: dict[str, Any] = {}

    def view(embedder: str | None) -> Any:
        """The gallery seen through ``embedder`` (one view per name, so its model loads once)."""
        if embedder in (None, index.embedder_name):
            return index
        if embedder not in views:
            views[embedder] = index.with_embedder(embedder)
        return views[embedder]

    def rewrite(state: VisRetState) -> dict[str, Any]:
        query = (state.get("query") or "").strip()
        if not query:
            raise SettingsError("VisRet needs a text 'query' in its input")
        return {"prompt": visualization_prompt(query, llm)}

    def visualize(state: VisRetState, runtime: Runtime[VisRetSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisRetSettings)
        if visualizer is None:  # checked here, not at build time, so a server can list the graph
            raise SettingsError("VisRet needs a visualizer, e.g. visualizer='exemplar:/path/to/captioned-folder' "
                                "(served: configurable.visualizer or $PICTRIEVE_VISUALIZER)")
        images = visualizer.visualize(state["prompt"], n=settings.m, seed=settings.seed)
        # Images are kept out of the state (not JSON): keyed by prompt for the next node.
        guide_images[state["prompt"]] = images
        return {"guides": len(images)}

    def retrieve(state: VisRetState, runtime: Runtime[VisRetSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisRetSettings)
        images = guide_images.pop(state["prompt"], None)
        if images is None:  # resumed in another process: visualize again (cached visualizers are cheap)
            images = visualizer.visualize(state["prompt"], n=settings.m, seed=settings.seed)
        images_view = view(settings.image_embedder)
        rankings = [images_view.search_image(image, k=settings.candidate_k) for image in images]
        weights = [1.0] * len(rankings)
        text_weight = settings.text_weight if settings.text_weight is not None else default_text_weight(visualizer)
        if text_weight > 0 or not rankings:  # no guides at all: the text ranking alone
            rankings.append(index.search_text(state["query"], k=settings.candidate_k))
            weights.append(text_weight if text_weight > 0 else 1.0)
        return {"hits": fuse_hits(rankings, weights, k=settings.k, rrf_k=settings.rrf_k)}

    reader = reader if reader is not None else llm
    if isinstance(captioner, str):
        from pictrieve.tools.captioners import caption_files, create_captioner

        captioner = caption_files(create_captioner(captioner, embedder=index.embedder))

    def read(state: VisRetState, runtime: Runtime[VisRetSettings]) -> dict[str, Any]:
        from pictrieve.agents.visret.reader import read_images

        settings = settings_of(runtime, VisRetSettings)
        if reader is None:
            raise SettingsError("answering a question needs a reader: build_visret_graph(..., reader=chat_model) "
                                "or llm=...")
        found = read_images(state["question"], state["hits"][: settings.reader_k], reader,
                            images=settings.reader_images, captioner=captioner)
        return {"answer": found["answer"], "reasoning": found["reasoning"]}

    def after_retrieve(state: VisRetState) -> str:
        return "read" if (state.get("question") or "").strip() else END

    builder = StateGraph(VisRetState, context_schema=VisRetSettings, input_schema=VisRetInput, output_schema=VisRetOutput)
    builder.add_node("rewrite", rewrite)
    builder.add_node("visualize", visualize)
    builder.add_node("retrieve", retrieve)
    builder.add_edge(START, "rewrite")
    builder.add_edge("rewrite", "visualize")
    builder.add_edge("visualize", "retrieve")
    builder.add_node("read", read)
    builder.add_conditional_edges("retrieve", after_retrieve, ["read", END])
    builder.add_edge("read", END)
    return builder.compile(checkpointer=checkpointer, name=name)
