"""``--runtime`` and ``--quantize``: which runtime runs the image models (index, search, tile and the servers)."""

from __future__ import annotations

import os
from typing import Any, Callable

import click

from pictrieve.tools.models.onnx_runtime import QUANTIZATIONS, QUANTIZE_ENV, RUNTIME_ENV, RUNTIMES


def _into_environment(variable: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    """A click callback that stores the option's value in ``variable``: the models read it when they load,
    here and in the processes this one starts (``serve``'s LangGraph server, Ray workers)."""

    def store(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            os.environ[variable] = value

    return store


def runtime_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--runtime`` and ``--quantize`` (operator settings: they never reach the command's arguments)."""
    options = [
        click.option("--runtime", type=click.Choice(RUNTIMES), default=None, expose_value=False,
                     callback=_into_environment(RUNTIME_ENV),
                     help=f"Runtime of the image models: auto (the one measured faster here: ONNX Runtime on a CPU "
                     f"for the offline default), torch or onnx. Default: ${RUNTIME_ENV}, else auto."),
        click.option("--quantize", type=click.Choice(QUANTIZATIONS), default=None, expose_value=False,
                     callback=_into_environment(QUANTIZE_ENV),
                     help=f"int8: dynamically quantised image models on ONNX Runtime (see BENCHMARKS.md for what "
                     f"it costs in recall). Default: ${QUANTIZE_ENV}, else the model's measured default."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def runtime_settings() -> dict[str, str]:
    """The runtime variables set in this process (by the options above or by the operator), to hand on."""
    return {name: os.environ[name] for name in (RUNTIME_ENV, QUANTIZE_ENV) if os.environ.get(name)}
