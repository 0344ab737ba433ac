"""The ``--engine ray`` options that ``pictrieve index`` and ``pictrieve tile`` share."""

from __future__ import annotations

from typing import Any, Callable

import click

ENGINES = ("local", "ray")
RAY_ONLY = ("ray_address", "ray_workers", "cpus_per_worker", "gpus_per_worker")


def engine_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--engine`` and the Ray options (they travel to the command as keyword arguments)."""
    options = [
        click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                     help="local: embed in this process. ray: a Ray Data pool of workers, on this machine or a "
                     "Ray cluster, writing to a --gallery http:// Chroma server (pip install \"pictrieve[scale]\")."),
        click.option("--ray-address", default=None, metavar="HOST:PORT",
                     help="Join the Ray cluster whose head is there (`ray start --head`; `auto`: one started on "
                     "this machine). Default: start a local Ray instance sized to this machine."),
        click.option("--ray-workers", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Workers in the pool, each loading the models once. Default: as many as the "
                     "cluster's GPUs (with --gpus-per-worker) or CPUs hold."),
        click.option("--cpus-per-worker", type=click.FloatRange(min=0, min_open=True), default=None, metavar="C",
                     help="CPUs Ray reserves per worker (torch threads in it). Default: 1, or on a local "
                     "instance with --ray-workers, the machine's cores split between the workers."),
        click.option("--gpus-per-worker", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="G",
                     help="GPUs per worker (0.5: two workers share one GPU); 0 embeds on CPU."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def ray_options(engine: str, batch_size: int, settings: dict[str, Any]) -> Any:
    """The job's :class:`RayOptions` for ``--engine ray`` (``None`` for local); a usage error when Ray
    options come without it."""
    given = [name for name in RAY_ONLY if settings.get(name) not in (None, 0, 0.0)]
    if engine != "ray":
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise click.UsageError(f"{flags} only apply with --engine ray")
        return None
    from pictrieve.vectorstore.distributed.cluster import RayOptions

    return RayOptions(address=settings.get("ray_address"), workers=settings.get("ray_workers"),
                      cpus_per_worker=settings.get("cpus_per_worker"),
                      gpus_per_worker=settings.get("gpus_per_worker") or 0.0, batch_size=batch_size)


def say(message: str) -> None:
    """Progress lines of a distributed job go to stderr, so ``--json`` output stays clean."""
    click.echo(message, err=True)
