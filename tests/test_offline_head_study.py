"""benchmarks/offline_head_study.py's parts on tiny synthetic data: the hard-negative weights, the detector evidence
a caption gets from a photo, the 500-photo subset recall, and that its training loop learns (no packaged model)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.benchmark_scripts import benchmark_script

torch = pytest.importorskip("torch")
study = benchmark_script("offline_head_study", "offline_head_sweep")


def test_hard_negative_weights_leave_positives_and_average_one_over_negatives():
    logits = torch.tensor([[5.0, 1.0, 3.0, -2.0], [0.5, 4.0, 0.0, 2.5]])
    positive = torch.tensor([[True, False, False, False], [False, True, False, False]])
    assert torch.equal(study.weighted_logits(logits, positive, 0.0), logits)
    weighted = study.weighted_logits(logits, positive, 1.0)
    assert torch.equal(weighted[positive], logits[positive])
    weights = (weighted - logits)[~positive].reshape(2, 3).exp()
    assert torch.allclose(weights.mean(1), torch.ones(2))
    # the hardest negative (highest logit) weighs most, and the loss grows
    assert weights[0].argmax() == 1 and weights[1].argmax() == 2
    target = torch.tensor([0, 1])
    assert torch.nn.functional.cross_entropy(weighted, target) > torch.nn.functional.cross_entropy(logits, target)


def test_evidence_is_the_named_things_detector_score():
    classes = ["person", "dog", "bicycle"]
    photos = np.array([[0.9, 0.8, 0.0], [0.0, 0.6, 0.0], [0.7, 0.0, 0.4]], np.float32)
    texts = ["A dog runs on the grass .", "A man rides a bike .", "The sun sets over the sea ."]
    least = study.evidence(texts, photos, classes, "min")
    np.testing.assert_allclose(least[0], [0.8, 0.6, 0.0])
    np.testing.assert_allclose(least[1], [0.0, 0.0, 0.4])  # person and bicycle: the lower of the two
    np.testing.assert_allclose(study.evidence(texts, photos, classes, "mean")[1], [0.45, 0.0, 0.55])
    assert not least[2].any()  # names no COCO thing: the embedder ranks it alone


def test_subset_recall_is_recall_at_ten_of_five_hundred_photo_galleries():
    rng = np.random.default_rng(0)
    n = 600
    perfect = np.repeat(np.eye(n), 5, axis=0) + 0.01 * rng.random((5 * n, n))
    assert study.subset_recall(perfect) == 1.0
    noise = rng.random((5 * n, n))
    assert abs(study.subset_recall(noise) - 10 / 500) < 0.01  # chance at flickr8k-dev's size, not 10/600


def test_training_learns_and_the_text_adapter_starts_as_the_identity():
    rng = np.random.default_rng(0)
    n, d = 200, 32
    meaning = rng.standard_normal((n, d)).astype(np.float32)
    caps = meaning[:, None] + 0.3 * rng.standard_normal((n, 5, d)).astype(np.float32)
    caps /= np.linalg.norm(caps, axis=-1, keepdims=True)
    feats = (meaning @ rng.standard_normal((d, 48)).astype(np.float32))[:, None]
    feats = feats + 0.1 * rng.standard_normal((n, 1, 48)).astype(np.float32)
    splits = np.array(["dev"] * 40 + ["train"] * 160)
    data = study.Data(feats, np.zeros((n, d), np.float32), caps, splits, None)
    recipe = study.Recipe(hidden=64, epochs=30, batch_size=32, lr=3e-3, dropout=0.0, feature_noise=0.0,
                          text_adapter=True)
    untrained = study.Model(recipe, 48, d)
    np.testing.assert_allclose(untrained.encode_text(torch.from_numpy(caps[0])).detach().numpy(), caps[0], atol=1e-6)
    trained = study.train(data, np.flatnonzero(splits == "train"), recipe, log=lambda _: None)
    held = np.flatnonzero(splits == "dev")
    scores = trained.texts(caps[held].reshape(-1, d)) @ trained.images(feats[held], None).T
    assert study.metrics(scores)["recall@1"] > 0.5  # 40 photos: chance is 0.025
