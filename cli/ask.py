"""``pictrieve ask IMAGE "question"``: the Vision Search Assistant from the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from pictrieve.agents.vsa import METHOD as VSA
from pictrieve.cli.need_options import check_needs, method_need_options


@click.command("ask")
@click.argument("image", required=False, metavar="[IMAGE]")
@click.argument("question", required=False, metavar="QUESTION")
@click.option("--answerer", type=click.Choice(["auto", "extractive", "llm"]), default="auto", show_default=True,
              help="extractive: quote the best sentences of the pages read with their source numbers (no "
                   "generation); llm: the chat model writes the answer. auto: extractive with the offline 135M "
                   "model (it cannot write grounded answers), llm with any other.")
@click.option("--max-plan-turns", type=int, default=None,
              help="Planner turns of the chain of search (default 3; a rule plan has one).")
@click.option("--gallery", default=None, help="Visual RAG: with no IMAGE, find the photo in this gallery.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also show what each step found (region descriptions, pages read, their answers).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@method_need_options(VSA)
def ask(image: str | None, question: str, answerer: str, max_plan_turns: int | None, gallery: str | None,
        verbose: bool, as_json: bool, needs: dict[str, Any]) -> None:
    """Answer QUESTION about IMAGE from what the photo shows and what a search finds, with sources.

    With --gallery and no IMAGE, the photo that best matches QUESTION is found in the gallery first.

    Steps: regions (detector), descriptions, a chain of search (the planner asks sub-questions, a
    searcher per sub-question reads pages and may search again, the planner may ask follow-ups),
    then one answer citing numbered sources; citations of sources that were not read are removed.
    With the offline model (the default) the answer is extractive: sentences quoted from the pages.

    \b
    Examples (offline):
      pictrieve ask photo.jpg "how many teeth does this animal have?" --search local:examples/vsa-offline/pages -v
      pictrieve ask "which of my photos shows a dog, and what breed is it?" --gallery ./my.gallery
    """
    start = time.perf_counter()
    image, question = _image_and_question(image, question, gallery)
    if image is not None:
        from pictrieve.tools.core.images import load_image

        load_image(image)  # a bad photo is one line (ImageDecodeError), before any model loads
    # a dead or refusing endpoint, a misspelt name, a missing folder or extra: now, not after the photo is analysed
    check_needs(needs, methods=[VSA])
    # Importing the graph (LangGraph), opening a gallery and making the chat model take seconds: say so first.
    click.echo(f"[{time.perf_counter() - start:6.1f}s] loading the Vision Search Assistant ...", err=True)
    from pictrieve.agents.needs import resolve_needs
    from pictrieve.agents.vsa.progress import STREAM_MODES, follow_run, start_line, step_line
    from pictrieve.tools.core.model_cache import announcing_model_loads

    index = None
    if image is None:
        from pictrieve.vectorstore.gallery import Gallery

        index = Gallery.open(gallery, create=False)
    built = resolve_needs(VSA, needs, gallery=index)
    graph = VSA.build(index, **built)
    inputs: dict[str, Any] = {"question": question, **({"image": image} if image else {})}
    # with the offline 135M model the graph skips its optional LLM steps (plan, rewrites) by itself
    context: dict[str, Any] = {"answerer": answerer}
    if answerer == "llm":  # before any step runs: the small model's words would be the answer
        from pictrieve.agents.vsa.nodes import refuse_small_answerer

        refuse_small_answerer(built.get("llm"))
    if max_plan_turns is not None:
        context["max_plan_turns"] = max_plan_turns

    def show(node: str, change: dict[str, Any]) -> None:
        line = step_line(node, change, detail=verbose)
        if line:
            click.echo(f"[{time.perf_counter() - start:6.1f}s] {line}", err=True)

    def starting(node: str, given: dict[str, Any]) -> None:
        line = start_line(node, given)
        if line:
            click.echo(f"[{time.perf_counter() - start:6.1f}s] {line}", err=True)

    # Each slow step is one line on stderr as it starts and one as it finishes, -v or not: a run takes
    # tens of seconds on a CPU, and the first describes regions while models load.
    # ... and each model a step loads is a line too ("  loading the region describer ...").
    with announcing_model_loads(lambda label: click.echo(f"[{time.perf_counter() - start:6.1f}s]   loading {label} ...",
                                                         err=True)):
        state = follow_run(graph.stream(inputs, context=context, stream_mode=STREAM_MODES), show, starting)
    if as_json:
        out = {k: v for k, v in state.items() if k != "timings"} | {"timings": state.get("timings")}
        out["hits"] = [h.to_json() for h in out.get("hits") or []]
        click.echo(json.dumps(out, indent=2, default=str))
        return
    if image is None and state.get("image"):  # visual RAG: say which photo the answer is about
        click.echo(f"Photo: {state['image']}")
    click.echo(state.get("answer", ""))
    cited = set((state.get("citations") or {}).get("cited") or [])
    for heading, group in (("Sources:", [s for s in state.get("sources") or [] if s["number"] in cited]),
                           ("Also read (not cited):", [s for s in state.get("sources") or [] if s["number"] not in cited])):
        if group:
            click.echo(f"\n{heading}")
            for source in group:
                click.echo(f"  [{source['number']}] {source['title']} - {source['url']}")


def _image_and_question(first: str | None, second: str | None, gallery: str | None) -> tuple[str | None, str]:
    """``(image, question)`` from the one or two words given: ``IMAGE QUESTION``, or ``QUESTION`` alone with
    ``--gallery`` (the photo is then the gallery's best match for the question)."""
    if second is None:  # one argument: the question (click fills the first slot first)
        if first is None:
            raise click.UsageError("give a QUESTION: pictrieve ask [IMAGE] QUESTION")
        if not gallery:
            hint = " (IMAGE is given, the QUESTION is missing)" if Path(first).is_file() else ""
            raise click.UsageError(f"give an IMAGE before the question, or --gallery to find the photo in a "
                                   f"gallery{hint}")
        return None, first
    if not Path(first).is_file():
        raise click.BadParameter(f"{first!r} is no image file" + (
            "; to find the photo in the gallery give the question alone" if gallery else ""), param_hint="IMAGE")
    return first, second
