"""Vision Search Assistant: answer a question about a photo from what is in it and what the web says.

Specification: the Vision Search Assistant paper and section 3 of the implementation notes
(``/work/shared/papers``). The graph::

    START -> retrieve -> regions -> describe -> plan -(Send per new sub-question)-> search -> plan ...
                                                    plan -(done or out of turns)-> summarize -> answer -> END

- ``retrieve`` (visual RAG): when the input has no ``image`` but the graph has a gallery, the
  question retrieves the best-matching photo from it (its hits are returned too).
- ``regions``: a Detector (offline SSD-MobileNet COCO by default) prompted with the question's
  words plus the COCO classes; no detection -> the whole image is one region.
- ``describe``: each crop described by a Captioner in the light of the question (a VLM via any
  OpenAI-compatible endpoint, or offline the offline embedder's description); with 2+ regions each
  description is rewritten with the others as context.
- ``plan`` (the chain of search): turn 1 proposes structured sub-questions (never executed code;
  see :mod:`pictrieve.agents.vsa.steps`); after each round of searches the planner sees what was
  found and either asks new sub-questions (children of what is known) or says it is done, for at
  most ``max_plan_turns`` turns. The rule plan (for models that cannot plan) has one turn.
- ``search`` (parallel via ``Send``): search, open up to ``pages_per_search`` new pages (through
  the fetch guard for web URLs), answer the sub-question from fenced page text with citations; the
  searcher may ask for a follow-up search, up to ``max_search_turns`` searches per sub-question.
- ``summarize``: sources numbered globally, one summary per region.
- ``answer``: one answer citing sources by number; says so when the search found nothing. A search
  that could not run is not one that found nothing: when every search failed (no network, a dead
  backend) or every page fetch did, the run stops with one
  :class:`~pictrieve.tools.web_search.SearchUnavailableError` line instead of answering. Every
  answer's citations are checked against the sources read: a number that is not one is removed and
  reported in ``citations["dropped"]``.

Two answerers (setting ``answerer``): ``llm`` (the searcher and answer steps are the chat model, as
in the paper) and ``extractive`` (:mod:`pictrieve.agents.vsa.extractive`: the best sentences of the
pages read, quoted with their source numbers, chosen by MiniLM similarity to the question and the
photo's labels; no generation). ``auto`` (default) is extractive when the chat model is the offline
135M model, which cannot write a grounded answer, and llm otherwise.

Where we differ from the authors' code: the planner emits JSON (pydantic), not Python run with
``exec``; fewer turns by default (planner 3 instead of 10, searcher 2 instead of 3) so that an
offline run fits in two minutes on a CPU; offline descriptions come from a classifier-based
describer, not LLaVA; the extractive answerer is ours.
"""

from __future__ import annotations

import logging
import operator
import re
import time
from dataclasses import dataclass
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import NotRequired, TypedDict

from pictrieve.agents.vsa import extractive, steps
from pictrieve.agents.vsa.steps import question_terms
from pictrieve.graphs.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.tools.images import load_image
from pictrieve.vectorstore.hits import ImageHit

logger = logging.getLogger(__name__)

@dataclass
class VisionSearchSettings(RunSettings):
    """Run settings of :func:`build_vision_search_graph` (defaults after the authors' code, scaled down)."""

    max_regions: int = 3
    """Regions described at most (best detections first)."""
    min_score: float = 0.4
    """Detector box threshold (the authors' Grounding DINO box threshold)."""
    max_sub_questions: int = 3
    """Sub-questions the planner may ask (the authors allow up to 10 planning turns)."""
    search_k: int = 6
    """Results per search (the authors: DuckDuckGo top 6)."""
    pages_per_search: int = 2
    """Pages opened per sub-question (the authors: up to 4)."""
    page_chars: int = 8192
    """Characters kept per page (the authors: 8,192)."""
    answer_context_chars: int = 3500
    """Characters of findings given to the answer step (the authors: 3,500)."""
    correlate: bool | None = None
    """Rewrite each region's description with the others as context (2+ regions). None (default):
    yes, except with the offline 135M model, whose rewrites are worse than what they replace."""
    summarize_regions: bool | None = None
    """One summary of the findings per region before answering (llm answerer). None: yes, except
    with the offline 135M model."""
    plan_with_llm: bool | None = None
    """Ask the LLM for the plan; False uses the rule plan (the question's parts with the photo's
    labels, and the question per region label). None: the LLM, except the offline 135M model,
    which rarely writes a usable JSON plan and spends a minute trying."""
    candidate_k: int = 3
    """Visual RAG: gallery photos retrieved for a question without an image."""
    max_plan_turns: int = 3
    """Planner turns of the chain of search (the authors: 10); each turn may add sub-questions."""
    max_search_turns: int = 2
    """Searches per sub-question: the searcher may ask for a follow-up search (the authors: 3 turns)."""
    answerer: str = "auto"
    """``llm``, ``extractive`` (quoted sentences of the pages read, no generation) or ``auto``:
    extractive when the chat model is the offline 135M model, llm otherwise."""
    evidence_sentences: int = 2
    """Extractive answerer: sentences quoted at most per part of the question."""

    def validate(self) -> None:
        for name in ("max_regions", "max_sub_questions", "search_k", "pages_per_search", "page_chars",
                     "answer_context_chars", "candidate_k", "max_plan_turns", "max_search_turns",
                     "evidence_sentences"):
            require_positive(self, name)
        if self.answerer not in ("auto", "llm", "extractive"):
            raise SettingsError(f"answerer must be auto, llm or extractive, not {self.answerer!r}")


class VisionSearchInput(TypedDict):
    question: str
    image: NotRequired[str]


class VisionSearchOutput(TypedDict, total=False):
    answer: str
    sources: list[dict[str, Any]]
    regions: list[dict[str, Any]]
    sub_questions: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    region_summaries: list[str]
    hits: list[ImageHit]
    image: str
    plan_mode: str
    plan_turns: int
    answerer: str
    citations: dict[str, Any]
    timings: dict[str, float]


def _merge(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0.0) + value
    return out


class VisionSearchState(VisionSearchInput, total=False):
    answer: str
    sources: list[dict[str, Any]]
    regions: list[dict[str, Any]]
    sub_questions: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    searched: Annotated[list[dict[str, Any]], operator.add]
    """Raw findings of the parallel searchers (source numbers local to each); summarize renumbers."""
    region_summaries: list[str]
    hits: list[ImageHit]
    plan_mode: str
    plan_turns: int
    answerer: str
    citations: dict[str, Any]
    timings: Annotated[dict[str, float], _merge]


class SearchTask(TypedDict):
    sub_question: dict[str, Any]
    order: int
    known: NotRequired[str]
    """What earlier turns found (Q&A), for a follow-up sub-question's searcher."""
    photo: NotRequired[str]
    """The photo's region labels (the extractive searcher scores sentences against them too)."""


EVIDENCE_PER_SEARCH = 6
"""Extractive answerer: relevant sentences each searcher passes on to the answer step."""

_CITE = re.compile(r"\s?\[\d+\]")


def is_offline_small_model(chat: Any) -> bool:
    """True for the offline SmolLM2-135M chat model object (too small to write grounded answers), also
    inside LangChain wrappers (:func:`pictrieve.tools.chat_models.is_offline_chat_model`)."""
    from pictrieve.tools.chat_models import is_offline_chat_model

    return chat is not None and not isinstance(chat, str) and is_offline_chat_model(chat)


def check_search_reached(findings: list[dict[str, Any]], backend: Any) -> None:
    """Raise :class:`~pictrieve.tools.web_search.SearchUnavailableError` when every search so far failed
    (no network, a dead backend), or every page fetch did.

    A failed search is not a search that found nothing: answering "the search found nothing" would
    hide the failure. Some failures among successes stay in each finding's ``error``.
    """
    from pictrieve.tools.web_search import OFFLINE_SEARCH_HINT, SearchUnavailableError

    logs = [f["log"] for f in findings if f.get("log")]
    searches = sum(log["searches"] for log in logs)
    search_errors = [e for log in logs for e in log["search_errors"]]
    name = getattr(backend, "name", "the search backend")
    if searches and len(search_errors) == searches:
        raise SearchUnavailableError(f"every search failed ({searches} with {name}), e.g. {search_errors[0]}",
                                     fix=f"check the internet connection, or {OFFLINE_SEARCH_HINT}")
    fetches = sum(log["fetches"] for log in logs)
    fetch_errors = [e for log in logs for e in log["fetch_errors"]]
    if fetches and len(fetch_errors) == fetches:
        raise SearchUnavailableError(f"none of the {fetches} pages the search found could be opened, e.g. "
                                     f"{fetch_errors[0]}", fix=f"check the internet connection, or {OFFLINE_SEARCH_HINT}")


def _renumber(text: str, mapping: dict[int, int]) -> str:
    return re.sub(r"\[(\d+)\]", lambda m: f"[{mapping[int(m.group(1))]}]" if int(m.group(1)) in mapping else "", text)


def build_vision_search_graph(
    index: Any = None,
    *,
    llm: Any = None,
    checkpointer: Any = None,
    name: str = "vsa",
    vlm: Any = None,
    detector: Any = None,
    search: Any = None,
    fetch_allow_hosts: tuple[str, ...] = (),
) -> CompiledStateGraph:
    """Compile the Vision Search Assistant graph.

    ``index``: a Gallery for visual RAG (questions without an image), or None for photo QA.
    ``llm``: a chat model or a name for :func:`~pictrieve.tools.chat_models.create_chat_model`
    (default offline). ``vlm``: a Captioner or name (default ``offline``). ``detector``: a Detector
    or registry name (default ``ssd``). ``search``: ``ddgs``, ``local:DIR``, a SearchBackend or a
    LangChain retriever/tool; None searches nothing (the answer then says so).
    ``fetch_allow_hosts`` exempts hosts from the fetch guard (tests with a loopback server only).
    """
    from pictrieve.tools.chat_models import create_chat_model
    from pictrieve.tools.detectors import COCO_CLASSES, create_detector, regions_or_whole
    from pictrieve.tools.vlm import create_region_captioner
    from pictrieve.tools.web_search import as_search_backend, check_search_name

    if isinstance(search, str):
        check_search_name(search)  # now, not after the detector and the describer have loaded
    chat = create_chat_model(llm) if llm is None or isinstance(llm, str) else llm
    parts: dict[str, Any] = {}

    def part(key: str, make: Any) -> Any:
        if key not in parts:
            parts[key] = make()
        return parts[key]

    def get_detector() -> Any:
        return part("detector", lambda: create_detector(detector or "ssd"))

    def get_vlm() -> Any:
        return part("vlm", lambda: create_region_captioner(vlm or "offline"))

    def get_search() -> Any:
        return part("search", lambda: None if search is None else as_search_backend(search))

    def sentence_encoder() -> Any:
        from pictrieve.tools.local_pages import shared_encoder

        return shared_encoder()

    def timed(label: str, start: float) -> dict[str, float]:
        return {label: round(time.perf_counter() - start, 3)}

    def retrieve(state: VisionSearchState, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        if not (state.get("question") or "").strip():
            raise SettingsError("the vsa graph needs a 'question' in its input")
        if state.get("image"):
            load_image(state["image"])  # the graph's input is checked here, before any model runs
            return {"hits": []}  # every method's output carries hits: none were searched for
        if index is None:
            raise SettingsError("the vsa graph needs an 'image' path (or a gallery to retrieve one from)")
        start = time.perf_counter()
        hits = index.search_text(state["question"], k=settings.candidate_k)
        if not hits:
            raise SettingsError("the gallery is empty: index photos before asking about them")
        return {"hits": hits, "image": hits[0].path, "timings": timed("retrieve", start)}

    def regions(state: VisionSearchState, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        start = time.perf_counter()
        image = load_image(state["image"])
        labels = question_terms(state["question"]) + COCO_CLASSES
        found = get_detector().detect(image, labels=labels, min_score=settings.min_score)
        chosen = regions_or_whole(image, found, max_regions=settings.max_regions)
        out = [{"label": d.label, "score": round(float(d.score), 3), "box": [round(float(v), 1) for v in d.box]}
               for d in chosen]
        return {"regions": out, "timings": timed("regions", start)}

    def describe(state: VisionSearchState, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        start = time.perf_counter()
        image = load_image(state["image"])
        crops = [image.crop(tuple(int(round(v)) for v in r["box"])) for r in state["regions"]]
        prompts = [f"Describe the {r['label']} in this picture. The user asks: {state['question']}" for r in state["regions"]]
        captioner = get_vlm()
        texts = [captioner.caption([crop], prompt=p)[0] for crop, p in zip(crops, prompts)]
        described = [{**r, "description": t} for r, t in zip(state["regions"], texts)]
        timings = timed("describe", start)
        if llm_step(settings.correlate) and len(described) > 1:
            start = time.perf_counter()
            rewritten = steps.correlate(chat, state["question"], described)
            described = [{**r, "description": t} for r, t in zip(described, rewritten)]
            timings = _merge(timings, timed("correlate", start))
        return {"regions": described, "timings": timings}

    def llm_step(flag: bool | None) -> bool:
        """An optional LLM step runs when asked to, or by default with any model but the offline 135M one."""
        return (not is_offline_small_model(chat)) if flag is None else flag

    def use_extractive(settings: VisionSearchSettings) -> bool:
        if settings.answerer != "auto":
            return settings.answerer == "extractive"
        return is_offline_small_model(chat)

    def plan(state: VisionSearchState, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        start = time.perf_counter()
        turn = int(state.get("plan_turns") or 0) + 1
        asked = list(state.get("sub_questions") or [])
        if get_search() is None:
            return {"sub_questions": [], "plan_mode": "no search", "plan_turns": turn, "timings": timed("plan", start)}
        check_search_reached(state.get("searched") or [], get_search())  # after a round of searches
        if turn == 1:
            if llm_step(settings.plan_with_llm):
                made, how = steps.plan(chat, state["question"], state["regions"], limit=settings.max_sub_questions)
            else:
                made, how = steps.fallback_plan(state["question"], state["regions"], settings.max_sub_questions), "rules"
            new = made.sub_questions
        elif turn > settings.max_plan_turns or state.get("plan_mode") in ("rules", "fallback"):
            return {}  # out of turns, or a rule plan (it has nothing to add): no update, on to summarize
        else:
            known = [{"question": f["question"], "answer": _CITE.sub("", f["answer"])}
                     for f in sorted(state.get("searched") or [], key=lambda f: f["order"])]
            made, how = steps.replan(chat, state["question"], state["regions"], known,
                                     asked=[s["question"] for s in asked], limit=settings.max_sub_questions)
            new = made.sub_questions
            if made.done and not new:  # the planner is done (the unchanged list keeps progress lines sensible)
                return {"sub_questions": asked, "timings": timed("plan", start)}
            how = state.get("plan_mode") or how
        added = [{**s.model_dump(), "turn": turn, "order": len(asked) + i} for i, s in enumerate(new)]
        return {"sub_questions": asked + added, "plan_mode": how, "plan_turns": turn, "timings": timed("plan", start)}

    def dispatch(state: VisionSearchState) -> list[Send] | str:
        turn = state.get("plan_turns") or 0
        fresh = [s for s in state.get("sub_questions") or [] if s.get("turn") == turn]
        searched = {f["order"] for f in state.get("searched") or []}
        fresh = [s for s in fresh if s["order"] not in searched]
        if not fresh:
            return "summarize"
        known = "\n".join(f"Q: {f['question']}\nA: {_CITE.sub('', f['answer'])}"
                          for f in sorted(state.get("searched") or [], key=lambda f: f["order"]))
        context = extractive.photo_context(state.get("regions") or [])
        return [Send("search", {"sub_question": s, "order": s["order"], "known": known, "photo": context})
                for s in fresh]

    def read_pages(query: str, settings: VisionSearchSettings, pages: list[dict[str, Any]],
                   log: dict[str, Any]) -> None:
        """Search ``query`` and append up to ``pages_per_search`` unread pages to ``pages``; ``log``
        counts the searches and page fetches and keeps what failed (see :func:`check_search_reached`)."""
        from pictrieve.errors import PictrieveError
        from pictrieve.tools.web_fetch import FetchError, fetch_page

        log["searches"] += 1
        try:
            results = get_search().search(query, k=settings.search_k)
        except PictrieveError as exc:
            log["search_errors"].append(exc.problem or str(exc))
            return
        read = {p["url"] for p in pages}
        added = 0
        for result in results:
            if added >= settings.pages_per_search:
                break
            if result.url in read:
                continue
            text, title = result.text, result.title
            if not text and result.url.startswith(("http://", "https://")):
                try:
                    log["fetches"] += 1
                    page = fetch_page(result.url, max_chars=settings.page_chars, allow_hosts=fetch_allow_hosts)
                    text, title = page.text, title or page.title
                except PictrieveError as exc:  # refused by the guard, or failed: the snippet stands in
                    logger.info("skipping %s: %s", result.url, exc)
                    if isinstance(exc, FetchError):
                        log["fetch_errors"].append(str(exc))
                    else:
                        log["fetches"] -= 1  # a refusal is the guard working, not a failed fetch
                    text = result.snippet
            if text:
                pages.append({"number": len(pages) + 1, "url": result.url, "title": title or result.url,
                              "text": text[: settings.page_chars]})
                read.add(result.url)
                added += 1

    def search_node(task: SearchTask, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        start = time.perf_counter()
        sub = task["sub_question"]
        pages: list[dict[str, Any]] = []
        log: dict[str, Any] = {"searches": 0, "search_errors": [], "fetches": 0, "fetch_errors": []}
        queries: list[str] = []
        evidence: list[dict[str, Any]] = []
        query: str | None = sub["question"]
        answer_text = "The search found nothing."
        for turn in range(settings.max_search_turns):
            if query is None or query in queries:
                break
            queries.append(query)
            read_pages(query, settings, pages, log)
            may_search_again = turn + 1 < settings.max_search_turns
            if use_extractive(settings):
                scored = extractive.score_sentences(
                    sub["question"], [(s, p["number"], p["title"]) for p in pages for s in extractive.split_sentences(p["text"])],
                    context=task.get("photo", ""), encode=sentence_encoder().encode)
                chosen = extractive.choose(scored, max_sentences=settings.evidence_sentences)
                titles = {p["number"]: p["title"] for p in pages}
                # candidates for the final answer, which re-ranks them against each part of the question
                evidence = [{**e.to_dict(), "title": titles[e.source]}
                            for e in scored if e.relevance >= extractive.MIN_SCORE][:EVIDENCE_PER_SEARCH]
                answer_text = extractive.cite(chosen) or "The search found nothing."
                # no sentence is close enough: search once more with the question's words and the labels
                query = (f"{task.get('photo', '')} {' '.join(question_terms(sub['question']))}".strip()
                         if not chosen and may_search_again else None)
            else:
                answer_text, query = steps.answer_sub_question(
                    chat, sub["question"], pages, page_chars=settings.page_chars, known=task.get("known", ""),
                    may_search_again=may_search_again)
        answer_text = answer_text.strip() or "The search found nothing."  # e.g. only a repeated follow-up query
        if not pages and log["search_errors"]:  # it did not find nothing: it could not search
            answer_text = f"The search failed ({log['search_errors'][0]})."
        finding = {"order": task["order"], "question": sub["question"], "region": sub.get("region", 1),
                   "turn": sub.get("turn", 1), "queries": queries, "answer": answer_text, "evidence": evidence,
                   "sources": [{"url": p["url"], "title": p["title"]} for p in pages],
                   "error": "; ".join(log["search_errors"] + log["fetch_errors"]), "log": log}
        return {"searched": [finding], "timings": timed("search", start)}

    def summarize(state: VisionSearchState, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        start = time.perf_counter()
        sources: list[dict[str, Any]] = []
        numbers: dict[str, int] = {}
        findings = []
        for finding in sorted(state.get("searched") or [], key=lambda f: f["order"]):
            mapping = {}
            for local, src in enumerate(finding["sources"], 1):
                if src["url"] not in numbers:
                    numbers[src["url"]] = len(sources) + 1
                    sources.append({"number": len(sources) + 1, **src})
                mapping[local] = numbers[src["url"]]
            findings.append({**finding, "answer": _renumber(finding["answer"], mapping),
                             "evidence": [{**e, "source": mapping[e["source"]]} for e in finding.get("evidence") or []],
                             "source_numbers": sorted(set(mapping.values()))})
        summaries: list[str] = []
        if llm_step(settings.summarize_regions) and not use_extractive(settings) and len(state["regions"]) > 1 and findings:
            for i, region in enumerate(state["regions"], 1):
                mine = [f for f in findings if f["region"] == i]
                if mine:
                    text = "\n".join(f"Q: {f['question']}\nA: {f['answer']}" for f in mine)
                    summaries.append(f"Region {i} ({region['label']}): "
                                     + steps.summarize_region(chat, i, region["description"], text))
        return {"findings": findings, "sources": sources, "region_summaries": summaries,
                "timings": timed("summarize", start)}

    def extractive_answer(state: VisionSearchState, settings: VisionSearchSettings) -> str:
        """The best quoted sentences for each part of the question, among the searchers' evidence."""
        pool: dict[tuple[str, int], str] = {}
        for finding in state.get("findings") or []:
            for item in finding.get("evidence") or []:
                pool.setdefault((item["sentence"], item["source"]), item.get("title", ""))
        candidates = [(sentence, source, title) for (sentence, source), title in pool.items()]
        context = extractive.photo_context(state["regions"])
        chosen: list[extractive.Evidence] = []
        for part in steps.question_parts(state["question"], with_subject=False):
            scored = extractive.score_sentences(part, candidates, context=context, encode=sentence_encoder().encode)
            picked = extractive.choose(scored, max_sentences=settings.evidence_sentences)
            if picked and picked[0].sentence in {c.sentence for c in chosen}:
                continue  # the best sentence for this part was already quoted for an earlier part
            chosen.extend(item for item in picked if item.sentence not in {c.sentence for c in chosen})
        return extractive.compose_answer(state["question"], state["regions"], chosen)

    def answer(state: VisionSearchState, runtime: Runtime[VisionSearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, VisionSearchSettings)
        start = time.perf_counter()
        findings = state.get("findings") or []
        sources = state.get("sources") or []
        if use_extractive(settings):
            text, how = extractive_answer(state, settings), "extractive"
        else:
            if sources:
                blocks = state.get("region_summaries") or [
                    f"Q: {f['question']}\nA: {f['answer']} (sources {', '.join(map(str, f['source_numbers'])) or 'none'})"
                    for f in findings]
                knowledge = "\n".join(blocks)[: settings.answer_context_chars]
            else:
                knowledge = "The search found nothing."
            source_lines = "\n".join(f"[{s['number']}] {s['title']} ({s['url']})" for s in sources) or "(none)"
            text = steps.final_answer(chat, state["question"], steps.region_lines(state["regions"]), knowledge,
                                      source_lines)
            how = "llm"
        text, cited, dropped = steps.check_citations(text, [s["number"] for s in sources])
        if dropped:
            logger.warning("the answer cited sources that were not read: %s (removed)", dropped)
        if not sources and "found nothing" not in text.lower():
            text = f"{text}\n(The search found nothing; this answer comes from the photo alone.)".strip()
        citations = {"cited": cited, "dropped": dropped, "uncited": bool(sources) and not cited}
        return {"answer": text, "answerer": how, "citations": citations, "timings": timed("answer", start)}

    builder = StateGraph(VisionSearchState, context_schema=VisionSearchSettings, input_schema=VisionSearchInput,
                         output_schema=VisionSearchOutput)
    builder.add_node("retrieve", retrieve)
    builder.add_node("regions", regions)
    builder.add_node("describe", describe)
    builder.add_node("plan", plan)
    builder.add_node("search", search_node)
    builder.add_node("summarize", summarize)
    builder.add_node("answer", answer)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "regions")
    builder.add_edge("regions", "describe")
    builder.add_edge("describe", "plan")
    builder.add_conditional_edges("plan", dispatch, ["search", "summarize"])
    builder.add_edge("search", "plan")
    builder.add_edge("summarize", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer, name=name)
