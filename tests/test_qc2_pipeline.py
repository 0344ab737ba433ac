"""QC2 on a real (tiny) gallery: annotate, train, load, search, CLI; random weights, no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from helpers import make_photo  # noqa: E402
from helpers.qc2_fakes import one_thread  # noqa: E402,F401  (autouse)

from pictrieve.agents.qc2.annotation import (  # noqa: E402
    annotate_gallery,
    build_training_data,
    metadata_key,
)
from pictrieve.agents.qc2.pipeline import load_for_gallery, train_on_gallery  # noqa: E402
from pictrieve.agents.qc2.errors import GalleryMismatchError, QC2ModelError  # noqa: E402
from pictrieve.agents.qc2.training import QC2TrainConfig  # noqa: E402
from pictrieve.graphs.qc2 import quality_search  # noqa: E402
from pictrieve.tools.models.quality_scorers import create_quality_scorer  # noqa: E402
from pictrieve.vectorstore.gallery import Gallery  # noqa: E402

CAPTIONS = ["a black dog runs on the grass", "a brown dog jumps", "two children play on the beach",
            "a man rides a bike", "a girl in a pink dress", "a white dog swims in a lake"]


@pytest.fixture
def annotated_gallery(tmp_path, tiny_clip_embedder):
    photos = tmp_path / "photos"
    lines = []
    for i, caption in enumerate(CAPTIONS):
        make_photo(photos / f"p{i}.png", seed=i, size=(64, 48))
        lines.append(json.dumps({"image": f"p{i}.png", "captions": [caption, caption.replace("a ", "one ", 1)]}))
    (photos / "captions.jsonl").write_text("\n".join(lines) + "\n")
    gallery = Gallery.open(tmp_path / "gallery", tiny_clip_embedder)
    gallery.add(photos, progress=False)
    reports = annotate_gallery(gallery, [create_quality_scorer("brisque")], progress=False)
    assert [(r.score, r.scored, r.already) for r in reports] == [("relevance", 6, 0), ("brisque", 6, 0)]
    return gallery, photos


def test_annotation_stores_scores_and_resumes(annotated_gallery, tiny_clip_embedder):
    gallery, _ = annotated_gallery
    items = list(gallery.items())
    item = items[0]
    relevance = item.metadata[metadata_key("relevance")]
    image = gallery.embeddings([item.id])[0]
    expected = tiny_clip_embedder.embed_texts(item.captions) @ image
    assert relevance == pytest.approx(expected.tolist(), abs=1e-5)
    assert all(isinstance(i.metadata[metadata_key("brisque")], float) for i in items)
    again = annotate_gallery(gallery, [create_quality_scorer("brisque")], progress=False)
    assert [(r.scored, r.already) for r in again] == [(0, 6), (0, 6)]


def test_uncaptioned_images_get_a_generated_caption(tmp_path, tiny_clip_embedder):
    photos = tmp_path / "photos"
    for i in range(3):
        make_photo(photos / f"p{i}.png", seed=i, size=(64, 48))
    gallery = Gallery.open(tmp_path / "gallery", tiny_clip_embedder)
    gallery.add(photos, progress=False)
    seen = []

    def captioner(images):
        seen.append(len(images))
        return [f"a photo number {len(seen)}-{i}" for i in range(len(images))]

    reports = annotate_gallery(gallery, [], captioner=captioner, batch_size=2, progress=False)
    assert [(r.score, r.scored) for r in reports] == [("caption", 3), ("relevance", 3)] and seen == [2, 1]
    items = list(gallery.items())
    assert all(i.metadata["qc2_caption"].startswith("a photo number") for i in items)
    assert all(len(i.metadata["qc2_relevance"]) == 1 for i in items)
    again = annotate_gallery(gallery, [], captioner=captioner, progress=False)
    assert again[0].scored == 0 and seen == [2, 1]


def test_training_data_levels_and_missing_axis(annotated_gallery):
    gallery, _ = annotated_gallery
    items = list(gallery.items())
    examples, axes = build_training_data(items, ["brisque"])
    assert [a.axis for a in axes] == ["Relevance", "Quality"] and axes[1].higher_is_better is False
    assert len(examples) == 12
    # the best (lowest) BRISQUE image gets High quality on both of its captions
    best = min(items, key=lambda i: i.metadata["qc2_brisque"])
    assert {ex.levels[1] for ex in examples if ex.caption in best.captions} == {"High"}
    with pytest.raises(QC2ModelError, match="annotate --gallery GALLERY --scorer laion_aesthetic"):
        build_training_data(items, ["laion_aesthetic"])


def test_train_save_search_and_refuse_changed_gallery(annotated_gallery, tiny_checkpoint, tmp_path):
    gallery, photos = annotated_gallery
    config = QC2TrainConfig(epochs=2, batch_size=4, lora_rank=4, train_layers=1)
    bundle, report, directory = train_on_gallery(gallery, base_model=tiny_checkpoint, config=config, progress=False)
    assert directory == tmp_path / "gallery" / "qc2" and report.examples == 12
    model = load_for_gallery(gallery)
    result = quality_search(gallery, "a dog", {"relevance": "high", "quality": "low"}, model=model, k=3,
                            samples=2, seed=0)
    assert result.levels == {"Relevance": "High", "Quality": "Low"}
    assert len(result.completions) == 2 and all(c.startswith("a dog") for c in result.completions)
    assert [h.rank for h in result.hits] == [1, 2, 3]
    with pytest.raises(QC2ModelError, match="no 'aesthetic' axis .*Relevance, Quality"):
        quality_search(gallery, "a dog", {"aesthetic": "high"}, model=model)
    make_photo(photos / "new.png", seed=99, size=(64, 48))
    gallery.add(photos, progress=False)
    with pytest.raises(GalleryMismatchError):
        load_for_gallery(gallery)


def test_cli_annotate_train_search(annotated_gallery, tiny_checkpoint):
    from pictrieve.cli.quality import quality

    gallery, _ = annotated_gallery
    runner = CliRunner()
    out = runner.invoke(quality, ["annotate", "--gallery", gallery.location, "--scorer", "brisque"])
    assert out.exit_code == 0, out.output
    assert "brisque: 0 scored, 6 already had it" in out.output and "technical quality" in out.output
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = runner.invoke(quality, ["train", "--gallery", gallery.location, "--base-model", tiny_checkpoint,
                                      "--epochs", "1", "--batch-size", "4", "--train-layers", "1", "--lora-rank", "4"])
        assert out.exit_code == 0, out.output
        assert "Quality (brisque): Low/Medium/High cut at" in out.output
        out = runner.invoke(quality, ["search", "a dog", "--gallery", gallery.location, "--relevance", "high",
                                      "--quality", "low", "-k", "2", "--seed", "1", "--json"])
        assert out.exit_code == 0, out.output
    # no library deprecation reaches the person (issue 19.10: peft's probe of a deprecated transformers property)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]
    payload = json.loads(out.stdout)
    assert payload["completions"][0].startswith("a dog") and len(payload["hits"]) == 2
    # the console command ends once its results are out, without Python's teardown (issue 40.4: 4-6 s of silence)
    program = ("import sys\nimport pictrieve.cli.main as entry\n"
               "class Teardown:\n    def __del__(self): print('teardown ran', flush=True)\n"
               "kept = Teardown()\nsys.argv = ['pictrieve', *sys.argv[1:]]\nentry.main()\n")
    done = subprocess.run([sys.executable, "-c", program, "quality", "search", "a dog", "--gallery", gallery.location,
                           "-k", "2", "--seed", "1", "--json"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"] and "teardown ran" not in done.stdout
    # it was silent for 19 s: each step says what it loads or does, on stderr, as it starts
    said = [line.split("] ", 1)[1] for line in out.stderr.splitlines() if line.startswith("[")]
    assert said[0] == "opening the gallery and loading the QC2 method ..." and said[-1] == "done", out.stderr
    assert any(line.startswith(f"loading the QC2 model in {gallery.location}/qc2 (") for line in said), out.stderr
    assert "completing 'a dog' (1 sample from" in out.stderr and "searching 6 photos ..." in out.stderr


def test_the_qc2_model_is_loaded_once_per_process_until_it_is_saved_again(annotated_gallery, tiny_checkpoint):
    from pictrieve.agents.qc2.bundle import BUNDLE_FILE

    gallery, _ = annotated_gallery
    config = QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1)
    train_on_gallery(gallery, base_model=tiny_checkpoint, config=config, progress=False)
    first = load_for_gallery(gallery)
    assert load_for_gallery(gallery) is first  # a second search (or a server's next one) loads nothing
    saved = Path(gallery.location) / "qc2" / BUNDLE_FILE
    os.utime(saved, ns=(saved.stat().st_atime_ns, saved.stat().st_mtime_ns + 1_000_000))  # saved again
    assert load_for_gallery(gallery) is not first


def test_graph_takes_run_settings_from_context(annotated_gallery, tiny_checkpoint):
    from pictrieve.agents.qc2.nodes import QC2Settings
    from pictrieve.graphs.qc2 import build_qc2_graph
    from pictrieve.agents.settings import SettingsError

    assert QC2Settings.coerce({"temperature": 0.2}).sampling().temperature == 0.2
    assert QC2Settings().sampling().top_k == 50  # the paper's sampling top-k, named sample_top_k here
    with pytest.raises(SettingsError, match="samples"):
        QC2Settings(samples=0)
    gallery, _ = annotated_gallery
    config = QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1)
    bundle, _, _ = train_on_gallery(gallery, base_model=tiny_checkpoint, config=config, save=False, progress=False)
    graph = build_qc2_graph(gallery, qc2_model=bundle)
    assert graph.checkpointer is None and set(graph.get_input_jsonschema()["properties"]) == {"query", "levels"}
    state = graph.invoke({"query": "a dog", "levels": {"quality": "high"}},
                         context={"k": 2, "samples": 3, "seed": 0, "max_new_tokens": 1})
    assert state["resolved_levels"] == {"Relevance": "Medium", "Quality": "High"}
    assert len(state["completions"]) == 3 and len(state["hits"]) == 2
    longest_token = max(len(bundle.tokenizer.decode([i])) for i in range(len(bundle.tokenizer)))
    for text in state["completions"]:  # one new token at most
        assert text.startswith("a dog") and len(text) <= len("a dog") + longest_token
    # several completions are fused by RRF over each completion's own ranking
    from pictrieve.vectorstore.fusion import fuse_hits

    expected = fuse_hits([gallery.search_text(text, k=50) for text in state["completions"]], k=2)
    assert [(h.id, h.rank) for h in state["hits"]] == [(h.id, h.rank) for h in expected]
    assert [h.score for h in state["hits"]] == pytest.approx([h.score for h in expected])
    # a seeded run leaves the process's random generator alone (concurrent served runs)
    before = torch.get_rng_state()
    graph.invoke({"query": "a dog"}, context={"k": 2, "seed": 123, "max_new_tokens": 1})
    assert torch.equal(before, torch.get_rng_state())


def test_cli_train_five_levels_random_full_fine_tune_to_out(annotated_gallery, tiny_checkpoint, tmp_path):
    """`quality train --levels 5 --random-levels --lora-rank 0 --out DIR`: five levels, the FT baseline,
    a full fine-tune of the top layer saved where asked, and loaded back with its levels and weights."""
    from pictrieve.cli.quality import quality

    gallery, _ = annotated_gallery
    out_dir = tmp_path / "qc2-random"
    out = CliRunner().invoke(quality, ["train", "--gallery", gallery.location, "--base-model", tiny_checkpoint,
                                       "--levels", "5", "--random-levels", "--lora-rank", "0", "--out", str(out_dir),
                                       "--epochs", "1", "--batch-size", "4", "--train-layers", "1"])
    assert out.exit_code == 0, out.output
    assert not (Path(gallery.location) / "qc2").exists()  # saved only where asked
    model = load_for_gallery(gallery, out_dir)
    assert [len(axis.levels) for axis in model.axes] == [5, 5]
    assert model.training["random_levels"] is True and model.training["config"]["lora_rank"] == 0
    assert (out_dir / "model").is_dir() and not (out_dir / "adapter").exists()  # full weights, not LoRA
    trained = dict(model.model.named_parameters())
    from pictrieve.tools.models.causal_lm import load_causal_lm

    base, _ = load_causal_lm(tiny_checkpoint, device="cpu")
    changed = [name for name, p in base.named_parameters() if not torch.equal(p, trained[name])]
    assert changed and all(".layers.1." in name for name in changed)  # only the top layer learned


def test_evaluation_retrains_when_the_training_config_differs(annotated_gallery, tiny_checkpoint, tmp_path):
    from pictrieve.evaluation.quality import _reuse_or_train

    gallery, _ = annotated_gallery
    small = QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1)
    first, info = _reuse_or_train(gallery, tmp_path / "m", small, False, tiny_checkpoint, "brisque", False)
    assert info["reused"] is False
    _, again = _reuse_or_train(gallery, tmp_path / "m", small, False, tiny_checkpoint, "brisque", False)
    assert again["reused"] is True
    other = QC2TrainConfig(epochs=1, batch_size=4, lora_rank=2, train_layers=1)
    _, changed = _reuse_or_train(gallery, tmp_path / "m", other, False, tiny_checkpoint, "brisque", False)
    assert changed["reused"] is False and changed["config"]["lora_rank"] == 2
