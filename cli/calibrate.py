"""``pictrieve calibrate`` (choose and store an embedder's relevance cutoff) and ``pictrieve eval relevance``
(measure a cutoff on held-out captioned photos). See :mod:`pictrieve.evaluation.relevance_cutoff`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from pictrieve.cli.gallery_commands import embedder_option, gallery_option, json_option

_sample_option = click.option("--sample", type=click.IntRange(min=1), default=None, metavar="N",
                              help="Use a seeded random N of the folder's captioned photos (default: all).")
_split_option = click.option("--split", default=None, metavar="NAME",
                             help='Only the photos whose captions.jsonl line has "split": NAME (e.g. train).')
_absent_option = click.option("--absent", "absent_file", type=click.Path(exists=True, dir_okay=False), default=None,
                              help="JSON lines of absent queries ({query, key_nouns, split}); default: the shipped set.")
_results_option = click.option("--results", "results_file", type=click.Path(dir_okay=False), default=None,
                               help="Write one JSON line per query (present and absent) here.")


def _folder_gallery(folder: str, embedder: str | None, sample: int | None, split: str | None) -> tuple[Any, Any]:
    """The captioned folder and its evaluation gallery (indexed once, cached; see ``eval_gallery``)."""
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery

    photos = CaptionedFolder.load(folder, split=split).sample(sample, seed=0)
    return photos, eval_gallery(photos, embedder, progress=True)


def _write_rows(path: str | None, rows: list[dict[str, Any]]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@gallery_option
@embedder_option
@_sample_option
@_split_option
@click.option("--absent-split", default="train", show_default=True,
              help="Which rows of the absent-query file calibrate (the 'dev' rows are kept for the report).")
@_absent_option
@_results_option
@click.option("--dry-run", is_flag=True, help="Choose and print the cutoff; store nothing.")
@json_option
def calibrate(folder: str, gallery: str, embedder: str | None, sample: int | None, split: str | None,
              absent_split: str, absent_file: str | None, results_file: str | None, dry_run: bool,
              as_json: bool) -> None:
    """Choose the relevance cutoff of the gallery's embedder on the captioned photos in DIR and store it in
    the gallery, so every search marks its hits relevant or not.

    DIR holds images and a captions.jsonl (the flickr8k layout). Each caption, scored against its own
    photo, should reach the cutoff; each absent query (things no photo of DIR shows), scored against
    its best photo, should not. The cutoff maximises balanced accuracy between the two. DIR's photos
    are indexed into a cached evaluation gallery, never into --gallery.
    """
    from pictrieve.evaluation.relevance_cutoff import absent_for, calibrate as choose, per_query_rows
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.relevance import shipped_cutoffs, store_cutoff

    store = Gallery.open(gallery, embedder)
    photos, folder_gallery = _folder_gallery(folder, store.embedder_name, sample, split)
    absent = absent_for(photos, absent_split, absent_file)
    threshold, stats, scores = choose(photos, folder_gallery, absent)
    stats.update({"sample": sample, "split": split, "absent_split": absent_split})
    rule = stats.get("rule", "cosine")
    if not dry_run:
        reference = shipped_cutoffs().get(store.embedder_name, {}).get("reference")
        stored = store_cutoff(store, threshold, stats, rule, reference)
    _write_rows(results_file, per_query_rows(scores, threshold))
    if as_json:
        click.echo(json.dumps({"gallery": gallery, "stored": not dry_run, "threshold": threshold, "stats": stats},
                              indent=2))
        return
    what = "cosine" if rule == "cosine" else f"rule {rule}, the shipped reference photos"
    click.echo(
        f"{store.embedder_name}: relevance cutoff {threshold:.4f} ({what}) from {stats['present_queries']} caption "
        f"queries over {stats['photos']} photos and {stats['absent_queries']} absent queries; "
        f"{stats['present_marked_relevant']:.1%} of captions reach their own photo, "
        f"{stats['absent_marked_irrelevant']:.1%} of absent queries stay below"
    )
    click.echo("not stored (--dry-run)" if dry_run else
               f"stored in {gallery}: searches now mark a hit relevant when {stored.describe()}")


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder to evaluate (default: offline).")
@click.option("--threshold", type=float, default=None,
              help="A cosine cutoff to measure (default: the rule shipped for the embedder).")
@click.option("-k", default=10, show_default=True, type=click.IntRange(min=1),
              help="Also count a present photo found within the top k.")
@_sample_option
@_split_option
@click.option("--absent-split", default="dev", show_default=True, help="Which rows of the absent-query file to use.")
@_absent_option
@_results_option
@json_option
def relevance_eval(folder: str, embedder: str | None, threshold: float | None, k: int, sample: int | None,
                   split: str | None, absent_split: str, absent_file: str | None, results_file: str | None,
                   as_json: bool) -> None:
    """How often the relevance cutoff marks a present photo relevant (each caption of DIR -> its own
    photo) and how often a query about something absent from DIR returns nothing relevant, with 95%
    bootstrap intervals. Measure on photos the cutoff was not chosen on."""
    from pictrieve.evaluation.relevance_cutoff import absent_for, evaluate_cutoff, per_query_rows, score_folder
    from pictrieve.tools.models.embedders.factory import check_embedder_name, default_embedder_name
    from pictrieve.vectorstore.relevance import cutoff_from_records

    name = check_embedder_name(embedder or default_embedder_name())
    rule = None
    if threshold is None:
        rule = cutoff_from_records(name, None)
        threshold = rule.threshold
        if threshold is None:
            raise click.UsageError(f"no cutoff ships for {name!r}: pass --threshold (from `pictrieve calibrate --json`)")
    photos, folder_gallery = _folder_gallery(folder, name, sample, split)
    scores = score_folder(photos, folder_gallery, absent_for(photos, absent_split, absent_file), rule=rule)
    report = {"embedder": name, "folder": folder, **evaluate_cutoff(scores, threshold, k=k)}
    _write_rows(results_file, per_query_rows(scores, threshold))
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    present, found, absent = (report["present_marked_relevant"], report[f"present_in_top{k}_and_relevant"],
                              report["absent_nothing_relevant"])
    click.echo(f"{name}, {report['rule']} cutoff {threshold:.4f}: {report['caption_queries']} caption queries over {report['photos']} "
               f"photos, {report['absent_queries']} absent queries")
    for label, row in (("present photo marked relevant", present), (f"present, in top {k} and relevant", found),
                       ("absent query: nothing relevant", absent)):
        click.echo(f"  {label:34s} {row['mean']:.3f}  [{row['low']:.3f}, {row['high']:.3f}]")
