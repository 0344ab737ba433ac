"""``pictrieve eval interactive``: the PlugIR ablation with a simulated user (BRI, Hits@10)."""

from __future__ import annotations

import json

import click

from pictrieve.agents.plugir import METHOD as PLUGIR
from pictrieve.cli.need_options import method_need_options


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@click.option("--targets", default=10, show_default=True, help="Number of target photos.")
@click.option("--rounds", default=5, show_default=True, help="Question budget T.")
@click.option("--arms", default="zs,cr,cr+rce,cr+rce+f", show_default=True,
              help="Comma-separated arms: zs, cr, cr+rce, cr+rce+f (the paper's, with the LLM) and offline "
              "(questions from the candidates' captions, no LLM).")
@click.option("--user", type=click.Choice(["captions", "free", "llm"]), default="captions", show_default=True,
              help="Simulated user: 'captions' answers yes, no or an option from the target's other captions, "
              "no LLM; 'free' also says in words what one of those captions says, as people do; "
              "'llm' has --llm read them.")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: offline).")
@click.option("--gallery", "-g", default=None, metavar="PATH",
              help="Where to keep the index (default: a cache folder; re-runs skip indexing).")
@click.option("--top-n", default=None, type=int, help="Retrieval candidates (default: 1% of the gallery, >= 20).")
@click.option("--questions", default=5, show_default=True, help="Questions generated per round (q_n).")
@click.option("--filter-attempts", default=3, show_default=True,
              help="Question regenerations when the filter rejects every question.")
@click.option("--reformulation-tokens", default=512, show_default=True,
              help="Token cap for context reformulation (paper: 512; a caption needs ~60).")
@click.option("--uncaptioned", is_flag=True,
              help="Search DIR as if its photos had no captions (as a user's own photos): candidates are "
              "described by --captioner; the simulated user still answers from the human captions.")
@click.option("--set", "extra", multiple=True, metavar="NAME=VALUE",
              help="Any other PlugIR run setting, e.g. --set deny_weight=0.05 --set question_temperature=0.02 "
              "(numbers are read as numbers).")
@click.option("--seed", default=0, show_default=True)
@click.option("--plot", default=None, type=click.Path(dir_okay=False), help="Write the per-round plot (PNG).")
@click.option("--dialogues", default=None, type=click.Path(dir_okay=False),
              help="Write every dialogue, query and rank as JSON.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@method_need_options(PLUGIR, collect=False)
def interactive(folder: str, targets: int, rounds: int, arms: str, user: str, llm: str, base_url: str | None,
                embedder: str | None, gallery: str | None, top_n: int | None, questions: int,
                filter_attempts: int, reformulation_tokens: int, uncaptioned: bool, captioner: str,
                extra: tuple[str, ...], seed: int, plot: str | None, dialogues: str | None, as_json: bool) -> None:
    """Simulate users searching DIR (images + captions.jsonl) and compare the PlugIR arms.

    One caption of each target is the first description; a simulated user answers the questions
    from the other captions. Prints, per arm, BRI (lower is better), Hits@10 and Recall@10 per
    round, and seconds per round by graph node.
    """
    from pictrieve.evaluation.interactive import evaluate_interactive, plot_interactive

    chosen = [a.strip() for a in arms.split(",") if a.strip()]
    settings = {"questions_per_round": questions, "filter_attempts": filter_attempts,
                "reformulation_max_tokens": reformulation_tokens}
    if top_n:
        settings["top_n"] = top_n
    settings.update(_parse_settings(extra))
    results = evaluate_interactive(folder, targets=targets, rounds=rounds, arms=chosen, llm=llm,
                                   base_url=base_url, embedder=embedder, gallery_location=gallery,
                                   user=user, seed=seed, settings=settings, uncaptioned=uncaptioned,
                                   captioner=captioner if uncaptioned else None, progress=not as_json)
    if plot:
        plot_interactive(results, plot)
    if dialogues:
        with open(dialogues, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    if as_json:
        click.echo(json.dumps({"config": results["config"], "arms": results["arms"]}, indent=2))
        return
    cfg = results["config"]
    click.echo(f"{cfg['targets']} targets, {cfg['rounds']} rounds, {cfg['images']} images, "
               f"embedder {cfg['embedder']}, LLM {cfg['llm'] or 'none'}, simulated user {cfg['user']}"
               + (f", photos uncaptioned (described by {cfg['captioner']})" if cfg.get("uncaptioned") else ""))
    click.echo(f"{'arm':<10} {'BRI':>7} {'Hits@10 r0->rT':>16} {'Recall@10 r0->rT':>18} {'s/round':>8}  by node")
    for arm, m in results["arms"].items():
        hits, recall = m["hits@10"], m["recall@10"]
        nodes = " ".join(f"{n}={s:.1f}" for n, s in m["node_seconds_per_round"].items() if s > 0)
        click.echo(f"{arm:<10} {m['bri']:>7.3f} {hits[0]:>7.2f}->{hits[-1]:<7.2f} "
                   f"{recall[0]:>8.2f}->{recall[-1]:<8.2f} {m['seconds_per_round']:>8.1f}  {nodes} "
                   f"user={m['user_seconds_per_round']:.1f}")


def _parse_settings(pairs: tuple[str, ...]) -> dict[str, object]:
    """``("a=1", "b=x")`` -> ``{"a": 1, "b": "x"}`` (numbers as numbers)."""
    from dataclasses import fields

    from pictrieve.agents.plugir.settings import PlugIRSettings

    known = {f.name for f in fields(PlugIRSettings)}
    parsed: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--set")
        if name.strip() not in known:
            raise click.BadParameter(f"unknown PlugIR setting {name.strip()!r}; choose from {', '.join(sorted(known))}",
                                     param_hint="--set")
        try:
            parsed[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            parsed[name.strip()] = value
    return parsed
