"""``pictrieve index``, ``search``, ``sync`` and ``info``: building and querying galleries."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from pictrieve.cli.method_search import PLAIN, StepClock, method_options, run_method_showing_guides
from pictrieve.cli.ray_engine import engine_options, ray_options, say
from pictrieve.cli.runtime_options import runtime_options
from pictrieve.tools.core.devices import GPU_DECODE_ENV, require_cuda
from pictrieve.tools.core.images import load_image
from pictrieve.tools.models.photo_text import require_ocr
from pictrieve.vectorstore.errors import LargeRemovalError, SyncRefusedError
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.indexing import IndexReport, finds_objects
from pictrieve.vectorstore.photo_evidence import COST_NOTE
from pictrieve.vectorstore.hits import ImageHit, hit_line
from pictrieve.vectorstore.search_request import (
    DEFAULT_K,
    SearchAnswer,
    SearchRequest,
    SearchRequestError,
    run_search,
)

gallery_option = click.option(
    "--gallery", "-g", required=True, metavar="PATH|URL",
    help="Gallery folder, or http://host:port of a `chroma run` server.",
)
embedder_option = click.option(
    "--embedder", "-e", default=None, metavar="NAME",
    help="Embedder name, e.g. offline (default for new galleries) or "
    "open_clip:ViT-B-32/laion2b_s34b_b79k. Defaults to the gallery's default embedder.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
yes_option = click.option("--yes", "-y", is_flag=True,
                          help="Remove without asking, even more than a fifth of the gallery.")
allow_missing_folders_option = click.option(
    "--allow-missing-folders", is_flag=True,
    help="Also remove images of whole folders that are gone (default: refuse; an unplugged drive?).")


def _embedder_list(values: tuple[str, ...]) -> list[str]:
    """``--embedder a --embedder b,c`` -> ``[a, b, c]``."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="PHOTOS...")
@gallery_option
@click.option("--embedder", "-e", "embedders", multiple=True, metavar="NAME",
              help="Embedder(s) to index with; repeat or give a comma list to index with several at "
              "once (each image is decoded once). Default: the gallery's default embedder.")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1),
              help="Images per model call and per commit.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1),
              help="Threads decoding images beside the model (--engine local).")
@click.option("--max-pixels", type=click.IntRange(min=1), default=None, metavar="N",
              help="Refuse images larger than N pixels before decoding (default 180000000, "
              "or PICTRIEVE_MAX_IMAGE_PIXELS).")
@click.option("--sync", "prune", is_flag=True,
              help="Also drop gallery images whose files are gone (guarded as `pictrieve sync` is).")
@click.option("--watch", is_flag=True,
              help="Keep the gallery in step with the PHOTOS folders until Ctrl-C: catch up, then index new and "
              "changed photos, follow moved ones, forget deleted ones (guarded as `pictrieve sync` is).")
@click.option("--poll", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="With --watch: look for changes every SECONDS instead of waiting for the file system's "
              "events (network shares, which send none).")
@click.option("--ocr/--no-ocr", default=None,
              help="Read the text in photos (signs, screenshots) into each record's photo_text, from now on for "
              "this gallery (--no-ocr stops it). Off at first: about 0.2 s a photo on one CPU, as much again as "
              "embedding (1 s for a screenshot full of text). Photos already indexed gain the text without re-embedding. Needs pictrieve[ocr].")
@click.option("--objects/--no-objects", default=None,
              help="Find the COCO objects in each photo (the offline SSD-MobileNet detector), from now on for this "
              "gallery: new and changed photos get theirs in every later index, --watch and --engine ray "
              "(--no-objects stops it). The relevance rule lets them confirm or deny what a query names "
              "(\"a dog\"). About 0.13 s a photo on one CPU; photos already analysed are not looked at again.")
@click.option("--gpu-decode", is_flag=True,
              help=f"Decode the JPEGs on the GPU (nvJPEG through torchvision) for open_clip: embedders running on "
              f"CUDA; other embedders and formats decode on the CPU as usual. Needs a CUDA GPU here (with --engine "
              f"ray: --gpus-per-worker). Same as {GPU_DECODE_ENV}=1.")
@yes_option
@allow_missing_folders_option
@json_option
@engine_options
@runtime_options
def index(sources: tuple[str, ...], gallery: str, embedders: tuple[str, ...], batch_size: int,
          workers: int, max_pixels: int | None, prune: bool, ocr: bool | None, yes: bool, allow_missing_folders: bool,
          as_json: bool, engine: str, watch: bool = False, poll: float | None = None, objects: bool | None = None,
          gpu_decode: bool = False, **ray_settings: Any) -> None:
    """Add PHOTOS (folders, files or quoted globs) to a gallery.

    Safe to interrupt and re-run: finished batches are kept, unchanged files are skipped, and
    unreadable files are listed at the end. Captions are read from captions.jsonl or NAME.txt.

    With --watch it keeps going: the gallery follows the folders (one line per batch of changes;
    --json: one JSON object per batch) until Ctrl-C or SIGTERM, and a restart catches up.

    With --engine ray a Ray Data pool of workers (on this machine, or a cluster's machines with
    --ray-address) embeds the photos and writes them to the --gallery http:// server; every
    worker must read the photos at the same paths (a shared filesystem).
    """
    names = _embedder_list(embedders)
    options = ray_options(engine, batch_size, ray_settings)
    if ocr:
        require_ocr()  # one line naming the extra, before a model loads or a watch starts
    if poll is not None and not watch:
        raise click.UsageError("--poll goes with --watch")
    if gpu_decode:
        _decode_on_gpu(options)
    if watch:
        if options is not None:
            raise click.UsageError("--watch indexes in this process: leave out --engine ray")
        from pictrieve.cli.watch import watch_folders

        watch_folders(Gallery.open(gallery, names[0] if names else None), sources, embedders=names, poll=poll,
                      batch_size=batch_size, workers=workers, max_pixels=max_pixels, as_json=as_json,
                      allow_missing_folders=allow_missing_folders, allow_large=yes, ocr=ocr, objects=objects)
        return
    if options is not None:
        from pictrieve.vectorstore.distributed.cluster import check_server_gallery

        check_server_gallery(gallery)  # before anything else: a folder gallery is refused in one line
    store = Gallery.open(gallery, names[0] if names else None)
    if not as_json and finds_objects(store, objects):
        say(COST_NOTE)
    if options is not None:
        from pictrieve.vectorstore.distributed.index_job import index_on_ray

        report = index_on_ray(store, list(sources), options, embedders=names, max_pixels=max_pixels,
                              progress=not as_json, say=say, ocr=ocr, gpu_decode=gpu_decode,
                              objects=objects)
    else:
        report = store.add(list(sources), embedders=names, batch_size=batch_size, workers=workers,
                           progress=not as_json, max_pixels=max_pixels, ocr=ocr, objects=objects)
    removed: list[str] = []
    refused: SyncRefusedError | None = None
    if prune and store.exists():
        try:
            removed = _guarded_sync(store, yes=yes, allow_missing_folders=allow_missing_folders)
        except SyncRefusedError as exc:  # report what was indexed, then the refusal
            refused = exc
    if as_json:
        click.echo(json.dumps(report.to_dict() | ({"removed": removed} if prune else {}), indent=2))
    else:
        _print_index_report(report, store, removed if prune and not refused else None)
    if refused is not None:
        raise refused
    if report.indexed + report.unchanged == 0:
        click.echo(
            "error: no image could be indexed; check the paths (folders, files or quoted globs "
            "like 'photos/**/*.jpg') and the messages above", err=True,
        )
        sys.exit(1)


def _decode_on_gpu(ray: Any) -> None:
    """``--gpu-decode``: refused in one line where no GPU will decode (no CUDA here; Ray workers without GPUs), else
    :data:`GPU_DECODE_ENV` is set, which the embedders read when they load (here, in ``--watch``, and in a local Ray
    instance's workers; a cluster's workers are told through their arguments)."""
    if ray is None:
        require_cuda("--gpu-decode")
    elif not ray.gpus_per_worker:
        raise click.UsageError("--gpu-decode with --engine ray needs GPU workers: give --gpus-per-worker (e.g. 1)")
    os.environ[GPU_DECODE_ENV] = "1"


def _print_index_report(report: IndexReport, store: Gallery, removed: list[str] | None) -> None:
    click.echo(
        f"indexed {report.indexed}, unchanged {report.unchanged}, failed {len(report.failed)} "
        f"of {report.total} files; gallery {store.location} now holds {store.count()} images "
        f"({', '.join(report.embedders)})"
        + (f"; {report.copied} exact copies reused (the vector of a stored photo with the same content, "
           "not embedded again)" if report.copied else "")
    )
    if report.text_read:
        click.echo(f"read the text in {report.text_read} photos (photo_text)")
    if report.objects_found:
        click.echo(f"found the objects in {report.objects_found} photos (objects)")
    if removed is not None:
        _print_removed(removed, dry_run=False)
    for failure in report.failed:
        click.echo(f"  skipped {failure.error}", err=True)
    for note in report.notes:
        click.echo(f"  note: {note}", err=True)


@click.command()
@click.argument("query", required=False)
@click.option("--image", "-i", "image", type=click.Path(exists=True, dir_okay=False),
              help="Search by this example image instead of text.")
@gallery_option
@embedder_option
@click.option("-k", default=DEFAULT_K, show_default=True, type=click.IntRange(min=1), help="How many results.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write an HTML contact sheet here.")
@click.option("--only-relevant", is_flag=True,
              help="Drop the hits below the embedder's relevance cutoff (maybe all: then it says so).")
@json_option
@click.option("--after", help="Only photos taken on or after this date (YYYY-MM-DD).")
@click.option("--before", help="Only photos taken before this date (YYYY-MM-DD).")
@click.option("--near", help="Only photos taken near LAT,LON or a city name (see --radius).")
@click.option("--radius", "radius_km", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Kilometres around --near.")
@click.option("--place", help="Only photos whose city, region or country (name or code) has these words; case "
                              "aside, the last word may be a word's start ('lisbon', 'portugal', 'PT').")
@click.option("--camera", help="Only photos whose camera name, make or model has these words ('iphone', 'pixel 7').")
@click.option("--folder", type=click.Path(file_okay=False),
              help="Only photos in this folder or folders inside it (a path that is no folder here: folder names "
                   "in a row, e.g. trips/2023).")
@click.option("--exif-dates-only", is_flag=True,
              help="With --after/--before: leave out photos dated only by their file (no EXIF capture time).")
@click.option("--hybrid/--no-hybrid", default=True, show_default=True,
              help="Rank by the photos' own words too (folder and file names, captions, place, photo text), "
                   "fused with the vectors; --no-hybrid ranks by vectors alone.")
@click.option("--collapse-duplicates", is_flag=True,
              help="Show each group of near-identical photos once (the hit says how many copies it stands for).")
@method_options
@runtime_options
def search(query: str | None, image: str | None, gallery: str, embedder: str | None, k: int,
           html_path: str | None, only_relevant: bool, as_json: bool, after: str | None = None,
           before: str | None = None, near: str | None = None, radius_km: float = 10.0, place: str | None = None,
           camera: str | None = None, folder: str | None = None, exif_dates_only: bool = False, hybrid: bool = True,
           collapse_duplicates: bool = False, method: str = PLAIN, **method_args: Any) -> None:
    """Find the images that best match QUERY (text) or --image.

    With --method NAME another registered method searches for QUERY (`pictrieve methods` lists them):
    visret and needle first turn the query into guide images by --visualizer (offline:
    exemplar:FOLDER finds matching photos of a captioned folder; it does not generate).

    A text query also matches the photos' own words (folder and file names, captions, place, text in
    the photo), fused with the vectors; hits matched by words are marked "[words]" (--no-hybrid: vectors
    alone). Each hit is marked relevant or not by the embedder's relevance cutoff (`pictrieve calibrate`),
    or by holding every word of the query; when none is, the list starts with "no photo matches well; the
    closest are:".

    Filters alone (no QUERY) list the photos that pass them, newest first. When no photo comes back the
    command says why (which filter left nothing and what the gallery has, or that none passed the
    relevance cutoff) and exits with status 1; --json then still prints its object, with "why".
    """
    from pictrieve.vectorstore.relevance import judge_by_text

    filters = dict(after=after, before=before, near=near, radius_km=radius_km if near else None, place=place,
                   camera=camera, folder=folder)
    query = _check_query(query, image, browsing=any(value for value in filters.values()))
    if exif_dates_only:
        filters["exif_dates_only"] = True
    if method != PLAIN and any(filters.values()):
        raise click.UsageError("--after/--before/--near/--place/--camera/--folder filter the plain search; "
                               "leave out --method to use them")
    if method != PLAIN and collapse_duplicates:
        raise click.UsageError("--collapse-duplicates works with the plain search; leave out --method to use it")
    # Decoded before the gallery and its model open: a bad photo is one line, at once.
    photo = load_image(image) if image else None
    request = _request(query=query, image=photo, k=k, filters=filters, hybrid=hybrid,
                       collapse_duplicates=collapse_duplicates, only_relevant=only_relevant, method=method)
    clock = None
    if method != PLAIN:  # a method runs for many seconds: its step lines start now, before the gallery opens
        clock = StepClock()
        clock.say(f"opening the gallery {gallery} ...")
    store = Gallery.open(gallery, embedder, create=False)
    guides: list[dict[str, Any]] = []
    if method != PLAIN:
        hits, guides = run_method_showing_guides(store, method, query, k=k, clock=clock, **method_args)
        answer = SearchAnswer.of_hits(request, judge_by_text(store, query or "", hits))
    else:
        answer = run_search(store, request)
    _print_hits(answer, image=image, as_json=as_json, cutoff=store.relevance_cutoff().to_json(), guides=guides)
    if html_path:
        _write_sheet(answer.hits, html_path, title=f"pictrieve: {query or image or 'photos passing the filters'}",
                     quiet=as_json, guides=guides)
    if not answer.hits:
        sys.exit(NOTHING_FOUND)


NOTHING_FOUND = 1
"""``pictrieve search``'s exit status when no photo came back (the output says why; ``--json`` stays valid)."""

CLI_OPTIONS = {"radius_km": "--radius", "query": "QUERY", "image": "--image", "k": "-k",
               "only_relevant": "--only-relevant", "collapse_duplicates": "--collapse-duplicates"}
"""The command-line name of a request field, where it is not ``--`` and the field's name."""


def _request(**fields: Any) -> SearchRequest:
    """The one :class:`SearchRequest` from the command's options; a bad value is a usage error naming the option."""
    try:
        return SearchRequest.of(**fields)
    except SearchRequestError as exc:
        option = CLI_OPTIONS.get(exc.field, f"--{exc.field.replace('_', '-')}")
        raise click.UsageError(exc.worded(option)) from None


def _check_query(query: str | None, image: str | None, *, browsing: bool = False) -> str | None:
    """The stripped text query; a usage error unless exactly one of text or image was given (or neither, to
    browse by filters)."""
    text = (query or "").strip()
    if query is not None and not text and not image:
        raise click.UsageError("the text QUERY is empty: describe the image you are looking for")
    if text and image:
        raise click.UsageError("give a text QUERY or --image PATH, not both")
    if not text and not image and not browsing:
        raise click.UsageError("give a text QUERY or --image PATH (or filters alone, such as --place or --after, "
                               "to browse the photos that pass them, newest first)")
    return text or None


def _guide_kind(guide: dict[str, Any]) -> str:
    return "generated" if guide.get("generated") else "exemplar photo"


def _print_hits(answer: SearchAnswer, *, image: str | None, as_json: bool, cutoff: dict[str, Any] | None = None,
                guides: list[dict[str, Any]] | None = None) -> None:
    """The answer's hits, under its notice ("no photo matches well; the closest are:", or why nothing came back);
    ``--json`` adds ``relevant_count``, ``why`` and the ``relevance`` cutoff used. A method's guide pictures come
    first (``guides`` in JSON), so a person sees what guided the search."""
    shown = answer.hits
    if as_json:
        out: dict[str, Any] = {"query": answer.request.query, "image": image}
        if answer.request.filters is not None:
            out["filters"] = answer.request.filters_json()
        if guides:
            out["guides"] = guides
        click.echo(json.dumps({**out, "hits": [h.to_json() for h in shown], "relevant_count": answer.relevant_count,
                               "why": answer.why, "relevance": cutoff}, indent=2))
        return
    if guides:
        click.echo("guide pictures:")
        for guide in guides:
            click.echo(f"  {guide['id']}  {guide['path']}  ({_guide_kind(guide)}, {guide.get('status', '')})")
        click.echo("results:")
    if answer.notice():
        click.echo(answer.notice())
    # A line before the first hit below a calibrated cutoff (the relative fallback is no calibrated verdict,
    # and a list of only the closest needs no second line saying so).
    below = not answer.none_relevant and (cutoff or {}).get("threshold") is not None
    for hit in shown:
        if below and hit.relevant is False:
            click.echo("     below the relevance cutoff:")
            below = False
        click.echo(hit_line(hit))
        if hit.photo_text:
            click.echo(f"       text: {_one_line(hit.photo_text)}")


def _one_line(text: str, limit: int = 100) -> str:
    """A photo's text on one line (its lines joined by " / "), cut at ``limit`` characters."""
    line = " / ".join(part for part in text.splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _write_sheet(hits: list[ImageHit], html_path: str, *, title: str, quiet: bool,
                 guides: list[dict[str, Any]] | None = None) -> None:
    """Write the contact sheet after the results were printed (a method's guide pictures above them); a
    failure is one line and exit 1."""
    from pictrieve.vectorstore.contact_sheet import write_contact_sheet

    sections: Any = hits
    if guides:
        shown = [ImageHit(id=g["id"], path=g["path"], rank=i, captions=[f"{_guide_kind(g)}, {g.get('status', '')}"])
                 for i, g in enumerate(guides, 1)]
        sections = [("guide pictures the search used", shown), (title, hits)]
    try:
        write_contact_sheet(sections, html_path, title=title)
    except OSError as exc:
        click.echo(f"error: could not write the contact sheet {html_path}: {exc.strerror or exc}", err=True)
        sys.exit(1)
    if not quiet:
        click.echo(f"contact sheet: {html_path}")


@click.command()
@gallery_option
@embedder_option
@click.option("--dry-run", is_flag=True, help="List what would be removed; change nothing.")
@yes_option
@allow_missing_folders_option
@json_option
def sync(gallery: str, embedder: str | None, dry_run: bool, yes: bool, allow_missing_folders: bool,
         as_json: bool) -> None:
    """Drop gallery images whose files no longer exist.

    Refuses when a whole folder of the gallery is gone (an unplugged drive?), and asks before
    removing more than a fifth of the gallery unless --yes.
    """
    store = Gallery.open(gallery, embedder, create=False)
    if dry_run:
        removed = store.sync(dry_run=True)
    else:
        removed = _guarded_sync(store, yes=yes, allow_missing_folders=allow_missing_folders)
    if as_json:
        click.echo(json.dumps({"removed": removed, "dry_run": dry_run}, indent=2))
    else:
        _print_removed(removed, dry_run=dry_run)
    if dry_run and not allow_missing_folders:
        from pictrieve.vectorstore.syncing import gone_folders

        folders = gone_folders(removed)
        if folders:  # the preview must not promise what the real sync refuses
            click.echo(f"note: whole folders are gone ({', '.join(folders)}; an unplugged drive?): sync refuses to "
                       "remove their images until they are reconnected, or with --allow-missing-folders", err=True)


def _guarded_sync(store: Gallery, *, yes: bool, allow_missing_folders: bool) -> list[str]:
    """:meth:`Gallery.sync`, asking at a terminal before a large removal (``--yes`` skips the question)."""
    try:
        return store.sync(allow_missing_folders=allow_missing_folders, allow_large=yes)
    except LargeRemovalError as exc:
        if not sys.stdin.isatty():
            raise
        click.echo(exc.problem, err=True)
        click.confirm("remove them?", abort=True, err=True)
    return store.sync(allow_missing_folders=allow_missing_folders, allow_large=True)


def _print_removed(removed: list[str], *, dry_run: bool) -> None:
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(removed)} images whose files are gone")
    for path in removed:
        click.echo(f"  {path}")


@click.command()
@gallery_option
@json_option
def info(gallery: str, as_json: bool) -> None:
    """Show the embedders a gallery holds, how many images each has, the default one, and the rule that
    marks each embedder's hits relevant ("matches well") with where it came from."""
    from pictrieve.vectorstore.gallery import gallery_contents

    from pictrieve.vectorstore.photo_evidence import objects_status

    rows = gallery_contents(gallery)
    text = photo_text_status(gallery)
    view = Gallery.open(gallery, create=False)
    objects = objects_status(view, told=finds_objects(view, None)) if rows else None
    if as_json:
        default = next((row["embedder"] for row in rows if row["default"]), None)
        click.echo(json.dumps({"gallery": gallery, "default_embedder": default, "collections": rows,
                               "photo_text": text, "objects": objects}, indent=2))
        return
    if not rows:
        click.echo(f"{gallery}: empty; add photos with `pictrieve index PHOTOS --gallery {gallery}`")
    for row in rows:
        mark = "  (default)" if row["default"] else ""
        click.echo(f"{row['embedder']}  ({row['dim']}-d): {row['images']} images{mark}")
        click.echo(f"  matches well when: {row['relevance']['description']}")
    click.echo(f"photo text: {text['said']}")
    if objects is not None:
        click.echo(f"objects (COCO, detected): {objects['said']}")


def photo_text_status(gallery: str) -> dict[str, Any]:
    """Whether ``index`` reads the text in this gallery's photos (``--ocr``, as the gallery recorded it) and whether
    the reader is installed here: ``{"read", "ocr_installed", "said"}`` (``said``: the same in words)."""
    from pictrieve.tools.models.photo_text import ocr_installed
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.indexing import INDEXING_RECORD

    read = bool((Gallery.open(gallery, create=False).get_json(INDEXING_RECORD) or {}).get("ocr"))
    installed = ocr_installed()
    if read and installed:
        said = "read when photos are indexed (--ocr); searches match it (--no-ocr stops reading it)"
    elif read:
        said = ("this gallery reads it (--ocr), but the reader is not installed here: "
                "pip install 'pictrieve[ocr]' (until then new photos are indexed without their text)")
    else:
        said = (f"not read (signs, screenshots): `pictrieve index PHOTOS --gallery {gallery} --ocr` reads it"
                + ("" if installed else " (pip install 'pictrieve[ocr]' first)"))
    return {"read": read, "ocr_installed": installed, "said": said}
