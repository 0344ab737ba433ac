"""The shared plumbing of model families: registries, device choice, model cache, scoped seeding."""

from __future__ import annotations

import inspect
import threading
import time

import pytest
import torch

from pictrieve.tools.core.devices import DeviceUnavailableError, pick_device
from pictrieve.tools.models.embedders.factory import (
    EMBEDDERS,
    UnknownEmbedderError,
    available_embedders,
    check_embedder_name,
    create_embedder,
    register_embedder,
)
from pictrieve.tools.core.model_cache import forget_shared_models, is_shared, shared_model
from pictrieve.tools.core.registry import Registry, UnknownNameError, load_target, split_name
from pictrieve.tools.core.seeding import torch_seeded
from pictrieve.tools.models.detectors import DETECTORS, UnknownDetectorError, available_detectors, create_detector
from pictrieve.tools.models.object_detector import ObjectDetector
from pictrieve.tools.models.protocols import Detector

def _lazy_builder(spec, device=None):
    return ("lazy", spec, device)


# -- registries ------------------------------------------------------------------------------------


def test_embedders_are_one_registry(monkeypatch):
    monkeypatch.setattr(EMBEDDERS, "_entries", dict(EMBEDDERS._entries))  # undo the registration after
    calls = []

    def build(spec, device=None):
        calls.append((spec, device))
        return f"embedder {spec}"

    register_embedder("mine", build, "a test family")
    assert "mine" in available_embedders() and "mine" in EMBEDDERS.families()
    assert check_embedder_name(" mine:big ") == "mine:big"
    assert create_embedder("mine:big", device="cpu") == "embedder big"
    assert calls == [("big", "cpu")]
    register_embedder("lazy", f"{__name__}:_lazy_builder")  # "module:attr" builders load on first use
    assert create_embedder("lazy:ViT-B-32/tag") == ("lazy", "ViT-B-32/tag", None)
    with pytest.raises(UnknownEmbedderError) as caught:
        create_embedder("clipz:ViT")
    assert isinstance(caught.value, UnknownNameError) and "open_clip" in str(caught.value)
    assert "--" not in str(caught.value)


def test_detectors_registry_and_protocol():
    assert "offline" in available_detectors() and "offline" in DETECTORS
    with pytest.raises(UnknownDetectorError, match="known: .*offline"):
        create_detector("yolo-nope")
    # The offline detector speaks the Detector protocol: name, keyword-only labels and min_score.
    assert ObjectDetector.name == "offline"
    parameters = inspect.signature(ObjectDetector.detect).parameters
    assert parameters["labels"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["min_score"].kind is inspect.Parameter.KEYWORD_ONLY


def test_one_loader_reads_every_module_attribute_string():
    """Registry builders, a method's parts and the CLI's commands are all loaded by ``load_target``:
    dotted attributes work in a registry as in a method, and a malformed string says what is expected."""
    from pictrieve.agents.method import MethodDefinitionError
    from pictrieve.agents.method import load_target as load_method_part
    from pictrieve.cli.main import cli as cli_group

    assert load_target("pictrieve.tools.core.registry:Registry.create") is Registry.create
    assert load_target(split_name) is split_name  # anything else passes through
    things: Registry = Registry("thing")
    things.register("pair", "pictrieve.tools.core.registry:split_name")
    things.register("build", "pictrieve.tools.core.registry:Registry.check")
    assert things.create("pair:a:b") == ("a", "b")
    assert things.builder_for("build:x")[0] is Registry.check
    things.register("broken", "pictrieve.tools.core.registry")
    with pytest.raises(ValueError, match="not of the form 'module:attribute'"):
        things.create("broken")
    with pytest.raises(MethodDefinitionError, match="not of the form 'module:attribute'"):
        load_method_part("pictrieve.graphs.search")
    assert cli_group.get_command(None, "train-embedder").name == "train-embedder"


def test_offline_detector_follows_the_protocol(detector_cached):
    from PIL import Image

    detector = create_detector("offline", download=False, default_min_score=0.0)
    assert isinstance(detector, Detector)
    found = detector.detect(Image.new("RGB", (64, 48), "gray"), labels=["a cat"], min_score=0.0)
    assert all(0 <= d.box[0] <= d.box[2] <= 64 and 0 <= d.box[1] <= d.box[3] <= 48 for d in found)
    assert detector.detect(Image.new("RGB", (64, 48), "gray"), min_score=1.01) == []


# -- devices -----------------------------------------------------------------------------------------


def test_pick_device():
    assert pick_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu") == "cpu" and pick_device(" cpu ") == "cpu"
    with pytest.raises(DeviceUnavailableError, match="not a torch device"):
        pick_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailableError, match="device='cpu'"):
            pick_device("cuda:0")


# -- the model cache -----------------------------------------------------------------------------


def test_shared_model_builds_once_under_concurrency():
    key = ("test-plumbing", "once")
    forget_shared_models(lambda k: k == key)
    builds = []

    def build():
        builds.append(1)
        time.sleep(0.05)
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(shared_model(key, build))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len({id(r) for r in results}) == 1 and is_shared(key)
    assert forget_shared_models(lambda k: k == key) == 1 and not is_shared(key)


def test_different_models_load_in_parallel_and_failures_are_not_cached():
    first_started, second_built = threading.Event(), threading.Event()
    first_waited_out: list[bool] = []

    def slow_first():
        # Still building until the second key is built: a single global lock would keep the second waiting for
        # this build, which would then give up after 10 s (no timing of the machine, just an order).
        first_started.set()
        first_waited_out.append(not second_built.wait(10))
        return "first"

    forget_shared_models(lambda k: k[0] == "test-plumbing")
    loader = threading.Thread(target=lambda: shared_model(("test-plumbing", "first"), slow_first))
    loader.start()
    assert first_started.wait(10)
    value = shared_model(("test-plumbing", "second"), lambda: "second")
    second_built.set()
    loader.join()
    assert value == "second" and first_waited_out == [False]
    assert shared_model(("test-plumbing", "first"), lambda: "rebuilt") == "first"

    def broken():
        raise RuntimeError("no weights")

    with pytest.raises(RuntimeError):
        shared_model(("test-plumbing", "broken"), broken)
    assert shared_model(("test-plumbing", "broken"), lambda: "fixed") == "fixed"
    forget_shared_models(lambda k: k[0] == "test-plumbing")


# -- scoped seeding -------------------------------------------------------------------------------


def test_torch_seeded_is_repeatable_and_leaves_the_global_generator_alone():
    with torch_seeded(7):
        first = torch.rand(3)
    with torch_seeded(7):
        second = torch.rand(3)
    assert torch.equal(first, second)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    before = torch.rand(2)
    with torch_seeded(7):
        torch.rand(100)
    after = torch.rand(2)
    assert torch.equal(torch.cat([before, after]), expected)  # the block consumed nothing outside
    state = torch.random.get_rng_state()
    with torch_seeded(None):  # no seed: the block runs on the global generator, untouched
        pass
    assert torch.equal(state, torch.random.get_rng_state())
