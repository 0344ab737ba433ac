"""Quality scorers: the LAION aesthetic head from ../shared/models, its fetcher, BRISQUE, the registry."""

from __future__ import annotations

import io
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFilter

from helpers import REPO_ROOT
from pictrieve.tools.models import quality_scorers as qs

LAION_WEIGHTS = REPO_ROOT.parent / "shared" / "models" / "laion-aesthetic-vit-l-14-linear-mse.pth"


@pytest.fixture
def laion_weights() -> Path:
    if not LAION_WEIGHTS.is_file():
        pytest.skip(f"LAION aesthetic weights not found at {LAION_WEIGHTS}")
    return LAION_WEIGHTS


def test_laion_head_loads_and_gives_one_score_per_embedding(laion_weights):
    scorer = qs.LaionAestheticScorer(weights=laion_weights)
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(5, 768)).astype(np.float32)
    scores = scorer.score_embeddings(embeddings)
    assert scores.shape == (5,) and np.all(np.isfinite(scores))
    # the head normalises its input, so the scale of an embedding does not matter
    assert np.allclose(scorer.score_embeddings(embeddings * 7.0), scores, atol=1e-5)
    assert len(set(np.round(scores, 4))) == 5
    with pytest.raises(ValueError, match="768"):
        scorer.score_embeddings(np.zeros((2, 512)))
    assert scorer.accepts_embedder("open_clip:ViT-L-14/openai") and not scorer.accepts_embedder("offline")


def test_laion_fetcher_caches_atomically_and_checks_the_hash(laion_weights, tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    payload = laion_weights.read_bytes()
    calls = []

    def fake_urlopen(url, timeout):
        calls.append(url)
        return io.BytesIO(payload)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    path = qs.fetch_laion_aesthetic_weights()
    assert path == tmp_path / "laion-aesthetic" / qs.LAION_AESTHETIC_FILE and path.read_bytes() == payload
    assert calls == [qs.LAION_AESTHETIC_URL]
    assert qs.fetch_laion_aesthetic_weights() == path and len(calls) == 1  # cached: no second download
    assert not list(path.parent.glob("*.part"))

    path.unlink()
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"not the weights"))
    with pytest.raises(qs.QualityScorerError, match="SHA-256"):
        qs.fetch_laion_aesthetic_weights()
    assert not path.exists()
    with pytest.raises(qs.QualityScorerError, match="not cached"):
        qs.fetch_laion_aesthetic_weights(download=False)


def test_brisque_one_score_per_image_and_blur_scores_worse(flickr_dir):
    scorer = qs.create_quality_scorer("brisque")
    assert scorer.axis == "Quality" and scorer.higher_is_better is False and "technical" in scorer.description
    sharp = Image.open(sorted((flickr_dir / "images").glob("*.jpg"))[0]).convert("RGB")
    blurred = sharp.filter(ImageFilter.GaussianBlur(3))
    scores = scorer.score_images([sharp, blurred, sharp])
    assert scores.shape == (3,) and scores[0] == pytest.approx(scores[2])
    assert scores[1] > scores[0]  # heavy blur is a distortion: higher (worse) BRISQUE
    with pytest.raises(ValueError, match="too small"):
        scorer.score_images([Image.new("RGB", (8, 8))])


def test_registry():
    assert {"brisque", "laion_aesthetic"} <= set(qs.available_quality_scorers())
    with pytest.raises(qs.QualityScorerError, match="known: brisque, laion_aesthetic"):
        qs.create_quality_scorer("sharpness")
    assert qs.default_quality_scorer_name("open_clip:ViT-L-14/openai") == "laion_aesthetic"
    assert qs.default_quality_scorer_name("offline") == "brisque"


def test_qc2_prompt_axis_and_orientation_of_each_scorer():
    """BRISQUE is 'Quality' with lower = better, the LAION head 'Aesthetic' with higher = better:
    a wrong orientation would train QC2 to call the worst images high quality."""
    from pictrieve.agents.qc2.annotation import scorer_axis

    assert scorer_axis("brisque") == ("Quality", False)
    assert scorer_axis("laion_aesthetic") == ("Aesthetic", True)
    assert scorer_axis("my_score") == ("My Score", True)  # unknown keys: a readable default
