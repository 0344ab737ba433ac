"""Vision Search Assistant answers that stay within what was read (issue 28, item 3), and a region step that
loads its models once per process.

- the extractive answer quotes only sentences about the photo's subject, and says in one sentence what the
  pages read do not say (the reported failure: a dog photo answered with a horse's teeth);
- a person region is described as a person, never with ImageNet's animal labels, and low-confidence
  ImageNet labels are not shown as facts;
- a photo the detector finds nothing in is described whole, never "No object was detected";
- the detector and describer named by a graph are made once per process, not once per run.

The answer tests run the real MiniLM encoder and page search on a small page folder; the detector and the
classifier's output are stand-ins (what they say is the input under test).
"""

from __future__ import annotations

import pytest
from langchain_core.runnables import RunnableLambda

from helpers.vsa_fakes import HORSE_FACT, WholeImage, no_llm, photo  # noqa: F401  (fixture: photo)
from pictrieve.agents.vsa import extractive, nodes
from pictrieve.tools.models.protocols import Detection
from pictrieve.tools.models.vlm import OfflineRegionCaptioner

CONTEXT = {"answerer": "extractive", "plan_with_llm": False, "correlate": False}


class _Labelled:
    """A detector that finds one ``label`` over the whole photo (SSD's duplicate: a second label, same box)."""

    name = "labelled"

    def __init__(self, *labels):
        self.labels = labels

    def detect(self, image, *, labels=None, min_score=None):
        box = (0.0, 0.0, float(image.width), float(image.height))
        return [Detection(label=label, score=0.9 - 0.1 * i, box=box) for i, label in enumerate(self.labels)]


class _Words:
    name = "words"

    def caption(self, images, *, prompt=None):
        return ["a photo of something"] * len(images)


class _NoModel:
    """An embedder that fails the test when asked anything."""

    def __getattr__(self, name):
        raise AssertionError(f"the describer must not ask the classifier ({name})")


@pytest.fixture()
def horse_teeth_pages(tmp_path, monkeypatch):
    """A local pages folder where only the horse page gives a number of teeth."""
    monkeypatch.setenv("PICTRIEVE_PAGES_DB", str(tmp_path / "pages-db"))
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "horses.md").write_text(f"# Horses: quick facts\n\n{HORSE_FACT} The height of a horse is measured "
                                     "in hands.\n")
    (pages / "dogs.html").write_text(
        "<html><head><title>Dogs: body and senses</title></head><body><article><h1>Dogs: body and senses</h1>"
        "<p>The normal body temperature of a dog is between 38.3 and 39.2 degrees Celsius.</p>"
        "<p>A dog's nose holds up to 300 million scent receptors.</p></article></body></html>")
    return pages


def _graph(search, detector, vlm=None):
    from pictrieve.graphs.vsa import build_vsa_graph

    return build_vsa_graph(None, llm=RunnableLambda(no_llm), vlm=vlm or _Words(), detector=detector,
                                     search=search)


def test_a_dog_photo_is_never_answered_with_a_horses_teeth(horse_teeth_pages, photo):
    """Issue 28's report, offline: the pages read hold a horse's teeth, not a dog's; the answer says so."""
    out = _graph(f"local:{horse_teeth_pages}", _Labelled("dog", "horse")).invoke(
        {"image": photo, "question": "What animal is this and how many teeth does it have?"}, context=CONTEXT)
    assert [r["label"] for r in out["regions"]] == ["dog"]  # one box, one label: the likelier
    assert out["answer"] == "The photo shows a dog. The pages read do not say how many teeth a dog has."
    assert out["citations"]["cited"] == [] and "horse" not in out["answer"].lower()
    # no searcher passes a page's title off as a sentence it read ("Dogs: body and senses [1].")
    assert not any("body and senses" in f["answer"] for f in out["findings"])
    # and no searcher of the teeth question quotes a sentence that is not about teeth
    teeth = [f for f in out["findings"] if "teeth" in f["question"]]
    assert teeth and all(f["answer"] == "The search found nothing." for f in teeth), teeth
    # the same pages still answer about a horse photo, and about a dog's temperature
    out = _graph(f"local:{horse_teeth_pages}", _Labelled("horse")).invoke(
        {"image": photo, "question": "How many teeth does the animal in this photo have?"}, context=CONTEXT)
    assert f"{HORSE_FACT} [" in out["answer"] and "do not say" not in out["answer"]
    out = _graph(f"local:{horse_teeth_pages}", _Labelled("dog")).invoke(
        {"image": photo, "question": "What is the normal body temperature of this animal?"}, context=CONTEXT)
    assert "38.3 and 39.2 degrees Celsius. [" in out["answer"]


def test_a_fact_about_something_else_is_not_on_topic():
    candidates = [(HORSE_FACT, 1, "Horses: quick facts"), ("Teeth are covered in enamel.", 2, "Teeth")]
    assert extractive.on_topic(candidates, "how many teeth does it have?", ["dog"]) == [candidates[1]]
    assert extractive.on_topic(candidates, "how many teeth does a horse have?", ["dog"]) == candidates  # asked
    # on the photo's subject but not about what is asked: a horse's teeth do not say how long it lives
    assert not extractive.on_target(HORSE_FACT, "How many years does the animal in this photo live?")
    assert extractive.on_target(HORSE_FACT, "How many teeth does an adult animal like the one in this photo have?")
    assert extractive.missing_clause("how many teeth does it have?", "dog") == "how many teeth a dog has"
    assert extractive.missing_clause("What is the normal body temperature of the animal sitting next to the man?",
                                     "dog") == "what the normal body temperature of the dog sitting next to the man is"
    assert extractive.missing_clause("How fast can the machine in this photo go?", "bicycle") == (
        "how fast a bicycle can go")


def test_a_person_region_is_described_as_a_person(photo):
    captioner = OfflineRegionCaptioner(embedder=_NoModel())
    state = {"question": "Who is this?", "image": photo,
             "regions": [{"label": "person", "score": 0.8, "box": [0.0, 0.0, 30.0, 40.0]}]}
    out = nodes.describe(state, vlm=lambda: captioner, chat=RunnableLambda(no_llm))
    assert out["regions"][0]["description"] == "a person" and out["regions"][0]["subject"] == "person"
    assert extractive.photo_line(out["regions"]) == "The photo shows a person."


def test_low_confidence_imagenet_labels_are_not_shown_as_facts(photo):
    from PIL import Image

    from pictrieve.tools.models.imagenet_names import imagenet_readable_names

    names = imagenet_readable_names()
    monkey, coonhound, terrier = (names.index(n) for n in ("patas monkey", "Treeing Walker Coonhound",
                                                           "Boston Terrier"))
    captioner = OfflineRegionCaptioner(embedder=_NoModel())
    captioner._classes = lambda image: [(monkey, 0.07), (coonhound, 0.06), (terrier, 0.05)]
    crop = Image.open(photo)
    assert captioner.describe_region(crop, "dog") == {"description": "a dog", "subject": "dog"}
    assert captioner.describe_region(crop, "image")["subject"] is None  # unsure: no subject is claimed
    assert captioner.describe_region(crop, "image")["description"].startswith("unclear")
    captioner._classes = lambda image: [(terrier, 0.45), (monkey, 0.02)]
    assert captioner.describe_region(crop, "dog")["description"] == "a dog, perhaps a Boston Terrier (0.45)"


def test_a_photo_with_no_detections_is_described_whole(horse_teeth_pages, photo):
    from pictrieve.tools.models.imagenet_names import imagenet_readable_names

    names = imagenet_readable_names()
    captioner = OfflineRegionCaptioner(embedder=_NoModel())
    # the dog breeds share the probability out: no one breed is sure, the group is
    breeds = [names.index(n) for n in ("Boston Terrier", "Staffordshire Bull Terrier", "Great Dane")]
    captioner._classes = lambda image: [(breeds[0], 0.25), (breeds[1], 0.2), (breeds[2], 0.15)]
    out = _graph(f"local:{horse_teeth_pages}", WholeImage(), vlm=captioner).invoke(
        {"image": photo, "question": "How many teeth does it have?"}, context=CONTEXT)
    assert out["regions"][0]["label"] == "image" and out["regions"][0]["subject"] == "dog"
    assert out["answer"] == "The photo shows a dog. The pages read do not say how many teeth a dog has."
    # a describer that names no subject: its words for the whole photo, never "No object was detected"
    out = _graph(f"local:{horse_teeth_pages}", WholeImage()).invoke(
        {"image": photo, "question": "How many teeth does it have?"}, context=CONTEXT)
    assert out["answer"].startswith("The photo, described whole: a photo of something.")
    assert "No object" not in out["answer"]


def test_the_region_step_loads_its_models_once_per_process(photo, monkeypatch):
    """A served graph is built for every run: the named detector and describer are still made once."""
    from pictrieve.tools.core.model_cache import forget_shared_models
    from pictrieve.tools.models import detectors

    made = []

    def build(spec, **kwargs):
        made.append(spec)
        return _Labelled("dog")

    monkeypatch.setitem(detectors.DETECTORS._entries, "counting",
                        detectors.DETECTORS._entries["ssd"].__class__("counting", build, "counts its builds"))
    forget_shared_models(lambda key: key[0] in ("vsa-detector", "vsa-describer"))
    try:
        from pictrieve.graphs.vsa import build_vsa_graph

        describers = []
        for _ in range(2):
            graph = build_vsa_graph(None, llm=RunnableLambda(no_llm), detector="counting:x")
            out = graph.invoke({"image": photo, "question": "What is this?"}, context=CONTEXT)
            assert [r["label"] for r in out["regions"]] == ["dog"]
            from pictrieve.agents.vsa.parts import make_parts

            describers.append(make_parts(llm=RunnableLambda(no_llm)).vlm())
        assert made == ["x"]  # the second run reused the detector
        assert describers[0] is describers[1]  # and the describer
    finally:
        forget_shared_models(lambda key: key[0] in ("vsa-detector", "vsa-describer"))


def test_slow_steps_are_announced_as_they_start(photo):
    """``pictrieve ask`` says "describing 1 region(s) ..." before the describer runs, not only after."""
    from pictrieve.agents.vsa.progress import STREAM_MODES, follow_run, start_line

    events = []
    graph = _graph(None, _Labelled("dog"))
    state = follow_run(graph.stream({"image": photo, "question": "What is this?"}, context=CONTEXT,
                                    stream_mode=STREAM_MODES),
                       lambda node, change: events.append(("done", node)),
                       lambda node, given: events.append(("start", node, start_line(node, given))))
    assert state["answer"].startswith("The photo shows a dog.")
    starts = [e for e in events if e[0] == "start"]
    assert ("start", "describe", "describing 1 region(s) (the describer loads on the process's first run) ...") in starts
    assert events.index(("start", "describe", starts[[e[1] for e in starts].index("describe")][2])) < events.index(
        ("done", "describe"))
