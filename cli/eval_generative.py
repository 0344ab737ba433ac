"""``pictrieve eval visret|needle``: generation-augmented retrieval against the text query's own ranking."""

from __future__ import annotations

import json
from typing import Any

import click

from pictrieve.agents.needle import METHOD as NEEDLE
from pictrieve.agents.visret import METHOD as VISRET
from pictrieve.cli.need_options import method_need_options

_common = [
    click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR"),
    method_need_options(VISRET, collect=False, required_only=True),  # --visualizer (repeatable, never DIR itself)
    click.option("--queries", type=click.IntRange(min=1), default=None,
                 help="Evaluate this many photos (first caption of each, seeded sample); default: all."),
    click.option("--gallery", "-g", default=None, metavar="PATH", help="Keep the evaluation index here."),
    click.option("--seed", default=0, show_default=True),
    click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON."),
]


def common(function: Any) -> Any:
    for option in reversed(_common):
        function = option(function)
    return function


@click.command()
@common
@click.option("--embedder", "-e", "embedders", multiple=True, default=("offline", "efficientnet-lite0"),
              show_default=True, help="Gallery embedders: the first text-image (baseline, text fusion), "
                                      "the last used image-to-image.")
@click.option("--guides", "guide_counts", multiple=True, type=click.IntRange(min=1), default=(1, 3), show_default=True,
              help="Guide image counts to compare (the paper's m; repeatable).")
@click.option("--text-weight", "text_weights", multiple=True, type=click.FloatRange(min=0, min_open=True),
              help="Fuse the text ranking at this weight (each guide weighs 1); repeat to compare. "
                   "Default: one row at the visualizer family's default weight.")
def visret_eval(folder: str, visualizers: tuple[str, ...], queries: int | None, gallery: str | None, seed: int,
                as_json: bool, embedders: tuple[str, ...], guide_counts: tuple[int, ...],
                text_weights: tuple[float, ...]) -> None:
    """VisRet on DIR/captions.jsonl: text only vs visualize-then-retrieve (guides only) vs their fusion."""
    from pictrieve.evaluation.generative import evaluate_generative

    if len(visualizers) != 1:
        raise click.UsageError("VisRet takes one --visualizer")
    image, most = embedders[-1], max(guide_counts)
    configs: dict[str, dict[str, Any]] = {
        f"visret guides={n}": {"guides": n, "image_embedder": image, "text_weight": 0.0} for n in guide_counts}
    for weight in text_weights or (None,):
        name = f"visret guides={most} + text" + ("" if weight is None else f" w={weight:g}")
        configs[name] = {"guides": most, "image_embedder": image, "text_weight": weight}
    report = evaluate_generative("visret", folder, embedders=embedders, visualizers=list(visualizers),
                                 configs=configs, queries=queries, seed=seed, gallery_location=gallery,
                                 progress=not as_json)
    _print(report, as_json)


@click.command()
@common
@click.option("--embedder", "-e", "embedders", multiple=True,
              default=("efficientnet-lite0", "offline", "offline-labels:detect"), show_default=True,
              help="Embedders NEEDLE ranks with; rows use the first 1, 2, ... of them.")
@click.option("--text-embedder", default="offline", show_default=True,
              help="Text-image embedder of the text-only baseline row.")
@click.option("--guides", type=click.IntRange(min=1), default=4, show_default=True, help="Guides per visualizer.")
@click.option("--tiles/--no-tiles", default=False, show_default=True, help="Also a row ranked by tiles (tiles made first).")
@click.option("--feedback-queries", type=click.IntRange(min=0), default=0, show_default=True,
              help="Teach trust weights with simulated feedback on this many other photos, then re-evaluate.")
def needle_eval(folder: str, visualizers: tuple[str, ...], queries: int | None, gallery: str | None, seed: int,
                as_json: bool, embedders: tuple[str, ...], text_embedder: str, guides: int, tiles: bool,
                feedback_queries: int) -> None:
    """NEEDLE on DIR/captions.jsonl: 1, 2, 3 embedders, with and without guide screening (and tiles)."""
    from pictrieve.evaluation.generative import evaluate_generative

    configs: dict[str, dict[str, Any]] = {
        f"{n} embedder{'s' if n > 1 else ''}": {"embedders": list(embedders[:n]), "guides": guides,
                                                "tiles": False}
        for n in range(1, len(embedders) + 1)
    }
    full = configs[list(configs)[-1]]
    configs["all, no screening"] = {**full, "screen": False}
    if tiles:
        configs["all + tiles"] = {**full, "tiles": True}
    indexed = list(dict.fromkeys([text_embedder, *embedders]))
    report = evaluate_generative("needle", folder, embedders=indexed, visualizers=list(visualizers),
                                 configs=configs, queries=queries, seed=seed, gallery_location=gallery,
                                 tile=tiles, feedback_queries=feedback_queries, progress=not as_json)
    _print(report, as_json)


def _print(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    kinds = ", ".join(f"{n} ({'generated' if g else 'exemplars, not generated'})"
                      for n, g in zip(report["visualizers"], report["generates"]))
    click.echo(f"{report['method']} on {report['images']} images; embedders {', '.join(report['embedders'])}; "
               f"guides from {kinds}")
    click.echo(f"{'row':32s} {'hit@1':>6s} {'hit@10':>6s} {'nDCG@10':>7s} {'VisRet-NDCG@10':>14s} {'AP':>6s} {'s/query':>7s}")
    for name, row in report["rows"].items():
        click.echo(f"{name:32s} {row['hit@1']:6.3f} {row['hit@10']:6.3f} {row['ndcg@10']:7.3f} "
                   f"{row['visret_ndcg@10']:14.3f} {row['ap']:6.3f} {row['seconds_per_query']:7.3f}")


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@method_need_options(NEEDLE, collect=False, required_only=True)  # --visualizer (repeatable, never DIR itself)
@click.option("--embedder", "-e", "embedders", multiple=True,
              default=("efficientnet-lite0", "offline", "offline-labels"), show_default=True,
              help="The real embedders NEEDLE ranks with.")
@click.option("--control", default="random-projection:0", show_default=True,
              help="A planted bad embedder added to the rows marked 'planted' ('' for none).")
@click.option("--text-embedder", default="offline", show_default=True, help="Text-image embedder of the text-only row.")
@click.option("--queries", type=click.IntRange(min=1), default=100, show_default=True, help="Test queries.")
@click.option("--feedback-queries", type=click.IntRange(min=1), default=200, show_default=True,
              help="Feedback queries (other photos) that teach the trust weights before the test.")
@click.option("--guides", type=click.IntRange(min=1), default=4, show_default=True, help="Guides per visualizer.")
@click.option("--trust", "trusts", multiple=True, default=("eq5:0.05", "share:0.2"), show_default=True, metavar="LOSS:ETA",
              help="A trust loss to learn with (eq5: the paper's; share: see agents/needle/trust.py) and its "
                   "learning rate; repeat to compare.")
@click.option("--threshold", type=float, default=None,
              help="Caption-match threshold of the simulated person (default: the one chosen on flickr8k-train).")
@click.option("--out", type=click.Path(dir_okay=False), required=True,
              help="Per-query JSON lines (a re-run with the same settings resumes it).")
@click.option("--summary", type=click.Path(dir_okay=False), default=None, help="Also write the report as JSON here.")
@click.option("--gallery", "-g", default=None, metavar="PATH", help="Keep the evaluation index here.")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def needle_trust_eval(folder: str, visualizers: tuple[str, ...], embedders: tuple[str, ...], control: str,
                      text_embedder: str, queries: int, feedback_queries: int, guides: int, trusts: tuple[str, ...],
                      threshold: float | None, out: str, summary: str | None, gallery: str | None, seed: int,
                      as_json: bool) -> None:
    """NEEDLE on DIR/captions.jsonl: trust learned from simulated feedback, frozen, against equal weights."""
    from pictrieve.agents.needle.trust import LOSSES
    from pictrieve.evaluation.needle_trust import run_trust_experiment
    from pictrieve.evaluation.relevance import MATCH_THRESHOLD

    learning: dict[str, float] = {}
    for item in trusts:
        loss, _, eta = item.partition(":")
        try:
            learning[loss] = float(eta)
        except ValueError:
            raise click.BadParameter(f"give LOSS:ETA, e.g. eq5:0.05; got {item!r}", param_hint="--trust") from None
        if loss not in LOSSES or not 0 < learning[loss] < 1:
            raise click.BadParameter(f"LOSS is one of {', '.join(LOSSES)} and ETA in (0, 1); got {item!r}",
                                     param_hint="--trust")
    report = run_trust_experiment(
        folder, visualizers=list(visualizers), embedders=list(embedders), control=control or None,
        text_embedder=text_embedder, test_queries=queries, feedback_queries=feedback_queries, guides=guides,
        trusts=learning, threshold=MATCH_THRESHOLD if threshold is None else threshold, seed=seed, out=out,
        gallery_location=gallery, progress=not as_json)
    if summary:
        from pathlib import Path

        Path(summary).parent.mkdir(parents=True, exist_ok=True)
        Path(summary).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"{report['test_done']} test queries, {report['feedback_done']} feedback queries; per-query file {out}")
    click.echo(f"{'row':52s} {'hit@1':>6s} {'hit@10':>6s} {'nDCG@10':>7s} {'AP':>6s}")
    for name, row in report["rows"].items():
        click.echo(f"{name:52s} {row['hit@1']:6.3f} {row['hit@10']:6.3f} {row['ndcg@10']:7.3f} {row['ap']:6.3f}")
    for name, learner in report["learners"].items():
        weights = ", ".join(f"{e} {w:.3f}" for e, w in (learner["weights"] or {}).items())
        click.echo(f"weights, {name}: {weights}")
    for c in report["comparisons"]:
        click.echo(f"{c['candidate']} - {c['baseline']}, {c['metric']}: {c['difference']:+.3f} "
                   f"[{c['low']:+.3f}, {c['high']:+.3f}] ({c['better']} better, {c['worse']} worse)")


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@click.option("--split", default="dev", show_default=True, help="Rows of DIR/captions.jsonl to use ('' for all).")
def needle_threshold(folder: str, split: str) -> None:
    """Choose the simulated person's caption-match threshold on DIR (a training folder, never the test one)."""
    from pictrieve.evaluation.datasets import CaptionedFolder
    from pictrieve.evaluation.relevance import choose_threshold

    photos = CaptionedFolder.load(folder, split=split or None)
    click.echo(json.dumps(choose_threshold(list(photos.captions.values())), indent=2))
