"""The Vision Search Assistant's nodes, each a top-level function testable alone.

Each node takes the graph state (or, for the parallel searcher, its :class:`~.state.SearchTask`), the
run's ``runtime`` (its settings: :class:`~.state.VisionSearchSettings`; ``None`` gives the defaults) and
what it uses as keyword arguments: the gallery (``index``), the ``chat`` model, and functions of no
argument returning the ``detector``, the region describer (``vlm``) and the page search (``backend``,
``None`` for none), made on first call (:mod:`.parts`).
:func:`pictrieve.graphs.vsa.build_vsa_graph` binds those with ``functools.partial``
and wires the nodes; what each one does is in that module's docstring. The LLM steps themselves are in
:mod:`.steps`, the extractive answerer in :mod:`.extractive`, the page reading in :mod:`.pages`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send

from pictrieve.agents.settings import SettingsError, settings_of
from pictrieve.agents.shown_text import CAPABLE_LLM
from pictrieve.agents.vsa import extractive, steps
from pictrieve.agents.vsa.pages import check_search_reached, read_pages, search_log
from pictrieve.agents.vsa.state import SearchTask, VisionSearchSettings, VisionSearchState, merge_timings
from pictrieve.agents.answer_types import question_terms
from pictrieve.tools.core.images import load_image
from pictrieve.vectorstore.store import ImageStore

logger = logging.getLogger(__name__)

EVIDENCE_PER_SEARCH = 6
"""Extractive answerer: relevant sentences each searcher passes on to the answer step."""

NOTHING_FOUND = "The search found nothing."
_CITE = re.compile(r"\s?\[\d+\]")


# --- what the nodes decide by -----------------------------------------------------------------------


def is_offline_small_model(chat: Any) -> bool:
    """True for a chat model whose words are not shown (the offline SmolLM2-135M, by name or as the object, also
    inside LangChain wrappers; or none at all): :func:`pictrieve.agents.shown_text.may_show`, the one rule."""
    from pictrieve.agents.shown_text import may_show

    return not may_show(chat)


def llm_step(flag: bool | None, chat: Any) -> bool:
    """An optional LLM step runs when asked to, or by default with any model but the offline 135M one."""
    return (not is_offline_small_model(chat)) if flag is None else flag


def use_extractive(settings: VisionSearchSettings, chat: Any) -> bool:
    """Whether the extractive answerer answers (setting ``answerer``; ``auto``: with the offline 135M model).

    ``llm`` with a model whose words are not shown (:func:`is_offline_small_model`) is refused
    (:func:`refuse_small_answerer`): its answer would be shown as the run's answer."""
    if settings.answerer == "llm":
        refuse_small_answerer(chat)
    if settings.answerer != "auto":
        return settings.answerer == "extractive"
    return is_offline_small_model(chat)


def refuse_small_answerer(chat: Any) -> None:
    """Raise :class:`SettingsError` when ``answerer llm`` would show the words of a model too small to write an
    answer worth reading (the offline SmolLM2-135M, or no model); the front ends call it before a run starts."""
    if is_offline_small_model(chat):
        raise SettingsError(
            "answerer llm: the offline chat model (SmolLM2-135M) is too small to write an answer worth reading; "
            f"give a capable model ({CAPABLE_LLM}) or leave the answerer on auto (quoted page sentences)")


def timed(label: str, start: float) -> dict[str, float]:
    """``{label: seconds since start}``, the node's entry in the state's ``timings``."""
    return {label: round(time.perf_counter() - start, 3)}


def renumber(text: str, mapping: dict[int, int]) -> str:
    """``text`` with each citation ``[n]`` renumbered by ``mapping`` (a number not in it is removed)."""
    return re.sub(r"\[(\d+)\]", lambda m: f"[{mapping[int(m.group(1))]}]" if int(m.group(1)) in mapping else "", text)


def known_so_far(searched: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What the searches found so far, in the order asked: ``{"question", "answer"}`` without citations."""
    return [{"question": f["question"], "answer": _CITE.sub("", f["answer"])}
            for f in sorted(searched, key=lambda f: f["order"])]


def sentence_encoder() -> Any:
    """The shared MiniLM sentence encoder (loaded once per process)."""
    from pictrieve.tools.web.local_pages import shared_encoder

    return shared_encoder()


# --- the nodes ---------------------------------------------------------------------------------------


def retrieve(state: VisionSearchState, runtime: Runtime[VisionSearchSettings] | None = None, *,
             index: ImageStore | None) -> dict[str, Any]:
    """Check the input; without an ``image``, find the photo: the gallery's best match for the question
    (visual RAG; its ``candidate_k`` hits are returned too). With one, no gallery is searched (no hits)."""
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


def regions(state: VisionSearchState, runtime: Runtime[VisionSearchSettings] | None = None, *,
            detector: Callable[[], Any]) -> dict[str, Any]:
    """The photo's regions: ``detector()`` prompted with the question's words and the COCO classes, at most
    ``max_regions`` (no detection: the whole image is one region)."""
    from pictrieve.tools.models.detectors import COCO_CLASSES, regions_or_whole

    settings = settings_of(runtime, VisionSearchSettings)
    start = time.perf_counter()
    image = load_image(state["image"])
    labels = question_terms(state["question"]) + COCO_CLASSES
    found = one_label_per_box(detector().detect(image, labels=labels, min_score=settings.min_score))
    chosen = regions_or_whole(image, found, max_regions=settings.max_regions)
    out = [{"label": d.label, "score": round(float(d.score), 3), "box": [round(float(v), 1) for v in d.box]}
           for d in chosen]
    return {"regions": out, "timings": timed("regions", start)}


SAME_BOX = 0.9
"""Detections overlapping this much (intersection over union) are one object: SSD often gives one box two
classes ("dog (0.91)" and "horse (0.79)" on one dog), and only the likelier is kept."""


def _overlap(a: Any, b: Any) -> float:
    x0, y0, x1, y1 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def one_label_per_box(detections: list[Any]) -> list[Any]:
    """The detections, best first, without a second label for a box already labelled (:data:`SAME_BOX`)."""
    kept: list[Any] = []
    for found in sorted(detections, key=lambda d: -float(d.score)):
        if all(_overlap(found.box, k.box) < SAME_BOX for k in kept):
            kept.append(found)
    return kept


def describe_crop(captioner: Any, crop: Any, region: dict[str, Any], question: str) -> dict[str, Any]:
    """``{"description", "subject"}`` of one region: the describer's own account of a labelled region where
    it has one (the offline describer: a person is a person), else its caption for a prompt naming the label."""
    if hasattr(captioner, "describe_region"):
        return captioner.describe_region(crop, region["label"])
    prompt = f"Describe the {region['label']} in this picture. The user asks: {question}"
    return {"description": captioner.caption([crop], prompt=prompt)[0],
            "subject": None if region["label"] == "image" else region["label"]}


def describe(state: VisionSearchState, runtime: Runtime[VisionSearchSettings] | None = None, *,
             vlm: Callable[[], Any], chat: Any) -> dict[str, Any]:
    """Each region's crop described by ``vlm()`` in the light of the question; with 2+ regions (and the
    ``correlate`` setting) each description is rewritten by ``chat`` with the others as context."""
    settings = settings_of(runtime, VisionSearchSettings)
    start = time.perf_counter()
    image = load_image(state["image"])
    crops = [image.crop(tuple(int(round(v)) for v in r["box"])) for r in state["regions"]]
    captioner = vlm()
    described = []
    for region, crop in zip(state["regions"], crops):
        said = describe_crop(captioner, crop, region, state["question"])
        described.append({**region, "description": said["description"],
                          **({"subject": said["subject"]} if said.get("subject") else {})})
    timings = timed("describe", start)
    if llm_step(settings.correlate, chat) and len(described) > 1:
        start = time.perf_counter()
        rewritten = steps.correlate(chat, state["question"], described)
        described = [{**r, "description": t} for r, t in zip(described, rewritten)]
        timings = merge_timings(timings, timed("correlate", start))
    return {"regions": described, "timings": timings}


def plan(state: VisionSearchState, runtime: Runtime[VisionSearchSettings] | None = None, *,
         chat: Any, backend: Callable[[], Any] | None) -> dict[str, Any]:
    """One planner turn of the chain of search: turn 1 asks the first sub-questions (``chat``'s plan, or
    the rule plan); a later turn sees what was found and asks follow-ups or says it is done. No update
    when out of turns (or after a rule plan). Raises when every search so far failed to run."""
    settings = settings_of(runtime, VisionSearchSettings)
    start = time.perf_counter()
    turn = int(state.get("plan_turns") or 0) + 1
    asked = list(state.get("sub_questions") or [])
    if backend is None:
        return {"sub_questions": [], "plan_mode": "no search", "plan_turns": turn, "timings": timed("plan", start)}
    check_search_reached(state.get("searched") or [], backend())  # after a round of searches
    if turn == 1:
        if llm_step(settings.plan_with_llm, chat):
            made, how = steps.plan(chat, state["question"], state["regions"], limit=settings.max_sub_questions)
        else:
            made, how = steps.fallback_plan(state["question"], state["regions"], settings.max_sub_questions), "rules"
        new = made.sub_questions
    elif turn > settings.max_plan_turns or state.get("plan_mode") in ("rules", "fallback"):
        return {}  # out of turns, or a rule plan (it has nothing to add): no update, on to summarize
    else:
        made, how = steps.replan(chat, state["question"], state["regions"], known_so_far(state.get("searched") or []),
                                 asked=[s["question"] for s in asked], limit=settings.max_sub_questions)
        new = made.sub_questions
        if made.done and not new:  # the planner is done (the unchanged list keeps progress lines sensible)
            return {"sub_questions": asked, "timings": timed("plan", start)}
        how = state.get("plan_mode") or how
    added = [{**s.model_dump(), "turn": turn, "order": len(asked) + i} for i, s in enumerate(new)]
    return {"sub_questions": asked + added, "plan_mode": how, "plan_turns": turn, "timings": timed("plan", start)}


def route_searches(state: VisionSearchState) -> list[Send] | str:
    """After ``plan``: one ``search`` per sub-question of this turn not searched yet (run in parallel),
    each told what is known so far and the photo's labels; none left: ``summarize``."""
    turn = state.get("plan_turns") or 0
    fresh = [s for s in state.get("sub_questions") or [] if s.get("turn") == turn]
    searched = {f["order"] for f in state.get("searched") or []}
    fresh = [s for s in fresh if s["order"] not in searched]
    if not fresh:
        return "summarize"
    known = "\n".join(f"Q: {k['question']}\nA: {k['answer']}" for k in known_so_far(state.get("searched") or []))
    context = extractive.photo_context(state.get("regions") or [])
    return [Send("search", {"sub_question": s, "order": s["order"], "known": known, "photo": context})
            for s in fresh]


def search_sub_question(task: SearchTask, runtime: Runtime[VisionSearchSettings] | None = None, *,
                        chat: Any, backend: Callable[[], Any], allow_hosts: tuple[str, ...] = ()) -> dict[str, Any]:
    """One searcher: search the sub-question, read up to ``pages_per_search`` new pages, answer from them
    with citations (``chat``, or the extractive answerer's best sentences); it may search again, up to
    ``max_search_turns`` searches. Returns its finding (source numbers local to it) in ``searched``."""
    settings = settings_of(runtime, VisionSearchSettings)
    start = time.perf_counter()
    sub = task["sub_question"]
    pages: list[dict[str, Any]] = []
    log = search_log()
    queries: list[str] = []
    evidence: list[dict[str, Any]] = []
    query: str | None = sub["question"]
    answer_text = NOTHING_FOUND
    for turn in range(settings.max_search_turns):
        if query is None or query in queries:
            break
        queries.append(query)
        read_pages(backend(), query, pages, log, search_k=settings.search_k, pages_per_search=settings.pages_per_search,
                   page_chars=settings.page_chars, allow_hosts=allow_hosts)
        may_search_again = turn + 1 < settings.max_search_turns
        if use_extractive(settings, chat):
            candidates = [(s, p["number"], p["title"]) for p in pages for s in extractive.page_sentences(p["text"], p["title"])]
            subjects = [w.strip() for w in task.get("photo", "").split(",") if w.strip()]
            scored = extractive.score_sentences(
                sub["question"], extractive.on_topic(candidates, sub["question"], subjects),
                context=task.get("photo", ""), encode=sentence_encoder().encode)
            chosen = extractive.choose(scored, max_sentences=settings.evidence_sentences, part=sub["question"])
            titles = {p["number"]: p["title"] for p in pages}
            # candidates for the final answer, which re-ranks them against each part of the question
            evidence = [{**e.to_dict(), "title": titles[e.source]}
                        for e in scored if e.relevance >= extractive.MIN_SCORE][:EVIDENCE_PER_SEARCH]
            answer_text = extractive.cite(chosen) or NOTHING_FOUND
            # no sentence is close enough: search once more with the question's words and the labels
            query = (f"{task.get('photo', '')} {' '.join(question_terms(sub['question']))}".strip()
                     if not chosen and may_search_again else None)
        else:
            answer_text, query = steps.answer_sub_question(
                chat, sub["question"], pages, page_chars=settings.page_chars, known=task.get("known", ""),
                may_search_again=may_search_again)
    answer_text = answer_text.strip() or NOTHING_FOUND  # e.g. only a repeated follow-up query
    if not pages and log["search_errors"]:  # it did not find nothing: it could not search
        answer_text = f"The search failed ({log['search_errors'][0]})."
    finding = {"order": task["order"], "question": sub["question"], "region": sub.get("region", 1),
               "turn": sub.get("turn", 1), "queries": queries, "answer": answer_text, "evidence": evidence,
               "sources": [{"url": p["url"], "title": p["title"]} for p in pages],
               "error": "; ".join(log["search_errors"] + log["fetch_errors"]), "log": log}
    return {"searched": [finding], "timings": timed("search", start)}


def summarize(state: VisionSearchState, runtime: Runtime[VisionSearchSettings] | None = None, *,
              chat: Any) -> dict[str, Any]:
    """Number the sources of all searches globally (a page read twice keeps one number) and renumber each
    finding's citations and evidence; with the llm answerer and 2+ regions, one summary per region."""
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
        findings.append({**finding, "answer": renumber(finding["answer"], mapping),
                         "evidence": [{**e, "source": mapping[e["source"]]} for e in finding.get("evidence") or []],
                         "source_numbers": sorted(set(mapping.values()))})
    summaries: list[str] = []
    if (llm_step(settings.summarize_regions, chat) and not use_extractive(settings, chat)
            and len(state["regions"]) > 1 and findings):
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
    subjects = extractive.photo_subjects(state["regions"])
    chosen: list[extractive.Evidence] = []
    missing: list[str] = []
    parts = steps.question_parts(state["question"], with_subject=False)
    whole = steps.question_parts(state["question"], with_subject=True)  # "Who built ...: in what year?"
    for part, full in zip(parts, whole):
        # only sentences about what the photo shows (or what the question names) and about what is asked:
        # never a fact about something else, such as a horse's teeth for a dog photo
        fitting = extractive.on_topic(candidates, full, subjects)
        picked: list[extractive.Evidence] = []
        # the part alone; else the passage an earlier part quoted, read on ("One knot is ..."); else the
        # part with the first part as its subject ("Who built ...: in what year?")
        quoted = frozenset(c.source for c in chosen)
        if extractive.only_the_photo_answers(part):
            continue  # "what animal is this?": the photo line says it; no page does
        for asked, near in ((part, frozenset()), (part, quoted), (full, frozenset())):
            pool = [c for c in fitting if c[0] not in {e.sentence for e in chosen}] if near else fitting
            if near and not pool:
                continue
            scored = extractive.score_sentences(asked, pool, context=context, encode=sentence_encoder().encode)
            picked = extractive.choose(scored, max_sentences=settings.evidence_sentences, part=asked, near=near)
            if picked:
                break
        if not picked and not extractive.asks_what_it_is(part):  # the photo line answers "what is this?"
            missing.append(extractive.missing_clause(part, extractive.main_subject(subjects, part)))
        if picked and picked[0].sentence in {c.sentence for c in chosen}:
            continue  # the best sentence for this part was already quoted for an earlier part
        chosen.extend(item for item in picked if item.sentence not in {c.sentence for c in chosen})
    return extractive.compose_answer(state["question"], state["regions"], chosen, missing)


def answer(state: VisionSearchState, runtime: Runtime[VisionSearchSettings] | None = None, *,
           chat: Any) -> dict[str, Any]:
    """One answer citing sources by number (``chat``, or quoted sentences: :func:`extractive_answer`);
    citations of sources that were not read are removed and reported; says so when nothing was found."""
    settings = settings_of(runtime, VisionSearchSettings)
    start = time.perf_counter()
    findings = state.get("findings") or []
    sources = state.get("sources") or []
    if use_extractive(settings, chat):
        text, how = extractive_answer(state, settings), "extractive"
    else:
        if sources:
            blocks = state.get("region_summaries") or [
                f"Q: {f['question']}\nA: {f['answer']} (sources {', '.join(map(str, f['source_numbers'])) or 'none'})"
                for f in findings]
            knowledge = "\n".join(blocks)[: settings.answer_context_chars]
        else:
            knowledge = NOTHING_FOUND
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
