"""``pictrieve demo``: a first look, with photos that ship inside installed packages."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

# (package, file inside it): sample photographs bundled with scikit-image and scikit-learn.
SAMPLE_PHOTOS = [
    ("skimage.data", "astronaut.png"),
    ("skimage.data", "chelsea.png"),
    ("skimage.data", "coffee.png"),
    ("skimage.data", "rocket.jpg"),
    ("skimage.data", "motorcycle_left.png"),
    ("skimage.data", "hubble_deep_field.jpg"),
    ("skimage.data", "camera.png"),
    ("skimage.data", "coins.png"),
    ("skimage.data", "brick.png"),
    ("skimage.data", "grass.png"),
    ("skimage.data", "moon.png"),
    ("skimage.data", "page.png"),
    ("sklearn.datasets.images", "china.jpg"),
    ("sklearn.datasets.images", "flower.jpg"),
]

DEMO_QUERIES = {
    "a cat": "chelsea.png",
    "a cup of coffee": "coffee.png",
    "a rocket": "rocket.jpg",
    "a motorcycle": "motorcycle_left.png",
    "a flower": "flower.jpg",
    "a temple": "china.jpg",
    "stars in the night sky": "hubble_deep_field.jpg",
}
"""Each query and the sample photo it is about, so the demo says which it found and which it missed
(the offline default misses the rocket: its text side learned from Flickr8k captions of everyday
scenes, where rockets are rare)."""


def copy_sample_photos(target: Path) -> list[Path]:
    """Copy the bundled sample photos into ``target`` (skipping any a package lacks)."""
    from importlib.resources import files

    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for package, name in SAMPLE_PHOTOS:
        source = files(package) / name
        if source.is_file():
            destination = target / name
            if not destination.exists():
                with source.open("rb") as src, open(destination, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            copied.append(destination)
    return copied


@click.command()
@click.option("--out", default="pictrieve-demo", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the photos, the gallery and results.html.")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: offline).")
@click.option("-k", default=3, show_default=True, help="Results per query.")
def demo(out: str, embedder: str | None, k: int) -> None:
    """Index sample photos bundled with scikit-image and scikit-learn, run a few queries, and write
    OUT/results.html with the hits of every query."""
    from pictrieve.tools.models.embedders.factory import default_embedder_name
    from pictrieve.vectorstore.contact_sheet import write_contact_sheet
    from pictrieve.vectorstore.gallery import Gallery

    root = Path(out)
    photos = copy_sample_photos(root / "photos")
    click.echo(f"{len(photos)} sample photos in {root / 'photos'}")
    # The default by name, not the gallery's record: a demo gallery from an earlier version shows the current default.
    gallery = Gallery.open(root / "gallery", embedder or default_embedder_name())
    report = gallery.add([root / "photos"], progress=True)
    click.echo(f"indexed {report.indexed}, unchanged {report.unchanged} with {gallery.embedder_name}")
    sections, found = [], 0
    for query, meant in DEMO_QUERIES.items():
        hits = gallery.search_text(query, k=k)
        sections.append((query, hits))
        click.echo(f"\n{query!r}")
        for hit in hits:
            click.echo(f"  {hit.rank}. {hit.score:.3f}  {Path(hit.path).name}")
        rank = next((hit.rank for hit in hits if Path(hit.path).name == meant), None)
        found += rank is not None
        click.echo(f"  -> {meant} at rank {rank}" if rank else f"  -> missed: {meant} is not in the top {k}")
    click.echo(f"\n{found} of {len(DEMO_QUERIES)} queries found their photo in the top {k} with {gallery.embedder_name}")
    sheet = write_contact_sheet(sections, root / "results.html", title=f"pictrieve demo ({gallery.embedder_name})")
    click.echo(f"contact sheet: {sheet}")
