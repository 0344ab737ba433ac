"""The ImageNet class names ship with the package: equal to open_clip's and torchvision's lists, and read
without importing either (open_clip with torchvision cost 3.3 s of every new process that embedded a photo,
16 s on a busy machine, only for these strings)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pictrieve.tools.models.imagenet_names import imagenet_categories, imagenet_readable_names

HEAVY = ("open_clip", "torchvision", "torch", "timm", "transformers")


def test_the_shipped_readable_names_are_open_clips():
    zero_shot = pytest.importorskip("open_clip.zero_shot_metadata")
    assert imagenet_readable_names() == tuple(zero_shot.IMAGENET_CLASSNAMES)


def test_the_shipped_categories_are_torchvisions():
    models = pytest.importorskip("torchvision.models")
    assert imagenet_categories() == tuple(models.EfficientNet_B0_Weights.IMAGENET1K_V1.meta["categories"])


def _modules_after(code: str) -> dict[str, bool]:
    """Which of :data:`HEAVY` a new Python process (the session's cache and home) has imported after ``code``."""
    script = code + f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_class_name_matrix_is_built_without_open_clip_or_torch():
    """The offline embedders' class sentences (names, shipped matrix and its key) need numpy only."""
    code = (
        "from pictrieve.tools.models.embedders.offline import OfflineEmbedder, class_embeddings_key\n"
        "e = OfflineEmbedder(device='cpu')\n"
        "assert len(e.class_names) == 1000 and e.class_embeddings.shape == (1000, 384)\n"
        "e.description_mean\n"
        "class_embeddings_key(e.recipe.class_template)\n"
    )
    assert _modules_after(code) == dict.fromkeys(HEAVY, False)


def test_embedding_a_photo_with_the_offline_default_never_imports_open_clip():
    """The offline default (trained head with its label half) embeds a photo; open_clip stays out (torch
    and timm load only to run or export the trunk, never for the names)."""
    code = (
        "from PIL import Image\n"
        "from pictrieve.tools.models.embedders.factory import create_embedder\n"
        "e = create_embedder('offline', device='cpu')\n"
        "assert e.embed_images([Image.new('RGB', (64, 48), 'red')]).shape[0] == 1\n"
    )
    loaded = _modules_after(code)
    assert not loaded["open_clip"] and not loaded["transformers"], loaded
