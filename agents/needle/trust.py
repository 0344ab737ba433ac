"""Embedder trust weights learned from feedback: multiplicative weights per topic (NEEDLE Eq. 5).

When a person marks results of a query as irrelevant, each embedder ``i`` is charged

    loss_i = sum over guides j, irrelevant images I' of  S(rank of I' in R_j^i)

(an embedder that ranked the irrelevant images high pays most), then ``w_i <- w_i * (1 - eta * loss_i)``
and the topic's weights are renormalised to sum to 1. Deliberate differences from the authors' code:
the loss is summed over the per-guide lists as the paper's Eq. 5 says (their code uses each
embedder's guide-aggregated list), and the factor is clamped at ``floor`` so a weight can never go
negative (their code lets it when ``eta * loss > 1``) and a punished embedder can still recover.
Topics come with the query (the paper leaves topic classification open); ``"default"`` otherwise.

``loss="share"`` (ours, not the paper's; NEEDLE's graph uses it by default) divides each embedder's
Eq. 5 loss by the same sum over *every shown* result: the rank-weighted share of what the embedder put high among the judged results
that the person marked, in [0, 1]. An embedder none of whose ranked images was shown is not judged and
takes the mean share of the others (no evidence, no relative change). Why: Eq. 5 charges an embedder
only for marked images it ranked, so an embedder whose picks rarely reach the shown page (the fused
top k) is rarely charged, and its weight *grows* while the others pay for the page; a planted
random-projection embedder went from 0.25 to 0.50 on flickr8k-dev and the fusion lost to equal weights,
while the share pushed it to 0.04 and beat equal weights (BENCHMARKS.md, NEEDLE's learned trust).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pictrieve.agents.needle.aggregation import dedupe, position_score

DEFAULT_TOPIC = "default"
TRUST_RECORD = "needle-trust"
"""Key of the gallery JSON record holding the weights (``Gallery.get_json``/``put_json``)."""


def feedback_loss(
    rankings: Sequence[Sequence[str]], irrelevant: Collection[str], depth: int | None = None
) -> float:
    """One embedder's Eq. 5 loss over its per-guide ``rankings`` (image ids, best first)."""
    bad = set(irrelevant)
    return sum(
        position_score(rank, depth)
        for ranking in rankings
        for rank, item in enumerate(dedupe(ranking), start=1)
        if item in bad
    )


LOSSES = ("eq5", "share")


def feedback_losses(
    rankings: Mapping[str, Sequence[Sequence[str]]],
    irrelevant: Collection[str],
    *,
    loss: str = "eq5",
    shown: Collection[str] | None = None,
    depth: int | None = None,
) -> dict[str, float]:
    """Each embedder's loss for one round of feedback: Eq. 5, or its ``share`` (module docstring)."""
    if loss == "eq5":
        return {name: feedback_loss(lists, irrelevant, depth) for name, lists in rankings.items()}
    if loss != "share":
        raise ValueError(f"unknown trust loss {loss!r}; known: {', '.join(LOSSES)}")
    if shown is None:
        raise ValueError("the 'share' loss needs the shown results")
    shares = {}
    for name, lists in rankings.items():
        judged = feedback_loss(lists, shown, depth)
        if judged > 0:
            shares[name] = feedback_loss(lists, irrelevant, depth) / judged
    neutral = sum(shares.values()) / len(shares) if shares else 0.0
    return {name: shares.get(name, neutral) for name in rankings}


def normalised(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` scaled to sum to 1 (uniform when they are all 0)."""
    total = sum(max(0.0, w) for w in weights.values())
    if total <= 0:
        return {name: 1.0 / len(weights) for name in weights} if weights else {}
    return {name: max(0.0, w) / total for name, w in weights.items()}


@dataclass
class TrustTable:
    """``weights[topic][embedder]``, each topic's weights summing to 1."""

    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    updates: dict[str, int] = field(default_factory=dict)
    """How many feedback rounds each topic has learned from."""

    def for_topic(self, topic: str, embedders: Sequence[str]) -> dict[str, float]:
        """The weights of ``embedders`` for ``topic``: learned ones, uniform 1/l for new embedders."""
        known = self.weights.get(topic, {})
        uniform = 1.0 / len(embedders) if embedders else 0.0
        return normalised({name: known.get(name, uniform) for name in embedders})

    def update(
        self,
        topic: str,
        rankings: Mapping[str, Sequence[Sequence[str]]],
        irrelevant: Collection[str],
        *,
        eta: float = 0.05,
        depth: int | None = None,
        floor: float = 0.01,
        loss: str = "eq5",
        shown: Collection[str] | None = None,
    ) -> dict[str, float]:
        """Apply one round of feedback (Eq. 5, or ``loss="share"`` with the ``shown`` results) for
        ``topic``; return the new weights."""
        if not 0 < eta < 1:
            raise ValueError(f"eta must be in (0, 1), got {eta}")
        # Choices the paper leaves open, made here: the loss is charged on the per-guide lists the
        # search used (guides dropped by screening are charged nothing), with S(r) = 1/r down to the
        # lists' depth (the paper's k of R_j^i), over the marked images only (T is a subset of the
        # shown results: the graph refuses ids it did not show). It is not divided by the number of
        # guides or of marks, as Eq. 5 is written, so one round moves the weights more with more
        # guides (the "share" loss is in [0, 1] whatever the number of guides). An embedder of the
        # topic that did not rank this query keeps its weight before renormalisation.
        names = list(dict.fromkeys([*self.weights.get(topic, {}), *rankings]))
        current = self.for_topic(topic, names)
        losses = feedback_losses(rankings, irrelevant, loss=loss, shown=shown, depth=depth)
        factors = {name: max(floor, 1.0 - eta * value) for name, value in losses.items()}
        self.weights[topic] = normalised({name: w * factors.get(name, 1.0) for name, w in current.items()})
        self.updates[topic] = self.updates.get(topic, 0) + 1
        return self.for_topic(topic, list(rankings))

    def to_json(self) -> dict[str, Any]:
        return {"weights": self.weights, "updates": self.updates}

    @classmethod
    def from_json(cls, record: Mapping[str, Any] | None) -> "TrustTable":
        record = record or {}
        return cls(
            weights={t: {e: float(w) for e, w in ws.items()} for t, ws in (record.get("weights") or {}).items()},
            updates={t: int(n) for t, n in (record.get("updates") or {}).items()},
        )


def load_trust(gallery: Any) -> TrustTable:
    """The trust table stored in ``gallery`` (empty when none was learned yet)."""
    return TrustTable.from_json(gallery.get_json(TRUST_RECORD))


def save_trust(gallery: Any, table: TrustTable) -> None:
    gallery.put_json(TRUST_RECORD, table.to_json())
