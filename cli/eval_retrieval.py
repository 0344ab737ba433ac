"""``pictrieve eval retrieval``: Recall@K of text-to-image search on your own captioned photos."""

from __future__ import annotations

import json

import click


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder to evaluate (default: offline).")
@click.option("--gallery", "-g", default=None, metavar="PATH|URL",
              help="Keep the index here (re-runs skip indexing); default: a temporary gallery.")
@click.option("--batch-size", default=32, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def retrieval(folder: str, embedder: str | None, gallery: str | None, batch_size: int, as_json: bool) -> None:
    """Index DIR and run every caption in DIR/captions.jsonl as a query for its own image.

    Prints Recall@1/5/10 and the median rank of the right image. Ties are scored by the expected
    rank under random tie-breaking, so an embedder cannot gain from giving images equal scores.
    """
    from pictrieve.evaluation.caption_retrieval import evaluate_caption_retrieval

    metrics = evaluate_caption_retrieval(
        folder, embedder, gallery_location=gallery, batch_size=batch_size, progress=not as_json
    )
    if as_json:
        click.echo(json.dumps(metrics, indent=2))
        return
    click.echo(f"{metrics['embedder']}: {metrics['queries']} caption queries over {metrics['images']} images")
    click.echo(
        f"Recall@1 {metrics['recall@1']:.3f}  Recall@5 {metrics['recall@5']:.3f}  "
        f"Recall@10 {metrics['recall@10']:.3f}  median rank {metrics['median_rank']:.1f}"
    )
