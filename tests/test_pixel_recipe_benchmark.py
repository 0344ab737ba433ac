"""benchmarks/pixel_recipe_change.py in a tiny mode: the old and new resizes of the offline default on a few photos,
the real packaged model, the per-query results file and the BENCHMARKS row."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import make_photo
from helpers.benchmark_scripts import benchmark_script
from pictrieve.evaluation.bri import in_top_k

pixel_recipe = benchmark_script("pixel_recipe_change", "indexing_stages")


@pytest.fixture(scope="module")
def captioned(tmp_path_factory):
    """Five photos larger than 224 (so both resizes reduce them) with two or three captions each."""
    folder = tmp_path_factory.mktemp("recipe-photos")
    lines = []
    for i in range(5):
        make_photo(folder / "images" / f"p{i}.jpg", seed=i, size=(320, 240))
        captions = [f"photo {i} seen once", f"photo {i} seen twice"] + ([f"photo {i} again"] if i % 2 else [])
        lines.append(json.dumps({"image": f"images/p{i}.jpg", "captions": captions}))
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_tiny_run_compares_both_recipes_and_keeps_every_query(captioned, tmp_path):
    out, bench = tmp_path / "results", tmp_path / "BENCH.md"
    bench.write_text("# Benchmarks\n\nearlier text stays\n", encoding="utf-8")
    argv = [str(captioned), "--limit", "4", "--rounds", "1", "--batch", "3", "--out", str(out), "--write", str(bench)]
    summary = pixel_recipe.main(argv)
    assert summary["photos"] == 4 and summary["captions"] == 10 and summary["embedder"] == "offline"
    pixels = summary["pixels"]
    assert 0 < pixels["fraction_differing"] < 0.5 and 0 < pixels["mean_levels"] < 1 and 1 <= pixels["max_levels"] < 64
    cosine = summary["cosine"]
    assert 0.99 < cosine["min"] <= cosine["p50"] <= 1 + 1e-6 and cosine["min"] <= cosine["mean"] < 1
    assert min(summary["resize"]["ms_per_photo"].values()) > 0

    saved = json.loads((out / next(p.name for p in out.iterdir())).read_text(encoding="utf-8"))
    assert saved["command"].startswith("python benchmarks/pixel_recipe_change.py ") and saved["date"].startswith("20")
    assert len(saved["captions"]) == 10 and len(saved["photos"]) == 4
    assert [row["photo"] for row in saved["captions"]] == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]
    for key, queries in (("text_to_image", saved["captions"]), ("image_to_text", saved["photos"])):
        for arm in ("before", "after"):  # the summary is what the kept rows say, query by query
            greater = np.array([row[f"{arm}_greater"] for row in queries])
            ties = np.array([row[f"{arm}_ties"] for row in queries])
            assert [row[f"{arm}_rank"] for row in queries] == pytest.approx(1 + greater + ties / 2)
            for k in pixel_recipe.KS:
                assert summary[key][arm][f"recall@{k}"] == pytest.approx(in_top_k(greater, ties, k).mean())
        mean, low, high = summary[key]["recall@10_difference"]
        assert low <= mean <= high
    assert sum(row["pixels_differing"] for row in saved["photos"]) == pytest.approx(
        pixels["fraction_differing"] * 4 * 224 * 224 * 3)

    pixel_recipe.main(argv)
    text = bench.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nearlier text stays\n") and text.count(pixel_recipe.SECTION) == 1
    rows = text.split(pixel_recipe.ROWS_BEGIN)[1].split(pixel_recipe.ROWS_END)[0].strip().splitlines()
    assert len(rows) == 2  # one per run, appended
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert len(cells) == pixel_recipe.HEADER.splitlines()[0].count("|") - 1
    assert cells[2] == "4, 10" and cells[-1].startswith("`python benchmarks/pixel_recipe_change.py ")


def test_old_recipe_is_pillows_bicubic_and_the_old_scaling(captioned):
    """The 'before' arm is Pillow's resize, not the current one, and the current scaling of its bytes is the old
    ``squash_views`` bit for bit (what the benchmark checks before it measures)."""
    from PIL import Image

    from pictrieve.tools.models.embedders.backbone import scaled_views, squash_bytes

    photo = pixel_recipe.decode([captioned / "images" / "p1.jpg"])[0]
    image = Image.fromarray(photo)
    old = pixel_recipe.pillow_squash_bytes(image)
    assert np.array_equal(old, np.asarray(image.resize((224, 224), Image.Resampling.BICUBIC)))
    assert not np.array_equal(old, squash_bytes(photo))
    views = pixel_recipe.pillow_squash_views(image)
    assert views.shape == (2, 3, 224, 224) and np.array_equal(views[1], views[0][:, :, ::-1])
    assert np.array_equal(views[0], (old.transpose(2, 0, 1).astype(np.float32) / 255 - 0.5) / 0.5)
    assert np.array_equal(scaled_views([old]), views)


def test_image_to_text_ranks_the_best_placed_own_caption():
    # 3 photos, captions of photo 0, 0, 1, 2, 2; photo 0's best own caption (0.9) has one other caption above it
    scores = np.array([[0.9, 0.1, 0.95, 0.2, 0.9],
                       [0.5, 0.5, 0.4, 0.6, 0.1],
                       [0.0, 0.1, 0.2, 0.3, 0.3]])
    stats = pixel_recipe.image_to_text_statistics(scores, np.array([0, 0, 1, 2, 2]))
    assert stats["greater"].tolist() == [1, 3, 0]  # its other own caption never counts against it
    assert stats["ties"].tolist() == [1, 0, 0]  # photo 2's two own captions tie: neither is a tie against it
    assert stats["ranks"].tolist() == [2.5, 4.0, 1.0]


def test_bad_arguments_get_one_line(captioned, tmp_path, capsys):
    with pytest.raises(SystemExit):
        pixel_recipe.parse_args([str(tmp_path)])
    assert "has no captions.jsonl" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pixel_recipe.parse_args([str(captioned), "--limit", "0"])
    assert "--limit must be at least 1" in capsys.readouterr().err
