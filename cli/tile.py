"""``pictrieve tile``: index tiles of every gallery image for NEEDLE (resumable)."""

from __future__ import annotations

import click

from typing import Any

from pictrieve.cli.gallery_commands import gallery_option
from pictrieve.cli.ray_engine import engine_options, ray_options, say
from pictrieve.cli.runtime_options import runtime_options
from pictrieve.vectorstore.tiles import TilingSettings


@click.command()
@gallery_option
@click.option("--embedder", "-e", "embedders", multiple=True, metavar="NAME",
              help="Embedders to tile for (repeatable; default: every embedder of the gallery).")
@click.option("--max-objects", type=click.IntRange(min=1), default=TilingSettings.max_objects, show_default=True,
              help="A region with at most this many edge objects is not split further.")
@click.option("--min-fraction", type=click.FloatRange(0.05, 1.0), default=TilingSettings.min_fraction,
              show_default=True, help="Smallest tile side, as a fraction of the image's short side.")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Photos written together per embedder (an interrupted run tiles at most this many again).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Tile only the first N images.")
@engine_options
@runtime_options
def tile(gallery: str, embedders: tuple[str, ...], max_objects: int, min_fraction: float, batch_size: int,
         limit: int | None, engine: str, **ray_settings: Any) -> None:
    """Split every image of the gallery into tiles (NEEDLE's smart tiling) and embed them.

    An image then matches a guide picture by its best tile, so small objects are found. Costs one
    embedding per tile (a few per image); the embedders run at once, on every core; an interrupted run
    resumes where it stopped. With
    --engine ray the tiles are made by a Ray Data pool of workers (see `pictrieve index --help`).
    """
    say(f"opening the gallery {gallery} ...")  # Chroma's import and the first look take seconds on a busy machine
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.tiles import index_tiles

    options = ray_options(engine, batch_size, ray_settings)
    if options is not None:
        from pictrieve.vectorstore.distributed.cluster import check_server_gallery

        check_server_gallery(gallery)
    store = Gallery.open(gallery, create=False)
    settings = TilingSettings(max_objects=max_objects, min_fraction=min_fraction)
    if options is not None:
        from pictrieve.vectorstore.distributed.tile_job import tile_on_ray

        report = tile_on_ray(store, options, list(embedders) or None, settings, limit=limit, say=say)
    else:
        say("finding the photos still to tile ...")
        report = index_tiles(store, list(embedders) or None, settings, batch_size=batch_size, limit=limit)
    for name in sorted(report.tiles):
        click.echo(f"{name}: tiled {report.tiled[name]} images into {report.tiles[name]} tiles (whole images included)")
    click.echo(f"{report.skipped} of {report.images} images already tiled")
    for path, reason in report.failed:
        click.echo(f"skipped unreadable image {path}: {reason}", err=True)
