"""The Ray Data pipeline both distributed jobs run: work items in, a callable-class actor pool, rows out.

Each work item is one row (``{"id": ..., "job": JSON}``); rows travel in blocks of ``batch_size``, and a
block is one call of the worker class (``map_batches``): one model call per embedder and one write to
the Chroma server. Ray restarts a worker whose process dies and runs its unfinished batches again on a
live one (``max_restarts``/``max_task_retries`` of -1, Ray Data's defaults); since every write is an
upsert of path-hash ids, a batch done twice leaves one record per photo. The driver reads the workers'
result rows as they come.
"""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any, Iterator, Mapping, Sequence

from pictrieve.errors import PictrieveError, causes
from pictrieve.vectorstore.distributed.cluster import WorkerShape, require_ray

logger = logging.getLogger(__name__)


class DistributedJobError(PictrieveError, RuntimeError):
    """A distributed job stopped; the batches finished before that are stored."""


def run_pipeline(
    items: Sequence[Mapping[str, Any]], worker_class: type, worker_args: Mapping[str, Any], shape: WorkerShape,
) -> Iterator[dict[str, Any]]:
    """Run ``worker_class(**worker_args)`` as a pool of ``shape.workers`` actors over ``items`` in
    batches of ``shape.batch_size``; yield every row the workers return, as soon as its batch is done.

    A pictrieve error raised inside a worker (an embedder whose weights differ from the stored ones)
    comes back as itself; any other failure becomes a :class:`DistributedJobError`.
    """
    ray = require_ray()
    from ray.data import ActorPoolStrategy

    blocks = max(1, math.ceil(len(items) / shape.batch_size))
    dataset = ray.data.from_items(list(items), override_num_blocks=blocks).map_batches(
        worker_class,
        fn_constructor_kwargs=dict(worker_args),
        batch_size=shape.batch_size,
        batch_format="numpy",
        compute=_actor_pool(ActorPoolStrategy, min(shape.workers, blocks)),  # no idle actor loading models
        num_cpus=shape.cpus,
        num_gpus=shape.gpus or None,
        # A dead worker is restarted and its batches run again on a live one: Ray Data's defaults for
        # actor pools (max_restarts=-1, max_task_retries=-1), on which the module's fault tolerance rests;
        # passing them again as remote arguments is deprecated since Ray 2.5x, and the kill -9 test
        # (tests/test_ray_engine.py) checks the behaviour itself.
        **_legacy_concurrency(ActorPoolStrategy),
    )
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            columns = list(batch)
            for values in zip(*(batch[name] for name in columns)):
                yield {name: _plain(value) for name, value in zip(columns, values)}
    except Exception as exc:  # noqa: BLE001 - Ray wraps a worker's error in its own types
        ours = next((cause for cause in causes(exc) if isinstance(cause, PictrieveError)), None)
        if ours is not None:
            raise ours from exc
        raise DistributedJobError(
            f"the Ray job stopped: {_root_message(exc)}; every batch finished before that is stored, so running "
            "the same command again goes on from there"
        ) from exc


CALLS_PER_WORKER = 2
"""Two batches at a time in each worker: one is read and decoded (threads) while the model embeds the
other, as local indexing overlaps them; a GPU is not left idle while photos are decoded."""


def _actor_pool(strategy: Any, size: int) -> Any:
    """A fixed pool of ``size`` workers, each running :data:`CALLS_PER_WORKER` batches at once: named
    arguments of the strategy where this Ray has them (2.5x and later; its remote-argument form is
    deprecated there), else the remote argument :func:`_legacy_concurrency` adds."""
    if _has_named_concurrency(strategy):
        return strategy(size=size, max_concurrent_calls_per_actor=CALLS_PER_WORKER, enable_true_multi_threading=True)
    return strategy(size=size)


def _legacy_concurrency(strategy: Any) -> dict[str, Any]:
    return {} if _has_named_concurrency(strategy) else {"max_concurrency": CALLS_PER_WORKER}


def _has_named_concurrency(strategy: Any) -> bool:
    parameters = inspect.signature(strategy.__init__).parameters
    return "max_concurrent_calls_per_actor" in parameters and "enable_true_multi_threading" in parameters


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value


def _root_message(exc: BaseException) -> str:
    """The innermost cause's message, on one line (Ray's own messages span pages)."""
    root = list(causes(exc))[-1]
    lines = [line.strip() for line in str(root).splitlines() if line.strip()]
    return f"{type(root).__name__}: {lines[-1] if lines else ''}"[:400]
