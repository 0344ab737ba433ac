"""Each Vision Search Assistant node called alone (:mod:`pictrieve.agents.vsa.nodes`), given what it uses as
keyword arguments; the progress helper the CLI and the page share; the LLM judge's rubrics; the parts
loaded on first use.

Scripted chat models, recording detectors/describers and a dictionary search backend test control flow
only, never answer quality (that is ``test_vsa_answerers.py`` with the real MiniLM, and BENCHMARKS.md).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.runtime import Runtime
from langgraph.types import Send

from helpers.vsa_fakes import (  # noqa: F401  (fixture: photo)
    DOG_FACT, DOGS, HORSE_FACT, HORSES, PAGES, Pages, WholeImage, Words, no_llm, photo, scripted)

from pictrieve.agents.settings import SettingsError
from pictrieve.agents.vsa import nodes
from pictrieve.agents.vsa.state import VisionSearchSettings
from pictrieve.tools.core.images import ImageDecodeError
from pictrieve.tools.models.protocols import Detection
from pictrieve.tools.web.search import SearchUnavailableError


def run(**settings) -> Runtime:
    """A node's runtime carrying these run settings (as LangGraph passes it)."""
    return Runtime(context=VisionSearchSettings(**settings))


REGIONS = [{"label": "horse", "score": 0.9, "box": [0.0, 0.0, 30.0, 40.0], "description": "a brown horse"},
           {"label": "person", "score": 0.8, "box": [20.0, 0.0, 60.0, 40.0], "description": "a rider"}]


# --- retrieve ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_embedder):
    from helpers import make_photo

    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("vsa-nodes")
    for i, caption in enumerate(["a black dog runs", "a brown horse stands", "two children play"]):
        make_photo(root / "photos" / f"p{i}.png", seed=i)
        (root / "photos" / f"p{i}.txt").write_text(caption + "\n")
    found = Gallery.open(root / "g", tiny_clip_embedder)
    found.add(root / "photos", progress=False)
    return found


def test_retrieve_finds_the_photo_in_the_gallery_only_when_none_was_given(gallery, photo, tmp_path):
    out = nodes.retrieve({"question": "a horse"}, run(candidate_k=2), index=gallery)
    assert len(out["hits"]) == 2 and out["image"] == out["hits"][0].path and "retrieve" in out["timings"]
    assert nodes.retrieve({"question": "what is it?", "image": photo}, index=gallery) == {"hits": []}
    with pytest.raises(SettingsError, match="needs a 'question'"):
        nodes.retrieve({"question": "  ", "image": photo}, index=gallery)
    with pytest.raises(SettingsError, match="needs an 'image' path"):
        nodes.retrieve({"question": "a horse"}, index=None)
    bad = tmp_path / "bad.jpg"
    bad.write_text("<html>")
    with pytest.raises(ImageDecodeError):  # the input is checked before any model runs
        nodes.retrieve({"question": "what is it?", "image": str(bad)}, index=None)


# --- regions ----------------------------------------------------------------------------------------


class _Recording:
    """A detector that records what it was asked and finds a horse, a sliver and a dog."""

    name = "recording"

    def __init__(self):
        self.asked = []

    def detect(self, image, *, labels=None, min_score=None):
        self.asked.append((labels, min_score))
        return [Detection("horse", 0.91234, (0.0, 0.0, 30.0, 40.0)), Detection("dog", 0.6, (0.0, 0.0, 64.0, 1.0)),
                Detection("dog", 0.5, (30.0, 10.0, 64.0, 48.0))]


def test_regions_asks_the_detector_with_the_questions_words_and_keeps_the_best(photo):
    detector = _Recording()
    out = nodes.regions({"question": "How old is this horse?", "image": photo}, run(min_score=0.3, max_regions=1),
                        detector=lambda: detector)
    ((labels, min_score),) = detector.asked
    assert labels[:2] == ["old", "horse"] and "person" in labels and min_score == 0.3  # question words first, then COCO
    assert out["regions"] == [{"label": "horse", "score": 0.912, "box": [0.0, 0.0, 30.0, 40.0]}]
    # the sliver (1 px high) is dropped; two regions at most by default ... and none found: the whole image
    found = nodes.regions({"question": "q", "image": photo}, detector=lambda: detector)["regions"]
    assert [r["label"] for r in found] == ["horse", "dog"]
    assert nodes.regions({"question": "q", "image": photo}, detector=WholeImage)["regions"] == [
        {"label": "image", "score": 1.0, "box": [0.0, 0.0, 64.0, 48.0]}]


# --- describe ---------------------------------------------------------------------------------------


class _Describer:
    name = "describer"

    def __init__(self):
        self.seen = []

    def caption(self, images, *, prompt=None):
        self.seen.append((images[0].size, prompt))
        return [f"something {len(self.seen)}"]


def test_describe_captions_each_crop_then_correlates_two_regions_only_when_asked(photo):
    regions = [{k: v for k, v in r.items() if k != "description"} for r in REGIONS]
    state = {"question": "Who rides?", "image": photo, "regions": regions}
    describer = _Describer()
    out = nodes.describe(state, run(correlate=False), vlm=lambda: describer, chat=RunnableLambda(no_llm))
    assert describer.seen == [((30, 40), "Describe the horse in this picture. The user asks: Who rides?"),
                              ((40, 40), "Describe the person in this picture. The user asks: Who rides?")]
    assert [r["description"] for r in out["regions"]] == ["something 1", "something 2"]
    assert set(out["timings"]) == {"describe"}

    asked = []

    def rewrite(messages):
        asked.append(messages[0].content)
        return AIMessage(content=f"rewritten {len(asked)}\nignored second line")

    out = nodes.describe(state, run(correlate=True), vlm=_Describer, chat=RunnableLambda(rewrite))
    assert [r["description"] for r in out["regions"]] == ["rewritten 1", "rewritten 2"]
    assert "something 2" in asked[0] and set(out["timings"]) == {"describe", "correlate"}


# --- plan -------------------------------------------------------------------------------------------


def test_plan_without_a_search_asks_nothing():
    out = nodes.plan({"question": "q", "regions": REGIONS}, chat=RunnableLambda(no_llm), backend=None)
    assert (out["sub_questions"], out["plan_mode"], out["plan_turns"]) == ([], "no search", 1)


def test_plan_turn_one_by_rules_then_nothing_more():
    state = {"question": "How many teeth does it have?", "regions": REGIONS}
    out = nodes.plan(state, run(plan_with_llm=False), chat=RunnableLambda(no_llm), backend=lambda: Pages({}))
    assert out["plan_mode"] == "rules" and out["plan_turns"] == 1
    assert [(s["question"], s["region"], s["turn"], s["order"]) for s in out["sub_questions"]] == [
        ("How many teeth does it have? (horse, person)", 1, 1, 0), ("horse teeth", 1, 1, 1), ("person teeth", 2, 1, 2)]
    assert nodes.plan({**state, **out}, run(plan_with_llm=False), chat=RunnableLambda(no_llm),
                      backend=lambda: Pages({})) == {}


def test_plan_later_turns_add_follow_ups_until_done_or_out_of_turns():
    replies = iter(['{"sub_questions": [{"question": "dog teeth"}, {"question": "horse teeth"}]}', '{"done": true}'])
    seen = []

    def planner(messages):
        seen.append(messages[0].content)
        return AIMessage(content=next(replies))

    asked = [{"question": "horse teeth", "region": 1, "turn": 1, "order": 0}]
    searched = [{"order": 0, "question": "horse teeth", "answer": "36 to 44 [1].", "log": None}]
    state = {"question": "Teeth?", "regions": REGIONS, "sub_questions": asked, "plan_mode": "json", "plan_turns": 1,
             "searched": searched}
    out = nodes.plan(state, chat=RunnableLambda(planner), backend=lambda: Pages({}))
    assert out["sub_questions"] == asked + [{"question": "dog teeth", "region": 1, "turn": 2, "order": 1}]
    assert (out["plan_mode"], out["plan_turns"]) == ("json", 2)  # the repeat is dropped; the mode is turn 1's
    assert "A: 36 to 44." in seen[0]  # what was found, without its citation numbers
    done = nodes.plan({**state, **out}, chat=RunnableLambda(planner), backend=lambda: Pages({}))
    assert done["sub_questions"] == out["sub_questions"] and "plan_turns" not in done
    assert nodes.plan({**state, "plan_turns": 3}, run(max_plan_turns=3), chat=RunnableLambda(no_llm),
                      backend=lambda: Pages({})) == {}


def test_plan_stops_the_run_when_every_search_failed():
    failed = {"searches": 2, "search_errors": ["no route", "no route"], "fetches": 0, "fetch_errors": []}
    state = {"question": "q", "regions": REGIONS, "plan_turns": 1, "plan_mode": "json",
             "searched": [{"order": 0, "question": "q", "answer": "", "log": failed}]}
    with pytest.raises(SearchUnavailableError, match="every search failed \\(2 with dict\\), e.g. no route"):
        nodes.plan(state, chat=RunnableLambda(no_llm), backend=lambda: Pages({}))


# --- route_searches (after plan) --------------------------------------------------------------------


def test_route_searches_sends_this_turns_unsearched_sub_questions_with_what_is_known():
    subs = [{"question": "horse teeth", "turn": 1, "order": 0}, {"question": "dog teeth", "turn": 2, "order": 1},
            {"question": "cat teeth", "turn": 2, "order": 2}]
    searched = [{"order": 0, "question": "horse teeth", "answer": "36 to 44 [1]."},
                {"order": 2, "question": "cat teeth", "answer": "30 [2]."}]
    sent = nodes.route_searches({"question": "q", "regions": REGIONS, "sub_questions": subs, "plan_turns": 2,
                                 "searched": searched})
    assert sent == [Send("search", {"sub_question": subs[1], "order": 1, "photo": "horse, person",
                                    "known": "Q: horse teeth\nA: 36 to 44.\nQ: cat teeth\nA: 30."})]
    assert nodes.route_searches({"sub_questions": subs[:1], "plan_turns": 1, "searched": searched}) == "summarize"


# --- search (one searcher) --------------------------------------------------------------------------


def test_search_reads_new_pages_may_search_again_and_keeps_local_numbers():
    def searcher(messages):
        text = messages[0].content
        return AIMessage(content="SEARCH AGAIN: dog teeth" if "Dogs" not in text else "42 teeth [2].")

    backend = Pages({"canine": [HORSES], "dog teeth": [DOGS, HORSES]})
    task = {"sub_question": {"question": "canine teeth", "region": 2, "turn": 1}, "order": 3}
    out = nodes.search_sub_question(task, run(max_search_turns=2), chat=RunnableLambda(searcher),
                                    backend=lambda: backend)
    (finding,) = out["searched"]
    assert finding["queries"] == ["canine teeth", "dog teeth"] and backend.queries == finding["queries"]
    assert finding["sources"] == [{"url": HORSES.url, "title": "Horses"}, {"url": DOGS.url, "title": "Dogs"}]
    assert (finding["order"], finding["region"], finding["answer"], finding["error"]) == (3, 2, "42 teeth [2].", "")
    assert finding["log"]["searches"] == 2 and "search" in out["timings"]


class _Broken:
    name = "broken"

    def search(self, query, *, k=6):
        from pictrieve.errors import PictrieveError

        raise PictrieveError("the backend is down")


def test_search_that_could_not_run_says_it_failed_not_found_nothing():
    task = {"sub_question": {"question": "horse teeth"}, "order": 0}
    (finding,) = nodes.search_sub_question(task, chat=RunnableLambda(no_llm), backend=_Broken)["searched"]
    assert finding["answer"] == "The search failed (the backend is down)." and finding["error"] == "the backend is down"
    assert finding["log"] == {"searches": 1, "search_errors": ["the backend is down"], "fetches": 0, "fetch_errors": []}


def test_extractive_search_quotes_the_best_sentence_and_passes_on_its_evidence():
    task = {"sub_question": {"question": "How many teeth does an adult horse have?"}, "order": 0, "photo": "horse"}
    (finding,) = nodes.search_sub_question(task, run(answerer="extractive"), chat=RunnableLambda(no_llm),
                                           backend=lambda: Pages({"teeth": [HORSES, DOGS]}))["searched"]
    assert finding["answer"].startswith(f"{HORSE_FACT} [1]") and finding["queries"] == [task["sub_question"]["question"]]
    assert finding["evidence"][0] == {**finding["evidence"][0], "sentence": HORSE_FACT, "source": 1, "title": "Horses"}
    assert {e["sentence"] for e in finding["evidence"]} <= {HORSE_FACT, DOG_FACT}


# --- summarize --------------------------------------------------------------------------------------


def test_summarize_numbers_sources_once_across_searches_and_renumbers_citations():
    searched = [  # as the parallel searchers finished: not in order
        {"order": 1, "question": "dog teeth", "region": 1, "answer": "42 [2], like horses [1].",
         "evidence": [{"sentence": DOG_FACT, "source": 2}],
         "sources": [{"url": HORSES.url, "title": "Horses"}, {"url": DOGS.url, "title": "Dogs"}]},
        {"order": 0, "question": "horse teeth", "region": 1, "answer": "36 to 44 [1][3].", "evidence": [],
         "sources": [{"url": HORSES.url, "title": "Horses"}]},
    ]
    out = nodes.summarize({"question": "q", "regions": REGIONS[:1], "searched": searched},
                          chat=RunnableLambda(no_llm))
    assert out["sources"] == [{"number": 1, "url": HORSES.url, "title": "Horses"},
                              {"number": 2, "url": DOGS.url, "title": "Dogs"}]
    assert [f["answer"] for f in out["findings"]] == ["36 to 44 [1].", "42 [2], like horses [1]."]  # [3] was never read
    assert out["findings"][1]["evidence"] == [{"sentence": DOG_FACT, "source": 2}]
    assert [f["source_numbers"] for f in out["findings"]] == [[1], [1, 2]] and out["region_summaries"] == []

    two = nodes.summarize({"question": "q", "regions": REGIONS, "searched": searched},
                          chat=RunnableLambda(lambda messages: AIMessage(content="both about teeth")))
    assert two["region_summaries"] == ["Region 1 (horse): both about teeth"]  # region 2 has no finding


# --- answer -----------------------------------------------------------------------------------------


def test_answer_by_the_llm_cites_only_sources_that_were_read():
    prompts = []

    def writer(messages):
        prompts.append(messages[0].content)
        return AIMessage(content="It has 36 to 44 teeth [1][9].")

    state = {"question": "How many teeth?", "regions": REGIONS[:1],
             "findings": [{"question": "horse teeth", "answer": "36 to 44 [1].", "source_numbers": [1]}],
             "sources": [{"number": 1, "url": HORSES.url, "title": "Horses"}]}
    out = nodes.answer(state, chat=RunnableLambda(writer))
    assert (out["answer"], out["answerer"]) == ("It has 36 to 44 teeth [1].", "llm")
    assert out["citations"] == {"cited": [1], "dropped": [9], "uncited": False}
    assert f"[1] Horses ({HORSES.url})" in prompts[0] and "Q: horse teeth\nA: 36 to 44 [1]. (sources 1)" in prompts[0]


def test_answer_without_sources_says_it_comes_from_the_photo_alone():
    out = nodes.answer({"question": "What is it?", "regions": REGIONS[:1], "findings": [], "sources": []},
                       chat=RunnableLambda(lambda messages: AIMessage(content="A horse.")))
    assert out["answer"] == "A horse.\n(The search found nothing; this answer comes from the photo alone.)"
    assert out["citations"] == {"cited": [], "dropped": [], "uncited": False}


def test_extractive_answer_quotes_each_part_from_the_searchers_evidence():
    evidence = [{"sentence": HORSE_FACT, "source": 1, "title": "Horses"},
                {"sentence": DOG_FACT, "source": 2, "title": "Dogs"}]
    state = {"question": "How many teeth does this horse have?", "regions": REGIONS[:1],
             "findings": [{"question": "q", "answer": "", "evidence": evidence, "source_numbers": [1, 2]}],
             "sources": [{"number": 1, "url": HORSES.url, "title": "Horses"},
                         {"number": 2, "url": DOGS.url, "title": "Dogs"}]}
    out = nodes.answer(state, run(answerer="extractive"), chat=RunnableLambda(no_llm))
    assert out["answer"] == f"The photo shows a horse. {HORSE_FACT} [1]" and out["answerer"] == "extractive"
    assert out["citations"]["cited"] == [1]


# --- following a run: the helper `pictrieve ask -v` and the page share ---------------------------------


def test_following_the_stream_gives_what_invoke_gives(photo):
    from pictrieve.agents.vsa.progress import follow_run, step_line
    from pictrieve.graphs.vsa import build_vsa_graph
    from pictrieve.tools.web.search import SEARCH_BACKENDS

    graph = build_vsa_graph(None, llm=scripted([]), vlm=Words(), detector=WholeImage(),
                                      search=SEARCH_BACKENDS.create(f"local:{PAGES}"))
    inputs, context = {"image": photo, "question": "How many teeth does this animal have?"}, {"pages_per_search": 1}
    lines = []
    followed = follow_run(graph.stream(inputs, context=context, stream_mode="updates"),
                          lambda node, change: lines.append(step_line(node, change)))
    invoked = graph.invoke(inputs, context=context)
    assert set(followed["timings"]) == set(invoked["timings"]) == {"regions", "describe", "plan", "search",
                                                                   "summarize", "answer"}
    # the same result, but for the input's image, which no step returns (the CLI's --json never had it)
    assert {k: v for k, v in followed.items() if k != "timings"} == {
        k: v for k, v in invoked.items() if k not in ("timings", "image")}
    assert lines[0] == "" and lines[1] == "regions: image (1.00)" and lines[-1] == "answered (llm)"
    assert "plan turn 1 (json): adult horse number of teeth; dog body temperature" in lines


def test_step_lines_say_what_each_step_did():
    from pictrieve.agents.vsa.progress import step_line

    finding = {"question": "q", "queries": ["horse teeth", "teeth"], "sources": [{"title": "Horses"}],
               "answer": "36 [1].", "error": "one fetch failed"}
    assert step_line("search", {"searched": [finding]}) == "searched 'horse teeth' then 'teeth': read 1 page(s) (one fetch failed)"
    assert step_line("search", {"searched": [finding]}, detail=True).split("\n")[1:] == ["  read: Horses", "  -> 36 [1]."]
    assert step_line("describe", {"regions": REGIONS}, detail=True).split("\n") == [
        "described 2 region(s)", "  1. horse: a brown horse", "  2. person: a rider"]
    assert step_line("retrieve", {"hits": [1, 2], "image": "/p.jpg"}, detail=True) == (
        "found the photo in the gallery (2 candidates): asking about /p.jpg")
    # a planner that is done repeats the sub-questions asked so far, with no turn: no new turn is listed
    asked = [{"question": "horse teeth", "turn": 1}]
    assert step_line("plan", {"sub_questions": asked}) == "plan: no (more) searches"
    assert step_line("plan", {"sub_questions": asked, "plan_turns": 1, "plan_mode": "rules"}) == (
        "plan turn 1 (rules): horse teeth")
    assert step_line("answer", {"answerer": "llm", "citations": {"dropped": [9]}}) == (
        "answered (llm); removed citations of sources never read: [9]")


# --- the judge (eval vsa's rubric; VisRet's is in test_visret.py) --------------------------------------


@pytest.mark.parametrize("reply, grade", [("Yes.", 1.0), ("yes, the same fact", 1.0), ("No", 0.0),
                                          ("I think yes", 0.0), ("", 0.0)])
def test_same_fact_judge_reads_yes_at_temperature_zero(reply, grade):
    from helpers.visret_fakes import RecordingChat

    from pictrieve.agents.judge import judge_answer

    judge = RecordingChat(reply)
    got, raw = judge_answer(judge, "How many teeth?", "36 to 44.", "It has 36 to 44 teeth [1].", rubric="same_fact")
    assert (got, raw) == (grade, reply) and judge.bound == [{"temperature": 0}]
    prompt = judge.calls[0][0].content
    assert "Reference answer: 36 to 44." in prompt and "Answer to grade: It has 36 to 44 teeth [1]." in prompt
    with pytest.raises(ValueError, match="known: visual_rag, same_fact"):
        judge_answer(judge, "q", "r", "a", rubric="nonsense")


# --- the parts: nothing loads when the graph is built ---------------------------------------------------


def test_parts_load_on_first_use_and_a_search_name_is_checked_at_once(tmp_path):
    from pictrieve.agents.vsa.parts import made_once, make_parts

    parts = make_parts(llm=RunnableLambda(no_llm), detector="zeroshot:/nonexistent/detector", search=None)
    assert parts.backend is None  # nothing was loaded, or the detector's name would have failed here
    with pytest.raises(Exception, match="nonexistent"):
        parts.detector()  # the first use loads it, and fails then
    with pytest.raises(Exception, match="no page folder at"):
        make_parts(llm=RunnableLambda(no_llm), search=f"local:{tmp_path / 'nowhere'}")
    calls = []
    get = made_once(lambda: calls.append(1) or object())
    assert calls == [] and get() is get() and calls == [1]  # made on the first call, once
