"""NEEDLE's parts: run settings, input and output schemas, and its nodes.

Each node is a top-level function taking what it works with (the gallery, the visualizers, the chat
model) as keyword arguments, so it runs and is tested without a graph;
:func:`pictrieve.graphs.needle.build_needle_graph` binds them and wires the nodes.

- ``refine`` cleans the query into the prompt (the paper: strip punctuation, optional prefix/suffix;
  with an ``llm`` it also rewrites it as VisRet does, the paper's optional LLM refinement) and reads, once
  per run, the topic's trust weights for the embedders the run ranks with (into ``weights``);
- ``visualize`` asks each visualizer for ``guides`` pictures (paper: 2 generators x 2);
- ``review_guides`` shows the guides to a person (``interrupt``); rejected ones are replaced by
  ``regenerate`` (new seeds, or the next-best exemplars), and the person's judgement replaces
  automatic screening, as in the paper's feedback mode;
- ``screen`` drops outlying guides: PCA/UMAP then LOF per embedder, trust-weighted (§5.2);
- ``rank``: every (embedder, guide) pair ranks the gallery (its tiles, when stored: an image ranks by
  its best tile), and the rankings are fused with the trust weights (Eq. 4);
- ``review_results`` asks which results are irrelevant (``interrupt``), ``learn`` updates the topic's
  trust weights by multiplicative weights (clamped; by default each embedder is charged the share of
  what it ranked among the shown results that was marked, our fix of the paper's Eq. 5, which
  ``trust_loss="eq5"`` restores), stores them in the gallery and re-ranks without the rejected images.

Guides travel through the state as file paths (:mod:`pictrieve.agents.guided`), so a checkpointer can
save a paused session and resume it in another process.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from pydantic import Field
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.guided import GalleryViews, Guide, guides_from
from pictrieve.agents.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.search_request import DEFAULT_K
from pictrieve.vectorstore.store import ImageStore

logger = logging.getLogger(__name__)

FEEDBACK_MODES = ("off", "guides", "results", "both")
GUIDE_VECTOR_CACHE = 4096
"""Guide vectors kept per graph, per (embedder, picture): a repeated or resumed query embeds nothing."""


@dataclass
class NeedleSettings(RunSettings):
    """Run settings of :func:`build_needle_graph`."""

    k: Annotated[int, Field(description="How many images to return.")] = DEFAULT_K
    guides: Annotated[int, Field(le=16, description=(
        "Pictures asked of each visualizer (the paper's object-detection runs: 2 generators x 2 = 4)."))] = 2
    embedders: Annotated[list[str] | None, Field(description=(
        "Embedders to rank with (default: every embedder the gallery holds)."))] = None
    candidate_k: Annotated[int, Field(le=10_000, description=(
        "How deep each (embedder, guide) ranking goes (the authors' code: 4 x the images wanted)."))] = 40
    tiles: Annotated[bool | None, Field(description=(
        "Rank by tiles (``None``: whenever every embedder used has tiles stored)."))] = None
    tiles_per_image: Annotated[int, Field(le=64, description=(
        "Tiles fetched per image wanted when ranking by tiles."))] = 4
    screen: Annotated[bool, Field(description=(
        "Drop outlying guides automatically (ignored when a person reviews the guides)."))] = True
    tau: Annotated[float, Field(description=(
        "Outlier threshold on the trust-weighted LOF score (higher keeps more guides)."))] = 1.5
    reducer: Annotated[str, Field(description=(
        'Reduction before LOF: "pca" (default, see agents/needle/anomaly.py), "umap" (the paper\'s) '
        'or "none".'))] = "pca"
    feedback: Annotated[Literal["off", "guides", "results", "both"], Field(description=(
        "Ask a person about the guides before the search, the results after it, or both."))] = "off"
    max_regenerations: Annotated[int, Field(le=10, description=(
        "Rounds of replacing rejected guides before searching with what is left."))] = 3
    eta: Annotated[float, Field(description=(
        "Learning rate of the trust weights: 0.2 for the \"share\" loss, chosen on flickr8k-train (the authors' 0.05 "
        "was for Eq. 5; BENCHMARKS.md, NEEDLE's learned trust)."))] = 0.2
    learn: Annotated[bool, Field(description="Store trust weights learned from result feedback in the gallery.")] = True
    trust_loss: Annotated[str, Field(description=(
        "How feedback charges embedders: \"share\" (default: Eq. 5 divided by what the embedder ranked of the shown "
        "results) or \"eq5\" (the paper's, which let a planted random embedder gain weight on flickr8k-dev and lost to "
        "equal weights; agents/needle/trust.py, BENCHMARKS.md)."))] = "share"
    prompt_prefix: Annotated[str, Field(description=(
        "Words put before the query in every visualizer prompt (the paper's query refinement)."))] = ""
    prompt_suffix: Annotated[str, Field(description="Words put after the query in every visualizer prompt.")] = ""
    seed: Annotated[int, Field(description="Seed of the guide pictures and of the outlier reduction.")] = 0

    def validate(self) -> None:
        require_positive(self, "k", "guides", "candidate_k", "tiles_per_image")
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
        if self.reducer == "umap":  # refused before the guides are made, not when they are screened
            from pictrieve.tools.core.extras import require_extra

            require_extra("needle", "reducer umap")
        if self.embedders is not None and not self.embedders:
            raise SettingsError("embedders must name at least one embedder (or be omitted for all)")


class NeedleInput(TypedDict):
    query: Annotated[str, Field(description="What to find, in words.")]
    topic: NotRequired[Annotated[str, Field(description=(
        "Whose learned trust weights the run reads and updates (default: one shared topic)."))]]


class NeedleOutput(TypedDict):
    hits: list[ImageHit]
    prompt: NotRequired[str]
    guides: NotRequired[list[Guide]]
    weights: NotRequired[Annotated[dict[str, float], Field(description=(
        "The embedders ranked with and their trust weights for the topic (after learning, when it learned)."))]]
    irrelevant: NotRequired[list[str]]


class GuidesQuestion(TypedDict):
    """``review_guides``' pause: the new guide pictures, for the person to approve or reject."""

    kind: Literal["guides"]
    prompt: Annotated[str, Field(description="The prompt the guide pictures were made from.")]
    question: str
    guides: Annotated[list[Guide], Field(description="The guide pictures under review.")]


class GuidesReply(TypedDict):
    rejected: Annotated[list[str], Field(description=(
        "The guide pictures that do not show what you look for (the others are approved)."))]


class ResultsQuestion(TypedDict):
    """``review_results``' pause: the results, for the person to mark those that are not wanted."""

    kind: Literal["results"]
    question: str
    hits: Annotated[list[dict[str, Any]], Field(description="The results (hits), best first.")]


class ResultsReply(TypedDict):
    irrelevant: Annotated[list[str], Field(description="The results that are NOT what you look for.")]


class NeedleState(NeedleInput, NeedleOutput, total=False):
    rankings: dict[str, list[list[str]]]
    regenerations: int


class NeedleGallery(GalleryViews):
    """The gallery as NEEDLE uses it: a view and a tile index per embedder, and a cache of guide vectors
    (a served graph lives long, so the cache forgets its oldest entries past :data:`GUIDE_VECTOR_CACHE`)."""

    def __init__(self, index: ImageStore) -> None:
        super().__init__(index)
        self.tile_indexes: dict[str, Any] = {}  # one tile index per embedder: its collection is looked up once
        self._vectors: dict[tuple[str, str], np.ndarray] = {}

    def embedders(self, settings: NeedleSettings) -> list[str]:
        """The embedders a run ranks with: ``settings.embedders``, else every one the gallery holds."""
        index = self.index
        held = index.embedder_names
        names = list(settings.embedders or held or [index.embedder_name])
        missing = sorted(set(names) - set(held))
        if missing:
            raise SettingsError(
                f"gallery {index.location} has no images for embedder(s) {', '.join(missing)} "
                f"(it holds: {', '.join(held) or 'nothing'}); index them with "
                f"`pictrieve index PHOTOS --gallery {index.location} -e NAME`"
            )
        return names

    def embed(self, embedder: str, guides: list[Guide]) -> np.ndarray:
        """The guides' pictures embedded by ``embedder``, ``(len(guides), dim)`` (each picture once)."""
        from pictrieve.tools.core.images import load_image

        todo = [g for g in guides if (embedder, g["path"]) not in self._vectors]
        if todo:
            vectors = self.view(embedder).embedder.embed_images([load_image(g["path"]) for g in todo])
            for guide, vector in zip(todo, vectors):
                self._vectors[(embedder, guide["path"])] = vector
        found = np.stack([self._vectors[(embedder, g["path"])] for g in guides])
        while len(self._vectors) > GUIDE_VECTOR_CACHE:
            self._vectors.pop(next(iter(self._vectors)))
        return found

    def tile_index(self, embedder: str) -> Any:
        if embedder not in self.tile_indexes:
            self.tile_indexes[embedder] = self.view(embedder).tiles()
        return self.tile_indexes[embedder]

    def hits(self, fused: list[tuple[str, float]]) -> list[ImageHit]:
        """``[(image id, score)]`` as ranked hits with the images' records."""
        return fused_hits(self.index, fused)


def fused_hits(index: ImageStore, fused: list[tuple[str, float]]) -> list[ImageHit]:
    """``[(image id, score)]`` from :func:`~pictrieve.agents.needle.search.fuse` as ranked hits of ``index``."""
    items = index.get([id_ for id_, _ in fused])
    return [
        ImageHit.from_record(item.id, item.metadata, score=score, rank=rank)
        for rank, (item, (_, score)) in enumerate(zip(items, fused), start=1)
    ]


def refine_query(query: str, prefix: str = "", suffix: str = "") -> str:
    """The paper's query refinement: punctuation and repeated spaces removed, optional affixes."""
    text = re.sub(r"[^\w\s'-]", " ", query)
    text = " ".join(text.split())
    return " ".join(part for part in (prefix.strip(), text, suffix.strip()) if part)


def topic_of(state: NeedleState) -> str:
    from pictrieve.agents.needle.trust import DEFAULT_TOPIC

    return state.get("topic") or DEFAULT_TOPIC


def ids_of(answer: Any, key: str) -> list[str]:
    """Ids from a resume value: ``{key: [...]}``, or a bare list."""
    if isinstance(answer, dict):
        answer = answer.get(key) or []
    if isinstance(answer, str):
        answer = [answer]
    if not isinstance(answer, (list, tuple)):
        raise SettingsError(f"resume with {{'{key}': [ids]}}, got {answer!r}")
    return [str(item) for item in answer]


def _hit_id(hit: Any) -> str:
    return hit.id if isinstance(hit, ImageHit) else hit["id"]


# --- the nodes ----------------------------------------------------------------------------------------


def refine(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None, *, gallery: NeedleGallery,
           llm: Any = None) -> dict[str, Any]:
    """The ``prompt`` to visualize, and the ``weights`` the run uses: the topic's trust weights for the
    embedders it ranks with, read from the gallery once (screening and ranking use these)."""
    from pictrieve.agents.needle.trust import load_trust

    settings = settings_of(runtime, NeedleSettings)
    query = (state.get("query") or "").strip()
    if not query:
        raise SettingsError("NEEDLE needs a text 'query' in its input")
    text = query
    if llm is not None:
        from pictrieve.agents.visret.nodes import visualization_prompt

        text = visualization_prompt(query, llm)
    weights = load_trust(gallery.index).for_topic(topic_of(state), gallery.embedders(settings))
    return {"prompt": refine_query(text, settings.prompt_prefix, settings.prompt_suffix) or query, "weights": weights}


def visualize(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None, *, visualizers: list[Any],
              cache_dir: Any = None) -> dict[str, Any]:
    """``guides`` pictures of the prompt from each visualizer; one that fails is logged and left out."""
    settings = settings_of(runtime, NeedleSettings)
    if not visualizers:  # checked here, not at build time, so a server can list the graph
        raise SettingsError("NEEDLE needs at least one visualizer, e.g. visualizers=['exemplar:/path/to/captioned-folder'] "
                            "(served: configurable.visualizer or $PICTRIEVE_VISUALIZER)")
    guides: list[Guide] = []
    for visualizer in visualizers:
        guides += _guides_or_none(visualizer, state["prompt"], settings.guides, seed=settings.seed,
                                  start=len(guides) + 1, exclude=set(), cache_dir=cache_dir)
    if not guides:
        raise SettingsError(f"no visualizer produced a guide picture for {state['prompt']!r}; see the log")
    return {"guides": guides, "regenerations": 0}


def _guides_or_none(visualizer: Any, prompt: str, n: int, **kwargs: Any) -> list[Guide]:
    try:
        return guides_from(visualizer, prompt, n, **kwargs)
    except Exception as exc:  # noqa: BLE001  (one failing generator must not end the search; no placeholders)
        logger.warning("visualizer %s failed for %r: %s", visualizer.name, prompt, exc)
        return []


def after_visualize(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None) -> str:
    """``review_guides`` when a person reviews the guides, else ``screen_guides``."""
    return "review_guides" if settings_of(runtime, NeedleSettings).feedback in ("guides", "both") else "screen_guides"


def review_guides(state: NeedleState) -> dict[str, Any]:
    """Pause for a person to approve or reject the new guides (``interrupt``); unlisted ones are approved."""
    pending = [g for g in state["guides"] if g["status"] == "new"]
    answer = interrupt({
        "kind": "guides", "prompt": state["prompt"],
        "question": "Which guide pictures show what you are looking for? Resume with "
                    "{'approved': [ids], 'rejected': [ids]} (unlisted ones count as approved).",
        "guides": pending,
    })
    rejected = set(ids_of(answer, "rejected"))
    unknown = rejected - {g["id"] for g in pending}
    if unknown:
        raise SettingsError(f"unknown guide id(s) {sorted(unknown)}; the guides under review are "
                            f"{[g['id'] for g in pending]}")
    guides = [
        {**g, "status": ("rejected" if g["id"] in rejected else "approved")} if g["status"] == "new" else g
        for g in state["guides"]
    ]
    return {"guides": guides}


def search_or_stop(state: NeedleState) -> str:
    """``rank`` with the approved guides; none approved is an error saying what to do."""
    if not any(g["status"] == "approved" for g in state["guides"]):
        raise SettingsError("every guide picture was rejected; rephrase the query or use another visualizer")
    return "rank"


def after_review(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None) -> str:
    """``regenerate`` while guides were rejected and rounds are left, else :func:`search_or_stop`."""
    settings = settings_of(runtime, NeedleSettings)
    if any(g["status"] == "rejected" for g in state["guides"]) and state.get("regenerations", 0) < settings.max_regenerations:
        return "regenerate"
    return search_or_stop(state)


def regenerate(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None, *, visualizers: list[Any],
               cache_dir: Any = None) -> dict[str, Any]:
    """Replace each rejected guide by a new picture from its visualizer (a new seed; for exemplars, the
    next best photo); rejected guides become ``discarded``."""
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
        made = _guides_or_none(visualizer, state["prompt"], 1, seed=seed, start=0, exclude=seen,
                               cache_dir=cache_dir) if visualizer else []
        for guide in made:
            seen.add(guide["path"])
            fresh.append({**guide, "replaces": old["id"]})
    for number, guide in enumerate(fresh, start=len(guides) + 1):
        guides.append({**guide, "id": f"g{number}"})
    return {"guides": guides, "regenerations": round_}


def after_regenerate(state: NeedleState) -> str:
    """Back to ``review_guides`` when there are new guides, else :func:`search_or_stop`."""
    return "review_guides" if any(g["status"] == "new" for g in state["guides"]) else search_or_stop(state)


def screen(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None, *, gallery: NeedleGallery) -> dict[str, Any]:
    """Mark outlying guides ``outlier`` and the others ``approved`` (all approved below 3 guides or with
    screening off), scoring with the run's trust ``weights``."""
    from pictrieve.agents.needle.anomaly import screen_guides

    settings = settings_of(runtime, NeedleSettings)
    guides = state["guides"]
    if not settings.screen or len(guides) < 3:
        return {"guides": [{**g, "status": "approved"} for g in guides]}
    weights = state["weights"]
    result = screen_guides({name: gallery.embed(name, guides) for name in weights}, weights, tau=settings.tau,
                           reducer=settings.reducer, seed=settings.seed)
    return {"guides": [
        {**g, "status": "outlier" if j in result.dropped else "approved", "outlier_score": round(result.scores[j], 4)}
        for j, g in enumerate(guides)
    ]}


def rank(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None, *, gallery: NeedleGallery) -> dict[str, Any]:
    """Every (embedder, approved guide) pair ranks the gallery (by tiles when asked or when every embedder
    has them); the ``k`` best of the rankings fused with the run's trust ``weights`` (Eq. 4)."""
    from pictrieve.agents.needle.search import fuse, guide_rankings

    settings = settings_of(runtime, NeedleSettings)
    weights = state["weights"]
    names = list(weights)
    used = [g for g in state["guides"] if g["status"] == "approved"]
    tile_indexes = {name: gallery.tile_index(name) for name in names}
    tiles = settings.tiles
    if tiles is None:
        tiles = all(tile_indexes[name].exists() for name in names)
    vectors = {name: gallery.embed(name, used) for name in names}
    rankings = guide_rankings({n: gallery.view(n) for n in names}, vectors, depth=settings.candidate_k,
                              tiles=tiles, tiles_per_image=settings.tiles_per_image, tile_indexes=tile_indexes)
    hits = gallery.hits(fuse(rankings, weights, settings.k))
    guides = [{**g, "status": "used"} if g["status"] == "approved" else g for g in state["guides"]]
    return {"rankings": rankings, "hits": hits, "guides": guides}


def after_rank(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None) -> str:
    """``review_results`` when a person marks the results, else the end."""
    return "review_results" if settings_of(runtime, NeedleSettings).feedback in ("results", "both") else END


def review_results(state: NeedleState) -> dict[str, Any]:
    """Pause for a person to mark the results that are not wanted (``interrupt``); ids must be shown ones."""
    answer = interrupt({
        "kind": "results",
        "question": "Which results are NOT what you are looking for? Resume with {'irrelevant': [ids]} "
                    "(an empty list if all are fine).",
        "hits": [hit.to_json() if isinstance(hit, ImageHit) else hit for hit in state["hits"]],
    })
    irrelevant = ids_of(answer, "irrelevant")
    unknown = sorted(set(irrelevant) - {_hit_id(hit) for hit in state["hits"]})
    if unknown:
        raise SettingsError(f"unknown result id(s) {unknown}; mark ids of the results shown")
    return {"irrelevant": irrelevant}


def learn(state: NeedleState, runtime: Runtime[NeedleSettings] | None = None, *, gallery: NeedleGallery) -> dict[str, Any]:
    """Update the topic's trust weights from the marked results (stored unless ``learn`` is off) and rank
    again without the marked images."""
    from pictrieve.agents.needle.search import fuse
    from pictrieve.agents.needle.trust import load_trust, save_trust

    settings = settings_of(runtime, NeedleSettings)
    irrelevant = state.get("irrelevant") or []
    if not irrelevant:
        return {}
    # The stored table is read again here only to write it back: the person may have answered minutes
    # after the run began, and another session may have taught this gallery meanwhile.
    table = load_trust(gallery.index)
    weights = table.update(topic_of(state), state["rankings"], irrelevant, eta=settings.eta,
                           depth=settings.candidate_k, loss=settings.trust_loss,
                           shown=[_hit_id(hit) for hit in state["hits"]])
    if settings.learn:
        save_trust(gallery.index, table)
    return {"weights": weights, "hits": gallery.hits(fuse(state["rankings"], weights, settings.k, exclude=set(irrelevant)))}
