"""``pictrieve duplicates``: list the groups of near-identical photos in a gallery."""

from __future__ import annotations

import json

import click

from pictrieve.cli.gallery_commands import embedder_option, gallery_option, json_option
from pictrieve.vectorstore.duplicates import (CLOSE_DISTANCE, CLOSE_MIN_COSINE, DEFAULT_MAX_DISTANCE, DEFAULT_MIN_COSINE,
                                              find_duplicates)
from pictrieve.vectorstore.gallery import Gallery


@click.command()
@gallery_option
@embedder_option
@click.option("--max-distance", type=click.IntRange(0, 16), default=DEFAULT_MAX_DISTANCE, show_default=True,
              help="Perceptual-hash bits (of 64) two near-duplicates may differ in.")
@click.option("--min-cosine", type=click.FloatRange(-1, 1), default=DEFAULT_MIN_COSINE, show_default=True,
              help="Embedding cosine two near-duplicates must reach (confirms the hash); hashes at most "
                   f"{CLOSE_DISTANCE} bits apart need only {CLOSE_MIN_COSINE} (a resized copy's embedding moves more).")
@json_option
def duplicates(gallery: str, embedder: str | None, max_distance: int, min_cosine: float, as_json: bool) -> None:
    """List groups of near-identical photos (resized, recompressed, slightly cropped or turned copies).

    Candidates come from each photo's perceptual hash (stored at index time), confirmed by the
    embedder's cosine similarity. In each group the photo with the most pixels comes first.
    """
    store = Gallery.open(gallery, embedder, create=False)
    report = find_duplicates(store, max_distance=max_distance, min_cosine=min_cosine)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    copies = sum(len(group.ids) - 1 for group in report.groups)
    click.echo(f"{len(report.groups)} groups of near-identical photos ({copies} copies) among "
               f"{report.compared} photos of {store.location}")
    for number, group in enumerate(report.groups, 1):
        click.echo(f"group {number} ({len(group.ids)} photos, cosine >= {group.min_cosine:.3f}, "
                   f"hash bits apart <= {group.max_distance}):")
        for path in group.paths:
            click.echo(f"  {path}")
    if report.unhashed:
        click.echo(f"note: {report.unhashed} photos were indexed before perceptual hashes were stored and were "
                   f"not compared; run `pictrieve index PHOTOS --gallery {gallery}` again to add them "
                   "(nothing is embedded again)", err=True)
