"""benchmarks/indexing_stages.py in a tiny mode: every arm that needs no packaged model runs on pictrieve's code,
the before arms run in a subprocess importing pictrieve from the folder given, and the row lands in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

import pictrieve
from helpers import make_photo
from helpers.benchmark_scripts import benchmark_script

indexing_stages = benchmark_script("indexing_stages")

ARMS = "decode-threads,decode-processes,write-only,index-null"


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stage-bench-photos")
    for i in range(6):
        make_photo(folder / f"p{i}.jpg", seed=i)
    return folder


def test_tiny_run_measures_every_stage_and_writes_its_row(photos, tmp_path):
    out = tmp_path / "BENCH.md"
    out.write_text("# Benchmarks\n\nearlier text stays\n", encoding="utf-8")
    # a folder holding this checkout as `pictrieve`, a stand-in for an older one (the repository root is the
    # package, so a checkout is imported through such a link; pictrieve.__file__'s grandparent is that folder only
    # when pictrieve itself was imported through one, not under `pip install -e`, as CI runs)
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    (baseline / "pictrieve").symlink_to(Path(pictrieve.__file__).parent, target_is_directory=True)
    argv = [str(photos), "--limit", "5", "--batch", "2", "--workers", "2", "--rounds", "2", "--arms", ARMS,
            "--baseline", str(baseline), "--write", str(out)]
    results = indexing_stages.main(argv)
    assert results["photos"] == 5 and results["rounds"] == 2 and len(results["per_round"]) == 2
    arms = ARMS.split(",")
    assert set(results["rates"]) == {*arms, *(f"{arm} cpu_ms" for arm in arms)}
    assert all(rate > 0 for rate in results["rates"].values())  # images/s, and CPU ms a photo, of every arm
    before = results["before"][str(baseline)]
    assert set(before) == {"index-null", "index-null cpu_ms"} and min(before.values()) > 0

    indexing_stages.main(argv)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nearlier text stays\n") and text.count(indexing_stages.SECTION) == 1
    rows = text.split(indexing_stages.ROWS_BEGIN)[1].split(indexing_stages.ROWS_END)[0].strip().splitlines()
    assert len(rows) == 2  # one per run, appended
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == len(indexing_stages.ARMS) + 5
        assert cells[2] == "5, 2, 2, 2"
        assert cells[3 + indexing_stages.ARMS.index("model-only")] == "-"  # not run: no packaged model here
        assert cells[3 + indexing_stages.ARMS.index("index-null")].endswith(")")  # "img/s (CPU ms/photo)"
        assert cells[-2].startswith("baseline: ") and cells[-1].startswith("`python benchmarks/indexing_stages.py ")


def test_bad_arguments_get_one_line(photos, tmp_path, capsys):
    with pytest.raises(SystemExit):
        indexing_stages.parse_args([str(tmp_path / "missing")])
    assert "is not a folder of photos" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        indexing_stages.parse_args([str(photos), "--arms", "decode-threads,gpu"])
    assert "unknown arms ['gpu']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        indexing_stages.parse_args([str(photos), "--baseline", str(tmp_path)])
    assert "holds no pictrieve folder" in capsys.readouterr().err
