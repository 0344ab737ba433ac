"""QC2 long-run machinery on tiny models: resumable training, the disk trunk cache, the level-usage
check, and training on a captioned folder that is not the searched gallery."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from helpers import make_photo  # noqa: E402
from helpers.qc2_fakes import AXES, one_thread  # noqa: E402,F401  (autouse)
from helpers.qc2_fakes import examples as _examples  # noqa: E402
from helpers.qc2_fakes import load_tiny as _load  # noqa: E402

from pictrieve.agents.qc2 import checkpoints  # noqa: E402
from pictrieve.agents.qc2.level_check import level_usage, level_variants, opposite_level, separation  # noqa: E402
from pictrieve.agents.qc2.levels import AxisLevels  # noqa: E402
from pictrieve.agents.qc2.prompt_format import QC2Example  # noqa: E402
from pictrieve.agents.qc2.training import QC2TrainConfig, train_completion_model  # noqa: E402

CONFIG = dict(epochs=3, batch_size=4, learning_rate=2e-2, warmup_steps=1, lora_rank=4, train_layers=1)


def _trainable(model):
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def test_interrupted_training_resumes_to_the_same_weights(tiny_checkpoint, tmp_path):
    """Stopped after every single step (time budget 0) and re-run until done: the same weights,
    losses and optimizer path as one uninterrupted run (batch order and dropout RNG are restored)."""
    examples = _examples()
    config = QC2TrainConfig(**CONFIG)
    model, tokenizer = _load(tiny_checkpoint)
    whole, report, _ = train_completion_model(model, tokenizer, examples, AXES, config, progress=False,
                                              checkpoint_dir=tmp_path / "whole")
    assert report.steps == 6 and report.resumed_from_step == 0 and not report.stopped_early

    resumed_from = []
    for _ in range(10):
        model, tokenizer = _load(tiny_checkpoint)
        part, part_report, _ = train_completion_model(model, tokenizer, examples, AXES, config, progress=False,
                                                      checkpoint_dir=tmp_path / "parts", max_seconds=0)
        resumed_from.append(part_report.resumed_from_step)
        if not part_report.stopped_early:
            break
    assert resumed_from == [0, 1, 2, 3, 4, 5]
    assert part_report.steps == 6 and part_report.losses == pytest.approx(report.losses, abs=1e-6)
    expected, got = _trainable(whole), _trainable(part)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.allclose(expected[name], got[name], atol=1e-6), name


def test_checkpoint_every_steps_and_another_runs_checkpoint_is_not_resumed(tiny_checkpoint, tmp_path):
    examples = _examples()
    model, tokenizer = _load(tiny_checkpoint)
    train_completion_model(model, tokenizer, examples, AXES, QC2TrainConfig(**CONFIG), progress=False,
                           checkpoint_dir=tmp_path, checkpoint_every=1, max_seconds=0)
    saved = checkpoints.load_torch(tmp_path / checkpoints.STATE_FILE)
    assert saved["step"] == 1 and len(saved["losses"]) == 1 and saved["trainable"]
    assert not list(tmp_path.glob(".*.part"))  # temporary files were renamed into place
    # other hyper-parameters: a different run, trained from the start (and its checkpoint replaces this one)
    model, tokenizer = _load(tiny_checkpoint)
    other = QC2TrainConfig(**{**CONFIG, "learning_rate": 1e-2})
    _, report, _ = train_completion_model(model, tokenizer, examples, AXES, other, progress=False,
                                          checkpoint_dir=tmp_path)
    assert report.resumed_from_step == 0 and report.steps == 6
    # the finished run, run again, resumes at its end: no more steps, same losses
    model, tokenizer = _load(tiny_checkpoint)
    _, again, _ = train_completion_model(model, tokenizer, examples, AXES, other, progress=False,
                                         checkpoint_dir=tmp_path)
    assert again.resumed_from_step == 6 and again.losses == report.losses


def _workload(n: int) -> list[QC2Example]:
    """``n`` training captions (the tiny set repeated with every level pair)."""
    from helpers.qc2_fakes import CAPTIONS, LEVELS

    pairs = [QC2Example(c, lv) for c in CAPTIONS for lv in LEVELS]
    return (pairs * (n // len(pairs) + 1))[:n]


def _train_until_done(checkpoint, examples, config, folder, probes, max_seconds, *, runs=60):
    """Re-run the same budgeted training until it finishes: ``(last model, [(report, wall s), ...])``."""
    done = []
    for _ in range(runs):
        model, tokenizer = _load(checkpoint)
        start = time.perf_counter()
        model, report, _ = train_completion_model(model, tokenizer, examples, AXES, config, progress=False,
                                                  checkpoint_dir=folder, max_seconds=max_seconds, probes=probes)
        done.append((report, time.perf_counter() - start))
        if not report.stopped_early and not report.level_check_pending:
            return model, done
    raise AssertionError(f"not finished after {runs} runs")


def test_a_spent_budget_still_moves_each_run_one_unit_forward(tiny_checkpoint, tmp_path):
    """Budget 0: each run does one unit (a chunk of the frozen-trunk cache, a level check, a step) and
    stops, saving it; a check cut short is measured by the next run. Together the runs give the same
    model as one run without a budget. (Before, the whole cache and the first check ignored the budget.)"""
    examples, probes = _workload(150), {"check": _workload(30)}
    config = QC2TrainConfig(**{**CONFIG, "epochs": 1, "max_steps": 2, "lora_dropout": 0.0})
    model, tokenizer = _load(tiny_checkpoint)
    whole, reference, _ = train_completion_model(model, tokenizer, examples, AXES, config, progress=False,
                                                 checkpoint_dir=tmp_path / "whole", probes=probes)
    part, runs = _train_until_done(tiny_checkpoint, examples, config, tmp_path / "parts", probes, 0)
    chunks = -(-180 // checkpoints.CHUNK_SIZE)  # 150 training + 30 check captions
    # runs 1..chunks fill the cache (the last one is stopped at the check before training), then: the
    # check and step 1, step 2 (stopped at the final check), the final check
    assert [(r.steps, [row["epoch"] for row in r.probe_losses]) for r, _ in runs] == (
        [(0, [])] * chunks + [(1, [0]), (2, [0]), (2, [0, 1])])
    # every run but the last two stopped with steps left; the one whose final check was cut trained them all
    assert all(r.stopped_early for r, _ in runs[:-2]) and not any(r.stopped_early for r, _ in runs[-2:])
    assert runs[-2][0].level_check_pending and not runs[-1][0].level_check_pending
    assert runs[-1][0].losses == pytest.approx(reference.losses, abs=1e-6)
    assert [row == pytest.approx(ref, abs=1e-6) for row, ref in zip(runs[-1][0].probe_losses, reference.probe_losses)] == [True, True]
    for name, value in _trainable(whole).items():
        assert torch.allclose(value, _trainable(part)[name], atol=1e-6), name


def test_disk_trunk_cache_resumes_at_the_last_complete_shard(tmp_path):
    encoded = [([1] * (i % 5 + 1), []) for i in range(10)]
    calls: list[list[int]] = []

    def compute(indices):
        calls.append(list(indices))
        if len(calls) == 3:
            raise KeyboardInterrupt  # interrupted while computing the third shard
        return [torch.full((len(encoded[i][0]), 2), float(i)) for i in indices]

    with pytest.raises(KeyboardInterrupt):
        checkpoints.cached_trunk_on_disk(compute, encoded, tmp_path, progress=False, shard_size=3)
    assert sorted(p.name for p in tmp_path.glob("shard-*.pt")) == ["shard-00000.pt", "shard-00001.pt"]
    calls.clear()
    cache = checkpoints.cached_trunk_on_disk(compute, encoded, tmp_path, progress=False, shard_size=3)
    assert len(calls) == 2 and sum(map(len, calls)) == 4  # only the two missing shards
    assert all(torch.equal(cache[i], torch.full((len(encoded[i][0]), 2), float(i))) for i in range(10))
    calls.clear()
    checkpoints.cached_trunk_on_disk(compute, encoded, tmp_path, progress=False, shard_size=3)
    assert calls == []


def test_level_variants():
    axes = [AxisLevels.fit("Relevance", [0.1, 0.2, 0.3], score_key="relevance"),
            AxisLevels.fit("Quality", [1.0, 2.0, 3.0], score_key="brisque", higher_is_better=False)]
    examples = [QC2Example("a dog.", ("Low", "High")), QC2Example("a cat.", ("Medium", "Low"))]
    variants = level_variants(examples, axes, seed=1)
    assert set(variants) == {"true", "opposite", "opposite_relevance", "opposite_brisque", "random"}
    assert [e.levels for e in variants["opposite"]] == [("High", "Low"), ("Medium", "High")]
    assert [e.levels for e in variants["opposite_relevance"]] == [("High", "High"), ("Medium", "Low")]
    assert [e.levels for e in variants["opposite_brisque"]] == [("Low", "Low"), ("Medium", "High")]
    assert [e.caption for e in variants["random"]] == ["a dog.", "a cat."]
    assert variants["random"] == level_variants(examples, axes, seed=1)["random"]
    assert opposite_level("Very Low", ["Very Low", "Low", "Medium", "High", "Very High"]) == "Very High"
    assert separation({"true": 2.0, "opposite": 2.5, "random": 2.25}) == {"opposite": 0.5, "random": 0.25}


def test_level_check_after_every_epoch_matches_the_trained_models_own_loss(tiny_checkpoint):
    """The per-epoch check runs on the cached trunk; after the last epoch it must equal the loss of
    the trained model's ordinary forward on the same captions (what `level_usage` measures)."""
    examples = _examples()
    axes = [AxisLevels.fit("Relevance", [0.1, 0.2, 0.3], score_key="relevance"),
            AxisLevels.fit("Quality", [1.0, 2.0, 3.0], score_key="quality")]
    probes = level_variants(examples[:5], axes, seed=0, per_axis=False)
    model, tokenizer = _load(tiny_checkpoint)
    config = QC2TrainConfig(**{**CONFIG, "lora_dropout": 0.0})
    model, report, allowed = train_completion_model(model, tokenizer, examples, AXES, config, progress=False,
                                                    probes=probes)
    assert [row["epoch"] for row in report.probe_losses] == [0, 1, 2, 3]
    assert set(report.probe_losses[-1]) == {"epoch", "true", "opposite", "random"}
    assert report.probe_losses[-1]["true"] < report.probe_losses[0]["true"]  # it learned the captions
    direct = level_usage(model, tokenizer, probes, AXES, allowed_token_ids=allowed)
    for name, value in direct.items():
        assert report.probe_losses[-1][name] == pytest.approx(value, abs=1e-4), name


def _captioned_folder(root: Path) -> Path:
    lines = []
    words = ["dog", "cat", "bike", "beach", "child", "man", "girl", "boat"]
    for i, word in enumerate(words):
        make_photo(root / "images" / f"p{i}.png", seed=i, size=(48, 40))
        lines.append(json.dumps({"image": f"images/p{i}.png", "captions": [f"a {word} runs.", f"one {word} sits."],
                                 "split": "train" if i < 6 else "dev"}))
    (root / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_train_from_captions_cli_portable_model_for_another_gallery(tiny_checkpoint, tiny_clip_name, tmp_path):
    """`quality train --captions-from`: trains on the folder's train rows, checks levels on its dev
    rows, and the model (no fingerprint) serves a different gallery."""
    from pictrieve.agents.qc2.pipeline import load_for_gallery
    from pictrieve.cli.quality import quality
    from pictrieve.graphs.qc2 import quality_search
    from pictrieve.vectorstore.gallery import Gallery

    folder = _captioned_folder(tmp_path / "train")
    out = tmp_path / "model"
    args = ["train", "--captions-from", str(folder), "--out", str(out), "--embedder", tiny_clip_name,
            "--base-model", tiny_checkpoint, "--epochs", "2", "--batch-size", "4", "--train-layers", "1",
            "--lora-rank", "4", "--images", "5", "--heldout-images", "2", "--probe-size", "6"]
    result = CliRunner().invoke(quality, args)
    assert result.exit_code == 0, result.output
    assert "trained" in result.output and "on 10 captions" in result.output  # 5 train photos x 2 captions
    assert "| epoch | train_true | train_opposite | train_random | heldout_true |" in result.output
    info = json.loads((out / "qc2.json").read_text())
    assert info["fingerprint"] is None and info["training"]["portable"] is True
    assert info["gallery"]["count"] == 5 and info["gallery"]["heldout"]["count"] == 2
    assert [row["epoch"] for row in info["training"]["probe_losses"]] == [0, 1, 2]
    work = Path(f"{out}.work")
    assert (work / "checkpoint" / "state.pt").is_file() and list(work.glob("checkpoint/trunk-*/shard-*.pt"))
    # re-running the same command resumes at the end: no retraining
    again = CliRunner().invoke(quality, args + ["--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["training"]["resumed_from_step"] == 6

    other = Gallery.open(tmp_path / "other", tiny_clip_name)
    make_photo(tmp_path / "photos" / "x.png", seed=42)
    other.add(tmp_path / "photos", progress=False)
    model = load_for_gallery(other, out)  # a gallery-trained model would refuse (fingerprint)
    hit = quality_search(other, "a dog", {"relevance": "high"}, model=model, k=1, seed=0)
    assert len(hit.hits) == 1 and hit.completions[0].startswith("a dog")

    bad = CliRunner().invoke(quality, ["train", "--captions-from", str(folder)])
    assert bad.exit_code != 0 and "--out" in bad.output
    bad = CliRunner().invoke(quality, ["train", "--captions-from", str(folder), "--out", str(out),
                                       "--heldout-split", "train"])
    assert bad.exit_code != 0


def test_max_minutes_counts_the_whole_command_and_a_rerun_resumes(tiny_checkpoint, tiny_clip_name, tmp_path):
    """`quality train --max-minutes`: a budget spent as the command starts stops it after one unit of
    work (an image indexed, a chunk cached, a check, a step), before any training step saving no model;
    each re-run goes on from the checkpoint until the model is done. (After the first run the
    galleries are prepared without a budget, so that the runs step through training.)"""
    from pictrieve.cli.quality import quality
    from pictrieve.evaluation.quality import prepare_caption_galleries
    from pictrieve.vectorstore.gallery import Gallery

    folder = _captioned_folder(tmp_path / "train")
    out = tmp_path / "model"
    args = ["train", "--captions-from", str(folder), "--out", str(out), "--embedder", tiny_clip_name,
            "--base-model", tiny_checkpoint, "--epochs", "1", "--batch-size", "4", "--train-layers", "1",
            "--lora-rank", "4", "--images", "5", "--heldout-images", "2", "--probe-size", "6",
            "--max-minutes", "0.00001"]
    indexing = CliRunner().invoke(quality, args)
    assert indexing.exit_code == 0 and "before the first training step" in indexing.output, indexing.output
    assert Gallery.open(Path(f"{out}.work") / "train-gallery", tiny_clip_name).count() == 1
    prepare_caption_galleries(folder, Path(f"{out}.work"), embedder=tiny_clip_name, images=5, heldout_images=2,
                              progress=False)
    first = CliRunner().invoke(quality, args)
    assert first.exit_code == 0, first.output
    assert "before the first training step" in first.output and "run the same command again" in first.output
    assert not (out / "qc2.json").exists() and list(Path(f"{out}.work").glob("checkpoint/trunk-*/shard-*.pt"))
    outputs = []
    for _ in range(8):
        again = CliRunner().invoke(quality, args)
        assert again.exit_code == 0, again.output
        outputs.append(again.output)
        if "(done)" in again.output:
            break
    assert "stopped early (time budget" in outputs[0] and "(done)" in outputs[-1], outputs
    assert json.loads((out / "qc2.json").read_text())["training"]["steps"] == 3
    assert CliRunner().invoke(quality, args[:-2] + ["--max-minutes", "0"]).exit_code == 2  # not a budget


def test_indexing_and_annotating_stop_when_the_budget_says_and_resume(tiny_clip_name, tmp_path):
    """The preparation of `quality train --captions-from` under a spent budget: one image indexed,
    one batch annotated per run; re-runs complete both."""
    from pictrieve.agents.qc2.annotation import annotate_gallery, metadata_key
    from pictrieve.tools.core.time_budget import TimeBudget
    from pictrieve.tools.models.quality_scorers import create_quality_scorer
    from pictrieve.vectorstore.gallery import Gallery

    folder = _captioned_folder(tmp_path / "photos")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    indexed = [gallery.add(folder / "images", progress=False, budget=TimeBudget(0)) for _ in range(8)]
    assert [(r.indexed, r.unchanged, r.stopped_early) for r in indexed] == (
        [(1, i, True) for i in range(7)] + [(1, 7, False)])  # the last run finishes (nothing left to stop)
    assert gallery.count() == 8
    scorer = create_quality_scorer("brisque")
    key = metadata_key(scorer.key)
    first = annotate_gallery(gallery, [scorer], batch_size=2, progress=False, budget=TimeBudget(0))
    assert [r.score for r in first] == ["relevance"] and first[0].scored == 8  # one batch of 8 (2 x 4)
    assert not any(item.metadata.get(key) is not None for item in gallery.items())
    second = annotate_gallery(gallery, [scorer], batch_size=2, progress=False, budget=TimeBudget(0))
    assert [(r.score, r.scored) for r in second] == [("relevance", 0), ("brisque", 2)]
    annotate_gallery(gallery, [scorer], batch_size=2, progress=False)
    assert all(item.metadata.get(key) is not None for item in gallery.items())


def test_captioned_folder_split_and_sample(tmp_path):
    from pictrieve.evaluation.datasets import CaptionedFolder

    folder = _captioned_folder(tmp_path)
    train = CaptionedFolder.load(folder, split="train")
    assert len(train.captions) == 6 and len(CaptionedFolder.load(folder, split="dev").captions) == 2
    sample = train.sample(3, seed=4)
    assert len(sample.captions) == 3 and set(sample.paths) <= set(train.paths)
    assert sample.paths == sorted(sample.paths) and sample.paths == train.sample(3, seed=4).paths
    assert train.sample(None) is train
    with pytest.raises(ValueError, match="split"):
        CaptionedFolder.load(folder, split="test")


def test_eval_quality_trains_on_other_captions_and_reuses_a_given_model(tiny_checkpoint, tiny_clip_name, tmp_path):
    """`eval quality DEV --train-captions TRAIN`: QC2 is trained on TRAIN's train rows, DEV is only
    searched; `--qc2-model DIR` then reuses that model as is."""
    from pictrieve.cli.eval_quality import format_report, quality_eval
    from pictrieve.evaluation.quality import evaluate_quality_control

    train = _captioned_folder(tmp_path / "train")
    dev = tmp_path / "dev"
    lines = []
    for i, caption in enumerate(["a dog on grass", "a man on a bike", "a boat on a lake", "a dog in snow"]):
        make_photo(dev / "images" / f"{i}.png", seed=100 + i, size=(64, 48))
        lines.append(json.dumps({"image": f"images/{i}.png", "captions": [caption]}))
    (dev / "captions.jsonl").write_text("\n".join(lines))
    config = QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1)
    report = evaluate_quality_control(
        dev, queries=["a dog"], embedder=tiny_clip_name, gallery_location=tmp_path / "g", scorer="brisque",
        base_model=tiny_checkpoint, train_config=config, methods=["prefix", "qc2"], progress=False,
        train_captions=train, train_images=4,
    )
    trained_on = report["training"]["qc2"]["trained_on"]
    assert trained_on["count"] == 4 and trained_on["location"].endswith("train-gallery")
    assert report["training"]["qc2"]["examples"] == 8 and report["training"]["qc2"]["portable"] is True
    assert "not on the searched gallery" in format_report(report)
    model_dir = tmp_path / "g" / "qc2-from-captions"
    assert json.loads((model_dir / "qc2.json").read_text())["fingerprint"] is None
    out = CliRunner().invoke(quality_eval, [str(dev), "--embedder", tiny_clip_name, "--gallery", str(tmp_path / "g"),
                                            "--method", "qc2", "--qc2-model", str(model_dir), "--json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["training"]["qc2"]["model"] == str(model_dir) and payload["training"]["qc2"]["reused"] is True
    assert len(payload["methods"]["qc2"]) == 9


class _CountingBudget:
    """A time budget that is spent once ``limit`` units of work were done (``None``: never; it counts them)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit, self.done, self.seconds = limit, 0, 0.0

    def progressed(self) -> None:
        self.done += 1

    def should_stop(self) -> bool:
        return self.limit is not None and self.done >= self.limit

    def elapsed(self) -> float:
        return 0.0


def test_a_run_that_trained_every_step_is_done_even_when_the_budget_cuts_its_last_check(tiny_checkpoint):
    """The budget runs out after the last training step, during the last level-usage check: every step is
    trained, so the run is not "stopped early"; the report says only the last check is pending."""
    examples = _examples()
    axes = [AxisLevels.fit("Relevance", [0.1, 0.2, 0.3], score_key="relevance"),
            AxisLevels.fit("Quality", [1.0, 2.0, 3.0], score_key="quality")]
    probes = level_variants(examples[:5], axes, seed=0, per_axis=False)
    config = QC2TrainConfig(**CONFIG)
    counting = _CountingBudget()
    model, tokenizer = _load(tiny_checkpoint)
    _, whole, _ = train_completion_model(model, tokenizer, examples, AXES, config, progress=False, probes=probes,
                                         budget=counting)
    assert not whole.stopped_early and not whole.level_check_pending
    # the last unit of work is the last check: spend the budget just before it
    model, tokenizer = _load(tiny_checkpoint)
    _, cut, _ = train_completion_model(model, tokenizer, examples, AXES, config, progress=False, probes=probes,
                                       budget=_CountingBudget(counting.done - 1))
    assert cut.steps == whole.steps == 6
    assert not cut.stopped_early and cut.level_check_pending
    assert [row["epoch"] for row in cut.probe_losses] == [0, 1, 2]  # the check after epoch 3 was cut


def _uncaptioned_split_folder(root: Path) -> Path:
    """README's captions.jsonl: no "split" field on any line."""
    folder = _captioned_folder(root)
    lines = [json.loads(line) for line in (folder / "captions.jsonl").read_text().splitlines()]
    (folder / "captions.jsonl").write_text("".join(json.dumps({k: v for k, v in line.items() if k != "split"}) + "\n"
                                                   for line in lines))
    return folder


def test_a_folder_without_splits_holds_out_a_random_share(tmp_path):
    from pictrieve.agents.qc2.errors import QC2ModelError
    from pictrieve.evaluation.quality import split_captioned_folder

    folder = _uncaptioned_split_folder(tmp_path / "plain")
    train, held = split_captioned_folder(folder, seed=3)
    assert len(held.paths) == 1 and len(train.paths) == 7  # 15% of 8 photos, at least one
    assert not set(train.paths) & set(held.paths)
    assert split_captioned_folder(folder, seed=3)[1].paths == held.paths  # seeded
    assert split_captioned_folder(folder, heldout_split=None)[1] is None
    assert len(split_captioned_folder(folder, images=4)[0].paths) == 4
    marked = _captioned_folder(tmp_path / "marked")
    train, held = split_captioned_folder(marked)
    assert len(train.paths) == 6 and len(held.paths) == 2
    with pytest.raises(QC2ModelError, match=r'no rows with "split": "test" \(its splits: dev, train\)'):
        split_captioned_folder(marked, split="test")


def test_train_from_captions_of_a_folder_without_splits(tiny_checkpoint, tiny_clip_name, tmp_path):
    """`quality train --captions-from` on a README-format captions.jsonl (no "split"): trains, and checks
    the levels on a held-out random share, instead of a traceback about a "train" split."""
    from pictrieve.cli.quality import quality

    folder = _uncaptioned_split_folder(tmp_path / "train")
    out = tmp_path / "model"
    args = ["train", "--captions-from", str(folder), "--out", str(out), "--embedder", tiny_clip_name,
            "--base-model", tiny_checkpoint, "--epochs", "1", "--batch-size", "4", "--train-layers", "1",
            "--lora-rank", "4", "--probe-size", "6"]
    result = CliRunner().invoke(quality, args)
    assert result.exit_code == 0, result.output
    assert "on 14 captions" in result.output and "(done)" in result.output  # 7 photos x 2 captions
    assert "heldout_true" in result.output
    info = json.loads((out / "qc2.json").read_text())
    assert info["gallery"]["count"] == 7 and info["gallery"]["heldout"]["count"] == 1


def test_training_on_a_gallery_without_captions_says_how_to_get_captions(tmp_path):
    from types import SimpleNamespace

    from pictrieve.agents.qc2.annotation import build_training_data, metadata_key
    from pictrieve.agents.qc2.errors import QC2ModelError

    items = [SimpleNamespace(id=str(i), captions=[], metadata={metadata_key("brisque"): 20.0 + i}) for i in range(3)]
    with pytest.raises(QC2ModelError) as refused:
        build_training_data(items, ["brisque"])
    assert "--captioner offline" in str(refused.value) and "--captions-from" in str(refused.value)
    assert "run `pictrieve quality annotate`" not in str(refused.value)
