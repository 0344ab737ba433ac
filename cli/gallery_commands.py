"""``pictrieve index``, ``search``, ``sync`` and ``info``: building and querying galleries."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from pictrieve.vectorstore.gallery import Gallery, IndexReport
from pictrieve.vectorstore.hits import ImageHit

gallery_option = click.option(
    "--gallery", "-g", required=True, metavar="PATH|URL",
    help="Gallery folder, or http://host:port of a `chroma run` server.",
)
embedder_option = click.option(
    "--embedder", "-e", default=None, metavar="NAME",
    help="Embedder name, e.g. offline (default for new galleries) or "
    "open_clip:ViT-B-32/laion2b_s34b_b79k. Defaults to the gallery's own.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="PHOTOS...")
@gallery_option
@click.option("--embedder", "-e", "embedders", multiple=True, metavar="NAME",
              help="Embedder to index with; repeat it to index with several at once (each photo is decoded "
              "once). Defaults to the gallery's default, or 'offline' for a new gallery.")
@click.option("--batch-size", default=32, show_default=True, help="Images per model call and per commit.")
@click.option("--workers", default=2, show_default=True, help="Threads decoding images beside the model.")
@click.option("--sync", "prune", is_flag=True, help="Also drop gallery images whose files are gone.")
@json_option
def index(sources: tuple[str, ...], gallery: str, embedders: tuple[str, ...], batch_size: int,
          workers: int, prune: bool, as_json: bool) -> None:
    """Add PHOTOS (folders, files or quoted globs) to a gallery.

    Safe to interrupt and re-run: finished batches are kept, unchanged files are skipped, and
    unreadable files are listed at the end. Captions are read from captions.jsonl or NAME.txt.
    """
    store = Gallery.open(gallery, embedders[0] if embedders else None)
    report = store.add(list(sources), embedders=list(embedders) if len(embedders) > 1 else None,
                       batch_size=batch_size, workers=workers, progress=not as_json)
    removed = store.sync() if prune else []
    if as_json:
        click.echo(json.dumps(report.to_dict() | ({"removed": removed} if prune else {}), indent=2))
    else:
        _print_index_report(report, store, removed if prune else None)
    if report.indexed + report.unchanged == 0:
        click.echo(
            "error: no image could be indexed; check the paths (folders, files or quoted globs "
            "like 'photos/**/*.jpg') and the messages above", err=True,
        )
        sys.exit(1)


def _print_index_report(report: IndexReport, store: Gallery, removed: list[str] | None) -> None:
    click.echo(
        f"indexed {report.indexed}, unchanged {report.unchanged}, failed {len(report.failed)} "
        f"of {report.total} files; gallery {store.location} now holds {store.count()} images "
        f"({store.embedder_name})"
    )
    if removed is not None:
        click.echo(f"removed {len(removed)} images whose files are gone")
    for failure in report.failed:
        click.echo(f"  skipped {failure.error}", err=True)


@click.command()
@click.argument("query", required=False)
@click.option("--image", "-i", "image", type=click.Path(exists=True, dir_okay=False),
              help="Search by this example image instead of text.")
@gallery_option
@embedder_option
@click.option("-k", default=10, show_default=True, help="How many results.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write an HTML contact sheet here.")
@json_option
def search(query: str | None, image: str | None, gallery: str, embedder: str | None, k: int,
           html_path: str | None, as_json: bool) -> None:
    """Find the images that best match QUERY (text) or --image."""
    if bool(query) == bool(image):
        raise click.UsageError("give either a text QUERY or --image PATH (not both)")
    store = Gallery.open(gallery, embedder, create=False)
    hits = store.search_image(image, k=k) if image else store.search_text(query or "", k=k)
    if html_path:
        from pictrieve.vectorstore.contact_sheet import write_contact_sheet

        write_contact_sheet(hits, html_path, title=f"pictrieve: {query or image}")
    if as_json:
        click.echo(json.dumps({"query": query, "image": image, "hits": [_hit_dict(h) for h in hits]}, indent=2))
        return
    for hit in hits:
        caption = f"  {hit.captions[0]}" if hit.captions else ""
        click.echo(f"{hit.rank:3d}  {hit.score:.3f}  {hit.path}{caption}")
    if html_path:
        click.echo(f"contact sheet: {html_path}")


def _hit_dict(hit: ImageHit) -> dict[str, Any]:
    return {"rank": hit.rank, "score": hit.score, "id": hit.id, "path": hit.path, "metadata": hit.metadata}


@click.command()
@gallery_option
@embedder_option
@json_option
def sync(gallery: str, embedder: str | None, as_json: bool) -> None:
    """Drop gallery images whose files no longer exist."""
    removed = Gallery.open(gallery, embedder, create=False).sync()
    if as_json:
        click.echo(json.dumps({"removed": removed}, indent=2))
    else:
        click.echo(f"removed {len(removed)} images whose files are gone")


@click.command()
@gallery_option
@json_option
def info(gallery: str, as_json: bool) -> None:
    """Show the embedders a gallery holds and how many images each has."""
    from pictrieve.vectorstore.gallery import gallery_contents

    rows = gallery_contents(gallery)
    if as_json:
        click.echo(json.dumps({"gallery": gallery, "collections": rows}, indent=2))
        return
    if not rows:
        click.echo(f"{gallery}: empty; add photos with `pictrieve index PHOTOS --gallery {gallery}`")
    for row in rows:
        default = "  (default)" if row.get("default") else ""
        click.echo(f"{row['embedder']}  ({row['dim']}-d): {row['images']} images{default}")
