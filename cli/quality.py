"""``pictrieve quality annotate | train | search``: quality-controlled search with QC2."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import click

from pictrieve.cli.process_exit import no_teardown_needed


class Heartbeat:
    """Progress lines that never stop for long: ``say(line)`` writes a step, and while no new step is said for
    :attr:`every` seconds (an import of transformers, a model load: 10-20 s on a busy machine) :meth:`tick` says the
    step goes on. :meth:`running` ticks from a thread; tests call :meth:`tick` with their own clock."""

    every = 3.0
    """Seconds without a line before the step is said again: 3, as a thread waiting on a busy machine's import (which
    holds the GIL) woke up to 1.2 s late (4 s gave silences of 5.2 s at load 11)."""

    def __init__(self, write: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.clock = write, clock
        self.step, self.said_at = "", clock()
        self.lock = threading.Lock()

    def say(self, line: str) -> None:
        with self.lock:
            self.write(line)
            self.step, self.said_at = line, self.clock()

    def tick(self) -> None:
        """Say the current step again, as going on, when nothing was said for :attr:`every` seconds."""
        with self.lock:
            if self.step and self.clock() - self.said_at >= self.every:
                self.write(f"... still {self.step.rstrip(' .')}")
                self.said_at = self.clock()

    @contextmanager
    def running(self) -> Iterator[Callable[[str], None]]:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(0.5):
                self.tick()

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield self.say
        finally:
            stop.set()
            thread.join()


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
    from pictrieve.tools.models.captioners import create_captioner
    from pictrieve.tools.models.quality_scorers import create_quality_scorer, default_quality_scorer_name
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
@click.option("--gallery", "-g", default=None, metavar="PATH|URL",
              help="Train on this gallery's annotated captions (the gallery you will search).")
@click.option("--captions-from", "captions_from", default=None, metavar="DIR",
              type=click.Path(exists=True, file_okay=False),
              help="Instead: train on a separate captioned folder (images + captions.jsonl), indexed and "
              "annotated into --work; the model then serves any gallery. Needs --out.")
@click.option("--split", default="train", show_default=True, metavar="NAME",
              help="With --captions-from: rows of captions.jsonl whose \"split\" is NAME ('all': every row).")
@click.option("--images", default=None, type=int, metavar="N",
              help="With --captions-from: a seeded sample of N photos of that split (default: all).")
@click.option("--heldout-split", default="dev", show_default=True, metavar="NAME",
              help="With --captions-from: rows kept out of training for the level-usage check ('none': no check).")
@click.option("--heldout-images", default=60, show_default=True, metavar="N",
              help="Photos of --heldout-split for the level-usage check.")
@click.option("--embedder", "-e", default=None, metavar="NAME",
              help="With --captions-from: embedder for relevance (default: offline).")
@click.option("--work", default=None, metavar="DIR",
              help="With --captions-from: galleries and checkpoints (default: OUT.work).")
@click.option("--scorer", "scorers", multiple=True, metavar="NAME",
              help="Quality score(s) to condition on (default: laion_aesthetic if annotated, else all annotated; "
              "with --captions-from, the one to annotate: brisque offline).")
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
@click.option("--seed", default=0, show_default=True, help="Seed for batches, dropout and photo sampling.")
@click.option("--out", default=None, metavar="DIR", help="Where to save (default: GALLERY/qc2).")
@click.option("--checkpoint-dir", default=None, metavar="DIR",
              help="Frozen-layer cache + training state, to resume an interrupted run by re-running the same "
              "command (default: OUT.checkpoint; with --captions-from, WORK/checkpoint).")
@click.option("--checkpoint-every", default=50, show_default=True, metavar="STEPS",
              help="Also save the training state every this many steps (always after each epoch).")
@click.option("--max-minutes", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Stop cleanly when the command has run this long (caching, checks and training all "
              "count), saving what is done; run the same command again to resume.")
@click.option("--probe-size", default=250, show_default=True, metavar="N",
              help="Captions in the level-usage check after each epoch (true vs opposite vs random levels); 0: off.")
@click.option("--threads", default=None, type=int, help="Torch CPU threads (default: torch's choice).")
@click.option("--json", "as_json", is_flag=True, help="Print the training report as JSON.")
def train(gallery: str | None, captions_from: str | None, split: str, images: int | None, heldout_split: str,
          heldout_images: int, embedder: str | None, work: str | None, scorers: tuple[str, ...],
          base_model: str | None, n_levels: str, epochs: int, batch_size: int, learning_rate: float,
          train_layers: int, lora_rank: int, random_levels: bool, seed: int, out: str | None,
          checkpoint_dir: str | None, checkpoint_every: int, max_minutes: float | None, probe_size: int,
          threads: int | None, as_json: bool) -> None:
    """Fine-tune the query-completion model on annotated captions (GALLERY's, or a separate folder's).

    Re-running the same command resumes from the checkpoint (the frozen-layer cache and the steps
    trained so far). --max-minutes counts everything the command does (with --captions-from indexing
    and annotating, then loading, caching the frozen layers, the checks, the steps) and stops at the
    first check past it, saving what is done. After every epoch it logs the level-usage check: the
    caption loss under the true, opposite and random levels (run with -v to see it; also in the saved
    model's qc2.json).
    """
    started = time.perf_counter()
    from pictrieve.agents.qc2.pipeline import default_model_dir, train_on_gallery
    from pictrieve.agents.qc2.training import QC2TrainConfig
    from pictrieve.tools.core.time_budget import TimeBudget

    if threads:
        import torch

        torch.set_num_threads(threads)
    if (gallery is None) == (captions_from is None):
        raise click.UsageError("give either --gallery GALLERY or --captions-from FOLDER (with --out DIR)")
    config = QC2TrainConfig(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                            train_layers=train_layers, lora_rank=lora_rank, seed=seed)
    budget = TimeBudget(max_minutes * 60 if max_minutes is not None else None, started=started)
    if captions_from is not None:
        from pictrieve.evaluation.quality import train_from_captions

        if out is None:
            raise click.UsageError("--captions-from needs --out DIR (where the trained model goes)")
        if len(scorers) > 1:
            raise click.UsageError("--captions-from annotates one quality scorer; give at most one --scorer")
        bundle, report, directory = train_from_captions(
            captions_from, out, work=work, embedder=embedder, scorer=scorers[0] if scorers else None,
            split=None if split == "all" else split, images=images,
            heldout_split=None if heldout_split == "none" else heldout_split, heldout_images=heldout_images,
            base_model=base_model, config=config, random_levels=random_levels, checkpoint_every=checkpoint_every,
            budget=budget, probe_size=probe_size, progress=not as_json,
        )
    else:
        from pictrieve.vectorstore.gallery import Gallery

        store = Gallery.open(gallery, create=False)
        target = Path(out) if out else default_model_dir(store)
        bundle, report, directory = train_on_gallery(
            store, quality_keys=list(scorers) or None, base_model=base_model, n_levels=int(n_levels),
            config=config, out=target, random_levels=random_levels,
            checkpoint_dir=checkpoint_dir or f"{target}.checkpoint", checkpoint_every=checkpoint_every,
            budget=budget, probe_size=probe_size, progress=not as_json,
        )
    if directory is None:
        message = (f"stopped after {time.perf_counter() - started:.0f} s, before the first training step (time "
                   "budget; what is done is kept: indexing, annotations, the frozen-layer cache): run the same "
                   "command again to resume")
        if as_json:
            click.echo(json.dumps({"model": None, "stopped_early": True, "training": report.to_dict()}, indent=2))
        else:
            click.echo(message)
        return
    if as_json:
        click.echo(json.dumps({"model": str(directory), "axes": [a.to_dict() for a in bundle.axes],
                               "training": bundle.training, "source": bundle.gallery}, indent=2))
        return
    state = ("stopped early (time budget; run again to resume)" if report.stopped_early else
             "done; the time budget cut the last level-usage check: run again to measure it"
             if report.level_check_pending else "done")
    click.echo(
        f"trained {bundle.base_model} on {report.examples} captions: {report.steps} steps "
        f"({state}) in {time.perf_counter() - started:.0f} s (frozen-layer cache {report.cache_seconds:.0f} s), "
        f"loss {report.first_loss:.3f} -> {report.final_loss:.3f}; saved to {directory}"
    )
    for axis in bundle.axes:
        cuts = ", ".join(f"{t:.4g}" for t in axis.thresholds)
        sign = "" if axis.higher_is_better else " (negated: lower raw score is better)"
        click.echo(f"  {axis.axis} ({axis.score_key}): {'/'.join(axis.levels)} cut at {cuts}{sign}")
    if report.probe_losses:
        click.echo(format_level_check(report.probe_losses))


def format_level_check(history: list[dict]) -> str:
    """The level-usage check per epoch: caption loss with true / opposite / random levels."""
    names = [k for k in history[-1] if k != "epoch"]
    lines = ["level-usage check (mean caption loss; lower with the true levels = the model uses them):",
             "| epoch | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for row in history:
        lines.append(f"| {row['epoch']} | " + " | ".join(f"{row[n]:.4f}" for n in names) + " |")
    return "\n".join(lines)


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
    started = time.perf_counter()

    def write(line: str) -> None:  # on stderr: loading the model and completing take seconds on a CPU
        click.echo(f"[{time.perf_counter() - started:6.1f}s] {line}", err=True)

    with Heartbeat(write).running() as say:  # a step silent for a few seconds (an import) is said to go on
        say("opening the gallery and loading the QC2 method ...")
        from pictrieve.graphs.qc2 import quality_search
        from pictrieve.tools.core.model_cache import announcing_model_loads
        from pictrieve.vectorstore.gallery import Gallery

        store = Gallery.open(gallery, create=False)
        requested = {name: level for name, level in
                     (("relevance", relevance), ("aesthetic", aesthetic), ("quality", quality_level)) if level}
        with announcing_model_loads(lambda label: say(f"loading {label} ...")):
            result = quality_search(store, query, requested, model_dir=model_dir, k=k, samples=samples, seed=seed,
                                    on_step=say)
        say("done")
    no_teardown_needed()  # read-only: once the results are out, the process ends (Python's teardown took 4-6 s)
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
