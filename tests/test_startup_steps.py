"""VisRet and NEEDLE start up in view: `pictrieve search --method` says what it does from its first second.

Every run used to sit 19-25 s silent before its first step (importing chromadb and LangGraph, opening the
gallery, making the visualizers) and again inside the step that loaded the image model. Now a line comes
before each of those, and each labelled model a step loads is a line of its own. The order is checked
against Python's own ``-X importtime`` lines in the same stderr, so no timing window is involved.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading

import pytest

from helpers import make_photo
from helpers.cli import CLI, run
from pictrieve.tools.core.model_cache import announcing_model_loads, forget_shared_models, shared_model

STEP = re.compile(r"^\[ *[\d.]+s\] (.*)$")
METHOD_STEPS = {"visret": ["rewrite...", "visualize...", "retrieve..."],
                "needle": ["refine...", "visualize...", "screen_guides...", "rank..."]}


@pytest.fixture(scope="module")
def offline_gallery(tmp_path_factory) -> tuple[str, str]:
    """(gallery, captioned folder) of four photos indexed with the offline default, as a user indexes."""
    root = tmp_path_factory.mktemp("startup")
    photos = root / "photos"
    rows = []
    for i in range(4):
        make_photo(photos / f"{i}.png", seed=300 + i)
        rows.append(json.dumps({"image": f"{i}.png", "captions": [f"a photo of thing number {i}"]}))
    (photos / "captions.jsonl").write_text("\n".join(rows) + "\n")
    gallery = str(root / "g")
    indexed = run("index", str(photos), "-g", gallery)
    assert indexed.returncode == 0, indexed.stderr
    return gallery, str(photos)


def _events(stderr: str) -> list[str]:
    """The step lines (their text) and the imports of chromadb and langgraph.graph finishing, in order."""
    events = []
    for line in stderr.splitlines():
        step = STEP.match(line)
        if step:
            events.append(step.group(1))
        elif re.match(r"import time:.*\|\s+(chromadb|langgraph\.graph)$", line):  # at any depth
            name = "imported " + line.rsplit("|", 1)[1].strip()
            if name not in events:
                events.append(name)
    return events


@pytest.mark.parametrize("method", ["visret", "needle"])
def test_each_step_is_a_line_before_it_runs(offline_gallery, method):
    gallery, photos = offline_gallery
    done = subprocess.run([*CLI[:1], "-X", "importtime", *CLI[1:], "search", "a photo of thing number 2", "-g", gallery,
                           "--method", method, "--visualizer", f"exemplar:{photos}", "-k", "2"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    events = _events(done.stderr)
    order = [f"opening the gallery {gallery} ...", "imported chromadb", f"loading {method} ...",
             "imported langgraph.graph", *METHOD_STEPS[method]]
    positions = [events.index(event) if event in events else -1 for event in order]
    # Before the slow imports, a line says what is under way; then each graph step as it starts.
    assert -1 not in positions and positions == sorted(positions), events
    assert events[0] == order[0], events  # the very first thing said
    # The image model loads inside the last step, after its line, and says so.
    loads = [i for i, event in enumerate(events) if event.startswith("  loading EfficientNet-Lite0 on ")]
    assert loads and loads[0] > positions[-1], events
    assert "guide pictures:" in done.stdout and "results:" in done.stdout


def test_a_method_that_takes_no_query_is_still_one_line(offline_gallery):
    """The check moved from option parsing to the run (reading a method's input imports its graph): still a
    usage error in one line, before any model loads."""
    gallery, _ = offline_gallery
    result = run("search", "a dog", "-g", gallery, "--method", "plugir")
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and "--method plugir takes no text query (its input: description)" in errors[0]
    assert "loading EfficientNet" not in result.stderr and "rewrite..." not in result.stderr


def test_a_labelled_model_load_is_announced_once_in_any_thread():
    forget_shared_models(lambda key: key[0] == "test-announced")
    heard: list[str] = []
    shared_model(("test-announced", "quiet"), object, label="not heard: nobody listens")
    with announcing_model_loads(heard.append):
        shared_model(("test-announced", 1), object, label="model one")
        shared_model(("test-announced", 1), object, label="model one")  # cached: nothing to say
        shared_model(("test-announced", 2), object)  # unlabelled: quick, says nothing
        worker = threading.Thread(target=shared_model, args=(("test-announced", 3), object, "model three"))
        worker.start()
        worker.join()
    shared_model(("test-announced", 4), object, label="not heard: the block ended")
    assert heard == ["model one", "model three"]
    forget_shared_models(lambda key: key[0] == "test-announced")


# ---------------------------------------------------------------------- ask's region step


def test_the_describer_sees_what_the_torch_classifier_saw():
    """The region describer asks the trunk on its runtime (ONNX Runtime on a CPU) with a numpy centre crop:
    the same crop and, to float rounding, the same class probabilities as the torch classifier it used."""
    import numpy as np
    from PIL import Image

    from pictrieve.tools.models.embedders.backbone import center_crop_array
    from pictrieve.tools.models.imagenet_classifier import preprocess_image
    from pictrieve.tools.models.vlm import OfflineRegionCaptioner, offline_describer

    skimage_data = pytest.importorskip("skimage.data")
    captioner = OfflineRegionCaptioner()
    labels = offline_describer().labels
    for photo in (Image.fromarray(skimage_data.chelsea()), Image.fromarray(skimage_data.astronaut())):
        np.testing.assert_allclose(center_crop_array(photo), preprocess_image(photo).numpy(), atol=1e-6)
        torch_probs = labels.classifier.logits(preprocess_image(photo)[None]).softmax(-1)[0].numpy()
        classes = captioner._classes(photo)
        assert [i for i, _ in classes[:5]] == list(np.argsort(-torch_probs)[:5])
        np.testing.assert_allclose([p for _, p in classes], torch_probs[[i for i, _ in classes]], atol=1e-4)


def test_describing_a_region_imports_no_torch():
    """Once the trunk's export is cached (the first use of any process), ``ask``'s describe step runs on
    ONNX Runtime and numpy: torch and timm (8 s of CPU, 20 s on a busy machine) stay out of every later run."""
    from pictrieve.tools.models.embedders.backbone import trunk_export
    from pictrieve.tools.models.onnx_runtime import try_onnx_model

    assert try_onnx_model(trunk_export()) is not None  # exported into the session's cache if it was not there
    code = (
        "from PIL import Image\n"
        "from pictrieve.tools.models.vlm import OfflineRegionCaptioner\n"
        "print(OfflineRegionCaptioner().describe_region(Image.new('RGB', (64, 48), 'red'), 'image'))\n"
        "import sys\n"
        "print(sorted(m for m in ('torch', 'timm', 'torchvision', 'open_clip') if m in sys.modules))\n"
    )
    done = subprocess.run([*CLI[:1], "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "'description'" in done.stdout and done.stdout.strip().splitlines()[-1] == "[]", done.stdout
