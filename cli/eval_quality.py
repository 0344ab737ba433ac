"""``pictrieve eval quality``: does QC2 steer retrieved images toward the requested quality?"""

from __future__ import annotations

import json

import click


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@click.option("--queries", "queries_file", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="FILE", help="One short query per line (default: 'a <noun>' for frequent caption nouns).")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: offline).")
@click.option("--gallery", "-g", default=None, metavar="PATH",
              help="Keep the index, scores and trained models here (re-runs reuse them); default: temporary.")
@click.option("--scorer", default=None, metavar="NAME",
              help="Quality scorer: brisque (offline default) or laion_aesthetic (ViT-L/14 galleries).")
@click.option("--base-model", default=None, metavar="NAME|DIR", help="LM to fine-tune (default: SmolLM2-135M).")
@click.option("--method", "methods", multiple=True, type=click.Choice(["prefix", "pt", "ft_random", "qc2"]),
              help="Methods to run (default: all).")
@click.option("--samples", default=1, show_default=True, help="Completions per query and condition (averaged).")
@click.option("--epochs", default=2, show_default=True)
@click.option("--train-layers", default=6, show_default=True)
@click.option("--learning-rate", default=5e-4, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--train-captions", default=None, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Train QC2 and FT-random on this other captioned folder (its 'train' rows; e.g. flickr8k-train) "
              "instead of DIR's own captions, so the searched gallery is never trained on.")
@click.option("--train-images", default=None, type=int, metavar="N",
              help="With --train-captions: a seeded sample of N photos of its 'train' rows (default: all).")
@click.option("--qc2-model", default=None, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Use this trained QC2 model (e.g. from `pictrieve quality train --captions-from`) instead of "
              "training one.")
@click.option("--threads", default=None, type=int, help="Torch CPU threads.")
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
def quality_eval(folder: str, queries_file: str | None, embedder: str | None, gallery: str | None,
                 scorer: str | None, base_model: str | None, methods: tuple[str, ...], samples: int, epochs: int,
                 train_layers: int, learning_rate: float, seed: int, train_captions: str | None,
                 train_images: int | None, qc2_model: str | None, threads: int | None, as_json: bool) -> None:
    """Compare QC2 with Prefix, PT, FT-random and Rerank on DIR (images + captions.jsonl).

    For every query and every relevance x quality condition, reports the mean relevance and quality
    of the top-1 and top-5 retrieved images, and whether the requested level orders them.
    """
    from pictrieve.agents.qc2.training import QC2TrainConfig
    from pictrieve.evaluation.quality import METHODS, evaluate_quality_control, load_queries

    if threads:
        import torch

        torch.set_num_threads(threads)
    report = evaluate_quality_control(
        folder,
        queries=load_queries(queries_file) if queries_file else None,
        embedder=embedder,
        gallery_location=gallery,
        scorer=scorer,
        base_model=base_model,
        train_config=QC2TrainConfig(epochs=epochs, train_layers=train_layers, learning_rate=learning_rate, seed=seed),
        samples=samples,
        seed=seed,
        methods=methods or METHODS,
        progress=not as_json,
        qc2_model=qc2_model,
        train_captions=train_captions,
        train_images=train_images,
    )
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(format_report(report))


def format_report(report: dict) -> str:
    """Markdown tables: per method and condition, top-1/top-5 relevance and quality."""
    axis = report["scorer"]["axis"]
    note = "" if report["scorer"]["higher_is_better"] else " (lower is better)"
    lines = [
        f"{report['images']} images, {len(report['queries'])} queries, embedder {report['embedder']}, "
        f"quality = {report['scorer']['name']}{note}",
        "",
        f"| method | condition | rel@1 | {axis.lower()}@1 | rel@5 | {axis.lower()}@5 | subject@5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, by_condition in report["methods"].items():
        for condition, values in by_condition.items():
            t1, t5 = values["top1"], values["top5"]
            lines.append(f"| {method} | {condition} | {t1['relevance']:.4f} | {t1['quality']:.3f} | "
                         f"{t5['relevance']:.4f} | {t5['quality']:.3f} | {t5['subject']:.2f} |")
    lines += ["", "| rerank (best of top-k by quality) | relevance | quality | subject |", "|---|---|---|---|"]
    for k, values in report["rerank"].items():
        lines.append(f"| {k} | {values['relevance']:.4f} | {values['quality']:.3f} | {values['subject']:.2f} |")
    for method, info in report.get("training", {}).items():
        source = info.get("trained_on")
        if source:
            lines.append(f"- {method} was trained on {source.get('count')} photos of {source.get('location')}, "
                         f"not on the searched gallery")
    examples = report.get("examples", {})
    if any(m != "prefix" for m in examples):
        lines += ["", "| method | condition | first completions |", "|---|---|---|"]
        for method, by_condition in examples.items():
            if method == "prefix":
                continue
            for condition, texts in by_condition.items():
                lines.append(f"| {method} | {condition} | {' / '.join(texts)} |")
    lines += ["", "Requested level vs measured top-5 mean (Low -> High):"]
    for method, axes in report["monotonic"].items():
        for name, values in axes.items():
            means = " / ".join(f"{m:.4f}" for m in values["mean"])
            lines.append(f"- {method} {name}: {means}  {'monotonic' if values['increasing'] else 'NOT monotonic'}")
    return "\n".join(lines)
