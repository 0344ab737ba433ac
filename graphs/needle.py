"""NEEDLE: search a gallery with guide pictures of the query, through several embedders it learns to trust.

    START -> refine -> visualize -+-> review_guides <-> regenerate     (feedback "guides"/"both")
                                  +-> screen_guides                     (otherwise)
                                         -> rank -> review_results -> learn -> END   (feedback "results"/"both")
                                                 -> END

- ``refine`` cleans the query into the prompt (the paper: strip punctuation, optional prefix/suffix;
  with an ``llm`` it also rewrites it as VisRet does, the paper's optional LLM refinement);
- ``visualize`` asks each visualizer for ``guides_per_visualizer`` pictures (paper: 2 generators x 2);
- ``review_guides`` shows the guides to a person (``interrupt``); rejected ones are replaced by
  ``regenerate`` (new seeds, or the next-best exemplars), and the person's judgement replaces
  automatic screening, as in the paper's feedback mode;
- ``screen_guides`` drops outlying guides: PCA/UMAP then LOF per embedder, trust-weighted (§5.2);
- ``rank``: every (embedder, guide) pair ranks the gallery (its tiles, when stored: an image ranks by
  its best tile), and the rankings are fused with the topic's trust weights (Eq. 4);
- ``review_results`` asks which results are irrelevant (``interrupt``), ``learn`` updates the topic's
  trust weights by multiplicative weights (clamped; by default each embedder is charged the share of
  what it ranked among the shown results that was marked, our fix of the paper's Eq. 5, which
  ``trust_loss="eq5"`` restores), stores them in the gallery and re-ranks without the rejected images.

Guides travel through the state as file paths (:mod:`pictrieve.tools.guide_images` keeps generated
pictures on disk), so a checkpointer can save a paused session and resume it in another process.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import NotRequired, TypedDict

from pictrieve.graphs.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit

logger = logging.getLogger(__name__)

FEEDBACK_MODES = ("off", "guides", "results", "both")
GUIDE_VECTOR_CACHE = 4096
"""Guide vectors kept per graph, per (embedder, picture): a repeated or resumed query embeds nothing."""


@dataclass
class NeedleSettings(RunSettings):
    """Run settings of :func:`build_needle_graph`."""

    k: int = 10
    """How many images to return."""
    guides_per_visualizer: int = 2
    """Pictures asked of each visualizer (the paper's object-detection runs: 2 generators x 2 = 4)."""
    embedders: list[str] | None = None
    """Embedders to rank with (default: every embedder the gallery holds)."""
    candidate_k: int = 40
    """How deep each (embedder, guide) ranking goes (the authors' code: 4 x the images wanted)."""
    tiles: bool | None = None
    """Rank by tiles (``None``: whenever every embedder used has tiles stored)."""
    tiles_per_image: int = 4
    """Tiles fetched per image wanted when ranking by tiles."""
    screen: bool = True
    """Drop outlying guides automatically (ignored when a person reviews the guides)."""
    tau: float = 1.5
    """Outlier threshold on the trust-weighted LOF score (higher keeps more guides)."""
    reducer: str = "pca"
    """Reduction before LOF: "pca" (default, see agents/needle/anomaly.py), "umap" (the paper's) or "none"."""
    feedback: Literal["off", "guides", "results", "both"] = "off"
    """Ask a person about the guides before the search, the results after it, or both."""
    max_regenerations: int = 3
    """Rounds of replacing rejected guides before searching with what is left."""
    eta: float = 0.2
    """Learning rate of the trust weights: 0.2 for the "share" loss, chosen on flickr8k-train (the authors'
    0.05 was for Eq. 5; BENCHMARKS.md, NEEDLE's learned trust)."""
    learn: bool = True
    """Store trust weights learned from result feedback in the gallery."""
    trust_loss: str = "share"
    """How feedback charges embedders: "share" (default: Eq. 5 divided by what the embedder ranked of the
    shown results) or "eq5" (the paper's, which let a planted random embedder gain weight on flickr8k-dev
    and lost to equal weights; agents/needle/trust.py, BENCHMARKS.md)."""
    prompt_prefix: str = ""
    prompt_suffix: str = ""
    seed: int = 0

    def validate(self) -> None:
        require_positive(self, "k", "guides_per_visualizer", "candidate_k", "tiles_per_image")
        if self.feedback not in FEEDBACK_MODES:
            raise SettingsError(f"feedback must be one of {', '.join(FEEDBACK_MODES)}, got {self.feedback!r}")
        if not 0 < self.eta < 1:
            raise SettingsError(f"eta must be between 0 and 1, got {self.eta}")
        if self.tau <= 0:
            raise SettingsError(f"tau must be > 0, got {self.tau}")
        if self.max_regenerations < 0:
            raise SettingsError(f"max_regenerations must be >= 0, got {self.max_regenerations}")
        if self.trust_loss not in ("eq5", "share"):
            raise SettingsError(f"trust_loss must be eq5 or share, got {self.trust_loss!r}")
        if self.reducer not in ("pca", "umap", "none"):
            raise SettingsError(f"reducer must be pca, umap or none, got {self.reducer!r}")
        if self.embedders is not None and not self.embedders:
            raise SettingsError("embedders must name at least one embedder (or be omitted for all)")


class Guide(TypedDict):
    """One guide picture in the state."""

    id: str
    path: str
    visualizer: str
    generated: bool
    seed: int | None
    status: Literal["new", "approved", "rejected", "discarded", "outlier", "used"]
    """new (not reviewed yet), approved, rejected (by a person; to be replaced), discarded (rejected
    and replaced), outlier (dropped by screening), used (searched with)."""
    outlier_score: NotRequired[float]
    replaces: NotRequired[str]


class NeedleInput(TypedDict):
    query: str
    topic: NotRequired[str]


class NeedleOutput(TypedDict):
    hits: list[ImageHit]
    prompt: NotRequired[str]
    guides: NotRequired[list[Guide]]
    weights: NotRequired[dict[str, float]]
    irrelevant: NotRequired[list[str]]


class NeedleState(NeedleInput, NeedleOutput, total=False):
    rankings: dict[str, list[list[str]]]
    regenerations: int


def refine_query(query: str, prefix: str = "", suffix: str = "") -> str:
    """The paper's query refinement: punctuation and repeated spaces removed, optional affixes."""
    text = re.sub(r"[^\w\s'-]", " ", query)
    text = " ".join(text.split())
    return " ".join(part for part in (prefix.strip(), text, suffix.strip()) if part)


def build_needle_graph(
    index: Any,
    *,
    llm: Any = None,
    checkpointer: Any = None,
    name: str = "needle",
    visualizers: Any = None,
    cache_dir: Any = None,
) -> CompiledStateGraph:
    """Compile NEEDLE over ``index`` (a Gallery, ideally indexed with several embedders).

    ``visualizers`` is one visualizer or a list (objects or names such as
    ``exemplar:/data/flickr8k-train``); ``llm`` (optional) refines the query; ``cache_dir`` overrides
    where generated guides are kept. Feedback modes pause with ``interrupt()``: pass a
    ``checkpointer`` and resume with ``Command(resume=...)``.
    """
    from pictrieve.agents.needle.anomaly import screen_guides
    from pictrieve.agents.needle.search import fuse, guide_rankings
    from pictrieve.agents.needle.trust import DEFAULT_TOPIC, load_trust, save_trust
    from pictrieve.tools.guide_images import guide_paths
    from pictrieve.tools.images import load_image
    from pictrieve.tools.visualizers import create_visualizer

    if visualizers is None:
        visualizers = []
    elif isinstance(visualizers, (str, bytes)) or not isinstance(visualizers, (list, tuple)):
        visualizers = [visualizers]
    visualizers = [create_visualizer(v) if isinstance(v, str) else v for v in visualizers]
    views: dict[str, Any] = {}
    tile_indexes: dict[str, Any] = {}  # one TileIndex per embedder, so its collection is looked up once
    vector_cache: dict[tuple[str, str], np.ndarray] = {}

    def view(embedder: str) -> Any:
        if embedder not in views:
            views[embedder] = index if embedder == index.embedder_name else index.with_embedder(embedder)
        return views[embedder]

    def embedders_of(settings: NeedleSettings) -> list[str]:
        names = list(settings.embedders or index.embedder_names or [index.embedder_name])
        missing = sorted(set(names) - set(index.embedder_names))
        if missing:
            raise SettingsError(
                f"gallery {index.location} has no images for embedder(s) {', '.join(missing)} "
                f"(it holds: {', '.join(index.embedder_names) or 'nothing'}); index them with "
                f"`pictrieve index PHOTOS --gallery {index.location} -e NAME`"
            )
        return names

    def embed(embedder: str, guides: list[Guide]) -> np.ndarray:
        todo = [g for g in guides if (embedder, g["path"]) not in vector_cache]
        if todo:
            vectors = view(embedder).embedder.embed_images([load_image(g["path"]) for g in todo])
            for guide, vector in zip(todo, vectors):
                vector_cache[(embedder, guide["path"])] = vector
        found = np.stack([vector_cache[(embedder, g["path"])] for g in guides])
        while len(vector_cache) > GUIDE_VECTOR_CACHE:  # a served graph lives long: forget the oldest
            vector_cache.pop(next(iter(vector_cache)))
        return found

    def make_guides(prompt: str, visualizer: Any, n: int, seed: int, start: int, exclude: set[str]) -> list[Guide]:
        try:
            paths = guide_paths(visualizer, prompt, n, seed=seed, exclude=exclude, cache_dir=cache_dir)
        except Exception as exc:  # one failing generator must not end the search (no placeholder images)
            logger.warning("visualizer %s failed for %r: %s", visualizer.name, prompt, exc)
            return []
        return [
            Guide(id=f"g{start + i}", path=str(path), visualizer=visualizer.name,
                  generated=bool(getattr(visualizer, "generates", True)), seed=seed, status="new")
            for i, path in enumerate(paths)
        ]

    def refine(state: NeedleState, runtime: Runtime[NeedleSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, NeedleSettings)
        query = (state.get("query") or "").strip()
        if not query:
            raise SettingsError("NEEDLE needs a text 'query' in its input")
        text = query
        if llm is not None:
            from pictrieve.agents.visret import visualization_prompt

            text = visualization_prompt(query, llm)
        return {"prompt": refine_query(text, settings.prompt_prefix, settings.prompt_suffix) or query}

    def visualize(state: NeedleState, runtime: Runtime[NeedleSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, NeedleSettings)
        if not visualizers:  # checked here, not at build time, so a server can list the graph
            raise SettingsError("NEEDLE needs at least one visualizer, e.g. visualizers=['exemplar:/path/to/captioned-folder'] "
                                "(served: configurable.visualizer or $PICTRIEVE_VISUALIZER)")
        guides: list[Guide] = []
        for visualizer in visualizers:
            guides += make_guides(state["prompt"], visualizer, settings.guides_per_visualizer, settings.seed,
                                  len(guides) + 1, set())
        if not guides:
            raise SettingsError(f"no visualizer produced a guide picture for {state['prompt']!r}; see the log")
        return {"guides": guides, "regenerations": 0}

    def after_visualize(state: NeedleState, runtime: Runtime[NeedleSettings]) -> str:
        return "review_guides" if settings_of(runtime, NeedleSettings).feedback in ("guides", "both") else "screen_guides"

    def review_guides(state: NeedleState) -> dict[str, Any]:
        pending = [g for g in state["guides"] if g["status"] == "new"]
        answer = interrupt({
            "kind": "guides", "prompt": state["prompt"],
            "question": "Which guide pictures show what you are looking for? Resume with "
                        "{'approved': [ids], 'rejected': [ids]} (unlisted ones count as approved).",
            "guides": pending,
        })
        rejected = set(_ids(answer, "rejected"))
        unknown = rejected - {g["id"] for g in pending}
        if unknown:
            raise SettingsError(f"unknown guide id(s) {sorted(unknown)}; the guides under review are "
                                f"{[g['id'] for g in pending]}")
        guides = [
            {**g, "status": ("rejected" if g["id"] in rejected else "approved")} if g["status"] == "new" else g
            for g in state["guides"]
        ]
        return {"guides": guides}

    def after_review(state: NeedleState, runtime: Runtime[NeedleSettings]) -> str:
        settings = settings_of(runtime, NeedleSettings)
        if any(g["status"] == "rejected" for g in state["guides"]) and state.get("regenerations", 0) < settings.max_regenerations:
            return "regenerate"
        return search_or_stop(state)

    def search_or_stop(state: NeedleState) -> str:
        if not any(g["status"] == "approved" for g in state["guides"]):
            raise SettingsError("every guide picture was rejected; rephrase the query or use another visualizer")
        return "rank"

    def regenerate(state: NeedleState, runtime: Runtime[NeedleSettings]) -> dict[str, Any]:
        """Replace each rejected guide by a new picture from its visualizer (a new seed; for
        exemplars, the next best photo); rejected guides become ``discarded``."""
        settings = settings_of(runtime, NeedleSettings)
        round_ = state.get("regenerations", 0) + 1
        seen = {g["path"] for g in state["guides"]}
        by_name = {v.name: v for v in visualizers}
        guides: list[Guide] = []
        fresh: list[Guide] = []
        for old in state["guides"]:
            if old["status"] != "rejected":
                guides.append(old)
                continue
            guides.append({**old, "status": "discarded"})
            visualizer = by_name.get(old["visualizer"])
            seed = settings.seed + 1000 * round_ + len(guides)
            for guide in make_guides(state["prompt"], visualizer, 1, seed, 0, seen) if visualizer else []:
                seen.add(guide["path"])
                fresh.append({**guide, "replaces": old["id"]})
        for number, guide in enumerate(fresh, start=len(guides) + 1):
            guides.append({**guide, "id": f"g{number}"})
        return {"guides": guides, "regenerations": round_}

    def after_regenerate(state: NeedleState) -> str:
        return "review_guides" if any(g["status"] == "new" for g in state["guides"]) else search_or_stop(state)

    def screen(state: NeedleState, runtime: Runtime[NeedleSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, NeedleSettings)
        guides = state["guides"]
        if not settings.screen or len(guides) < 3:
            return {"guides": [{**g, "status": "approved"} for g in guides]}
        names = embedders_of(settings)
        weights = load_trust(index).for_topic(state.get("topic") or DEFAULT_TOPIC, names)
        result = screen_guides({name: embed(name, guides) for name in names}, weights, tau=settings.tau,
                               reducer=settings.reducer, seed=settings.seed)
        return {"guides": [
            {**g, "status": "outlier" if j in result.dropped else "approved", "outlier_score": round(result.scores[j], 4)}
            for j, g in enumerate(guides)
        ]}

    def rank(state: NeedleState, runtime: Runtime[NeedleSettings]) -> dict[str, Any]:
        from pictrieve.vectorstore.tiles import TileIndex

        settings = settings_of(runtime, NeedleSettings)
        names = embedders_of(settings)
        used = [g for g in state["guides"] if g["status"] == "approved"]
        for name in names:
            tile_indexes.setdefault(name, TileIndex(view(name)))
        tiles = settings.tiles
        if tiles is None:
            tiles = all(tile_indexes[name].exists() for name in names)
        vectors = {name: embed(name, used) for name in names}
        rankings = guide_rankings({n: view(n) for n in names}, vectors, depth=settings.candidate_k,
                                  tiles=tiles, tiles_per_image=settings.tiles_per_image,
                                  tile_indexes=tile_indexes)
        weights = load_trust(index).for_topic(state.get("topic") or DEFAULT_TOPIC, names)
        hits = _hits(index, fuse(rankings, weights, settings.k))
        guides = [{**g, "status": "used"} if g["status"] == "approved" else g for g in state["guides"]]
        return {"rankings": rankings, "weights": weights, "hits": hits, "guides": guides}

    def after_rank(state: NeedleState, runtime: Runtime[NeedleSettings]) -> str:
        return "review_results" if settings_of(runtime, NeedleSettings).feedback in ("results", "both") else END

    def review_results(state: NeedleState) -> dict[str, Any]:
        answer = interrupt({
            "kind": "results",
            "question": "Which results are NOT what you are looking for? Resume with {'irrelevant': [ids]} "
                        "(an empty list if all are fine).",
            "hits": [hit.to_json() if isinstance(hit, ImageHit) else hit for hit in state["hits"]],
        })
        irrelevant = _ids(answer, "irrelevant")
        known = {(hit.id if isinstance(hit, ImageHit) else hit["id"]) for hit in state["hits"]}
        unknown = sorted(set(irrelevant) - known)
        if unknown:
            raise SettingsError(f"unknown result id(s) {unknown}; mark ids of the results shown")
        return {"irrelevant": irrelevant}

    def learn(state: NeedleState, runtime: Runtime[NeedleSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, NeedleSettings)
        irrelevant = state.get("irrelevant") or []
        if not irrelevant:
            return {}
        table = load_trust(index)
        shown = [hit.id if isinstance(hit, ImageHit) else hit["id"] for hit in state["hits"]]
        weights = table.update(state.get("topic") or DEFAULT_TOPIC, state["rankings"], irrelevant,
                               eta=settings.eta, depth=settings.candidate_k, loss=settings.trust_loss, shown=shown)
        if settings.learn:
            save_trust(index, table)
        hits = _hits(index, fuse(state["rankings"], weights, settings.k, exclude=set(irrelevant)))
        return {"weights": weights, "hits": hits}

    builder = StateGraph(NeedleState, context_schema=NeedleSettings, input_schema=NeedleInput, output_schema=NeedleOutput)
    builder.add_node("refine", refine)
    builder.add_node("visualize", visualize)
    builder.add_node("review_guides", review_guides)
    builder.add_node("regenerate", regenerate)
    builder.add_node("screen_guides", screen)
    builder.add_node("rank", rank)
    builder.add_node("review_results", review_results)
    builder.add_node("learn", learn)
    builder.add_edge(START, "refine")
    builder.add_edge("refine", "visualize")
    builder.add_conditional_edges("visualize", after_visualize, ["review_guides", "screen_guides"])
    builder.add_conditional_edges("review_guides", after_review, ["regenerate", "rank"])
    builder.add_conditional_edges("regenerate", after_regenerate, ["review_guides", "rank"])
    builder.add_edge("screen_guides", "rank")
    builder.add_conditional_edges("rank", after_rank, ["review_results", END])
    builder.add_edge("review_results", "learn")
    builder.add_edge("learn", END)
    return builder.compile(checkpointer=checkpointer, name=name)


def _ids(answer: Any, key: str) -> list[str]:
    """Ids from a resume value: ``{key: [...]}``, or a bare list."""
    if isinstance(answer, dict):
        answer = answer.get(key) or []
    if isinstance(answer, str):
        answer = [answer]
    if not isinstance(answer, (list, tuple)):
        raise SettingsError(f"resume with {{'{key}': [ids]}}, got {answer!r}")
    return [str(item) for item in answer]


def _hits(index: Any, fused: list[tuple[str, float]]) -> list[ImageHit]:
    items = index.get([id_ for id_, _ in fused])
    return [
        ImageHit.from_record(item.id, item.metadata, score=score, rank=rank)
        for rank, (item, (_, score)) in enumerate(zip(items, fused), start=1)
    ]
