"""NEEDLE's smart tiles of a ``chroma run`` gallery, made by a Ray Data actor pool (``pictrieve tile --engine ray``).

The driver plans as local tiling does (:func:`~pictrieve.vectorstore.tiles.plan_tiles`: images
already tiled are skipped, stored settings must match) and creates the tile collections; each worker
(:class:`TileWorker`) tiles its share of the images once for all embedders and writes the tiles
(:func:`~pictrieve.vectorstore.tiles.tile_images`, whose whole-image row goes in last, so a killed
batch is tiled again by the next run).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pictrieve.vectorstore.distributed.cluster import (
    RayOptions,
    check_server_gallery,
    ray_cluster,
    require_ray,
    worker_shape,
)
from pictrieve.vectorstore.distributed.index_job import set_torch_threads
from pictrieve.vectorstore.distributed.pipeline import run_pipeline
from pictrieve.vectorstore.tiles import (
    TileIndex,
    TileReport,
    TileTarget,
    TilingSettings,
    create_tile_collections,
    merge_tile_reports,
    plan_tiles,
    tile_images,
)

if TYPE_CHECKING:
    from pictrieve.vectorstore.gallery import Gallery

logger = logging.getLogger(__name__)


class TileWorker:
    """One actor of the pool: loads each embedder once, then tiles, embeds and writes batch after batch.
    Each call returns one row per batch: ``report``, the batch's :class:`TileReport` as JSON."""

    def __init__(self, location: str, embedders: Sequence[str], settings: dict[str, Any], threads: int = 1) -> None:
        from pictrieve.vectorstore.gallery import Gallery

        set_torch_threads(threads)
        self.views = [Gallery.open(location, name, create=False) for name in embedders]
        for view in self.views:
            view.embedder  # load once, before the first batch
        self.collections = [TileIndex(view).collection() for view in self.views]
        self.settings = TilingSettings(**settings)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        targets = [TileTarget(**json.loads(text)) for text in batch["job"]]
        report = tile_images(self.views, self.collections, targets, self.settings)
        report.images = len(targets)  # for the driver's progress bar (merging counts tiled images only)
        return {"report": np.array([json.dumps(asdict(report))], dtype=object)}


def tile_on_ray(
    gallery: "Gallery",
    options: RayOptions = RayOptions(),
    embedders: Sequence[str] | None = None,
    settings: TilingSettings | None = None,
    *,
    limit: int | None = None,
    progress: bool = True,
    say: Callable[[str], None] = logger.info,
) -> TileReport:
    """:func:`~pictrieve.vectorstore.tiles.index_tiles` on a Ray Data actor pool: the same tiles and
    report, for a gallery on a ``chroma run`` server."""
    from tqdm.auto import tqdm

    check_server_gallery(gallery.location)
    require_ray()
    plan = plan_tiles(gallery, embedders, settings, limit=limit)
    report = plan.report()
    if not plan.todo:
        return report
    create_tile_collections(gallery, plan)
    with ray_cluster(options.address, say=say) as cluster:
        shape = worker_shape(options, cluster)
        say(f"tiling {len(plan.todo)} of {plan.images} images on {cluster.describe()}: {shape.describe()}")
        items = [{"id": target.id, "job": json.dumps(asdict(target))} for target in plan.todo]
        worker_args = {"location": gallery.location, "embedders": plan.embedders,
                       "settings": asdict(plan.settings), "threads": shape.threads}
        with tqdm(total=len(items), unit="img", desc="tiling (ray)", disable=not progress) as bar:
            for row in run_pipeline(items, TileWorker, worker_args, shape):
                part = _report_from_json(row["report"])
                merge_tile_reports(report, part)
                bar.update(part.images)
    return report


def _report_from_json(text: str) -> TileReport:
    data = json.loads(text)
    return TileReport(images=data["images"], tiled=data["tiled"], tiles=data["tiles"], skipped=data["skipped"],
                      failed=[tuple(pair) for pair in data["failed"]])
