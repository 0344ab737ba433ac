"""``pictrieve quality annotate | train | search``: quality-controlled search with QC2."""

from __future__ import annotations

import json
import time

import click

gallery_option = click.option(
    "--gallery", "-g", required=True, metavar="PATH|URL", help="The gallery (folder, or http://host:port)."
)
model_option = click.option(
    "--model", "model_dir", default=None, metavar="DIR",
    help="QC2 model folder (default: <gallery>/qc2; required for a gallery on a server).",
)


@click.group()
def quality() -> None:
    """Search that you steer toward a quality level (QC2).

    \b
    1. pictrieve quality annotate -g GALLERY     captions' relevance + image quality scores
    2. pictrieve quality train -g GALLERY        fine-tune a small LM on the gallery's captions
    3. pictrieve quality search "a dog" -g GALLERY --relevance high --quality low
    """


@quality.command()
@gallery_option
@click.option("--scorer", "scorers", multiple=True, metavar="NAME",
              help="Quality scorer(s): brisque (offline, technical quality) or laion_aesthetic "
              "(needs CLIP ViT-L/14). Default: laion_aesthetic for an open_clip:ViT-L-14/openai "
              "gallery, else brisque.")
@click.option("--captioner", default=None, metavar="NAME",
              help="Caption images that have no captions: 'offline' (what the offline embedder sees) "
              "or a BLIP model (hub id or folder, e.g. Salesforce/blip-image-captioning-base); "
              "default: use only existing captions.")
@click.option("--batch-size", default=16, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def annotate(gallery: str, scorers: tuple[str, ...], captioner: str | None, batch_size: int, as_json: bool) -> None:
    """Store caption relevance and quality scores as gallery metadata (resumes if interrupted)."""
    from pictrieve.agents.qc2.annotation import annotate_gallery
    from pictrieve.tools.captioners import create_captioner
    from pictrieve.tools.quality_scorers import create_quality_scorer, default_quality_scorer_name
    from pictrieve.vectorstore.gallery import Gallery

    store = Gallery.open(gallery, create=False)
    names = scorers or (default_quality_scorer_name(store.embedder_name),)
    built = [create_quality_scorer(name) for name in names]
    caption = create_captioner(captioner, embedder=store.embedder) if captioner else None
    reports = annotate_gallery(store, built, captioner=caption,
                               batch_size=batch_size, progress=not as_json)
    if as_json:
        click.echo(json.dumps([vars(r) for r in reports], indent=2))
        return
    for report in reports:
        click.echo(str(report))
    for scorer in built:
        click.echo(f"  {scorer.key}: {scorer.description}")


@quality.command()
@gallery_option
@click.option("--scorer", "scorers", multiple=True, metavar="NAME",
              help="Quality score(s) to condition on (default: laion_aesthetic if annotated, else all annotated).")
@click.option("--base-model", default=None, metavar="NAME|DIR",
              help="Causal LM to fine-tune: smollm2-135m-instruct (default, offline), gpt2, "
              "Qwen/Qwen2.5-0.5B or a local checkpoint folder.")
@click.option("--levels", "n_levels", type=click.Choice(["3", "5"]), default="3", show_default=True,
              help="Low/Medium/High, or Very Low ... Very High.")
@click.option("--epochs", default=2, show_default=True)
@click.option("--batch-size", default=32, show_default=True)
@click.option("--learning-rate", default=5e-4, show_default=True)
@click.option("--train-layers", default=6, show_default=True,
              help="Top decoder layers that learn (LoRA); the rest are frozen and cached.")
@click.option("--lora-rank", default=16, show_default=True, help="0: fine-tune those layers fully.")
@click.option("--random-levels", is_flag=True, help="Baseline: train with random levels (the paper's FT).")
@click.option("--out", default=None, metavar="DIR", help="Where to save (default: GALLERY/qc2).")
@click.option("--threads", default=None, type=int, help="Torch CPU threads (default: torch's choice).")
def train(gallery: str, scorers: tuple[str, ...], base_model: str | None, n_levels: str, epochs: int,
          batch_size: int, learning_rate: float, train_layers: int, lora_rank: int, random_levels: bool,
          out: str | None, threads: int | None) -> None:
    """Fine-tune the query-completion model on GALLERY's annotated captions."""
    from pictrieve.agents.qc2.pipeline import train_on_gallery
    from pictrieve.agents.qc2.training import QC2TrainConfig
    from pictrieve.vectorstore.gallery import Gallery

    if threads:
        import torch

        torch.set_num_threads(threads)
    store = Gallery.open(gallery, create=False)
    config = QC2TrainConfig(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                            train_layers=train_layers, lora_rank=lora_rank)
    started = time.perf_counter()
    bundle, report, directory = train_on_gallery(
        store, quality_keys=list(scorers) or None, base_model=base_model, n_levels=int(n_levels),
        config=config, out=out, random_levels=random_levels,
    )
    click.echo(
        f"trained {bundle.base_model} on {report.examples} captions: {report.steps} steps in "
        f"{time.perf_counter() - started:.0f} s (frozen-layer cache {report.cache_seconds:.0f} s), "
        f"loss {report.first_loss:.3f} -> {report.final_loss:.3f}; saved to {directory}"
    )
    for axis in bundle.axes:
        cuts = ", ".join(f"{t:.4g}" for t in axis.thresholds)
        sign = "" if axis.higher_is_better else " (negated: lower raw score is better)"
        click.echo(f"  {axis.axis} ({axis.score_key}): {'/'.join(axis.levels)} cut at {cuts}{sign}")


@quality.command()
@gallery_option
@click.argument("query")
@click.option("--relevance", default=None, metavar="LEVEL", help="low, medium, high (or vl/l/m/h/vh).")
@click.option("--aesthetic", default=None, metavar="LEVEL", help="Level of the LAION aesthetic axis.")
@click.option("--quality", "quality_level", default=None, metavar="LEVEL", help="Level of the BRISQUE quality axis.")
@click.option("-k", default=10, show_default=True, help="Results to show.")
@click.option("--samples", default=1, show_default=True, help="Completions to sample; several are fused by RRF.")
@click.option("--seed", default=None, type=int, help="Seed for reproducible sampling.")
@model_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def search(gallery: str, query: str, relevance: str | None, aesthetic: str | None, quality_level: str | None,
           k: int, samples: int, seed: int | None, model_dir: str | None, as_json: bool) -> None:
    """Complete QUERY toward the requested levels, show the completed query, and search with it."""
    from pictrieve.graphs.quality_retrieval import quality_search
    from pictrieve.vectorstore.gallery import Gallery

    store = Gallery.open(gallery, create=False)
    requested = {name: level for name, level in
                 (("relevance", relevance), ("aesthetic", aesthetic), ("quality", quality_level)) if level}
    result = quality_search(store, query, requested, model_dir=model_dir, k=k, samples=samples, seed=seed)
    if as_json:
        click.echo(json.dumps({
            "query": query, "levels": result.levels, "completions": result.completions,
            "hits": [{"rank": h.rank, "score": h.score, "path": h.path, "id": h.id} for h in result.hits],
        }, indent=2))
        return
    levels = ", ".join(f"{axis} {level}" for axis, level in result.levels.items())
    click.echo(f"{levels}")
    for text in result.completions:
        click.echo(f"searched for: {text}")
    click.echo("rank  score  path" + ("   (score: reciprocal rank fusion of the completions)" if samples > 1 else
                                      "   (score: cosine similarity)"))
    for hit in result.hits:
        click.echo(f"{hit.rank:3d}  {hit.score:.4f}  {hit.path}")
