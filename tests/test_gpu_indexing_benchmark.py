"""benchmarks/gpu_indexing.py in its dry-run mode: every arm runs on pictrieve's code with the tiny random CLIP, the
GPU paths (resized bytes scaled by torch, JPEGs decoded by torchvision) run on the CPU, and the run's row lands in the
markdown file it is given (no GPU is needed, none is assumed)."""

from __future__ import annotations

import pytest

from helpers import make_photo
from helpers.benchmark_scripts import benchmark_script

gpu_indexing = benchmark_script("gpu_indexing", "search_latency")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-bench-photos")
    for i in range(6):
        make_photo(folder / f"p{i}.jpg", seed=i)
    return folder


def smoke_args(photos, out) -> list[str]:
    return [str(photos), "--dry-run", "--limit", "5", "--batch", "2", "--workers", "2", "--gallery-size", "300",
            "--queries", "4", "--write", str(out)]


def test_dry_run_runs_every_arm_and_writes_its_rows(photos, tmp_path):
    out = tmp_path / "BENCH.md"
    out.write_text("# Benchmarks\n\nearlier text stays\n", encoding="utf-8")
    first = gpu_indexing.main(smoke_args(photos, out))
    assert first["images"] == 5 and first["repeat"] == 1 and first["batch"] == 2
    assert first["model"] == gpu_indexing.DRY_RUN_MODEL
    for arm in ("model_only_images_per_s", "decode_embed_images_per_s", "index_images_per_s",
                "gpu_decode_embed_images_per_s", "gpu_decode_index_images_per_s"):
        assert first[arm] > 0
    assert first["search"]["vectors"] == 300 and first["search"]["search_text"]["p95_ms"] > 0
    assert first["device"].startswith("CPU") and "torch " in first["versions"]

    gpu_indexing.main(smoke_args(photos, out))
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nearlier text stays\n")
    assert text.count(gpu_indexing.SECTION) == 1
    rows = text.split(gpu_indexing.ROWS_BEGIN)[1].split(gpu_indexing.ROWS_END)[0].strip().splitlines()
    assert len(rows) == 2  # one per run, appended
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 10
        assert cells[1].startswith("CPU") and cells[2].startswith("torch ")
        assert cells[4] == "5 x 1, 2, 2"
        assert " / " in cells[6] and " / " in cells[7]  # CPU decode / device decode
        assert cells[9].startswith("`python benchmarks/gpu_indexing.py ") and "--dry-run" in cells[9]


def test_dry_run_settings(photos):
    args = gpu_indexing.parse_args([str(photos), "--dry-run"])
    assert (args.device, args.model, args.limit, args.batch, args.repeat) == ("cpu", gpu_indexing.DRY_RUN_MODEL, 16, 8, 1)
    assert gpu_indexing.parse_args([str(photos)]).device == "cuda"  # a real run asks for the GPU


def test_repeated_copies_decode_alike_but_hash_apart(photos, tmp_path):
    """Indexing copies the vector of a file whose content it has stored, so repeats must differ in content
    (else the `pictrieve index` arm times that shortcut): same pixels, another sha256."""
    from PIL import Image

    from pictrieve.tools.core.images import file_sha256

    source = sorted(photos.iterdir())[:2]
    copies = gpu_indexing.repeated_copies(source, 3, tmp_path)
    assert len(copies) == 6 and len({file_sha256(path) for path in copies}) == 6
    with Image.open(source[0]) as original, Image.open(copies[2]) as copy:
        assert copy.tobytes() == original.tobytes()


def test_a_gpu_row_replaces_the_not_measured_line(tmp_path):
    out = tmp_path / "BENCH.md"
    out.write_text(gpu_indexing.section_text([gpu_indexing.NOT_MEASURED]), encoding="utf-8")
    gpu_indexing.write_row(out, "| cpu row |", measured_gpu=False)
    assert gpu_indexing.NOT_MEASURED in out.read_text(encoding="utf-8")  # a CPU run measures no GPU
    gpu_indexing.write_row(out, "| gpu row |", measured_gpu=True)
    text = out.read_text(encoding="utf-8")
    assert gpu_indexing.NOT_MEASURED not in text
    assert text.index("| cpu row |") < text.index("| gpu row |") < text.index(gpu_indexing.ROWS_END)


def test_bad_arguments_get_one_line(photos, tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_indexing.parse_args([str(tmp_path / "missing"), "--device", "cpu"])
    assert "is not a folder of photos" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_indexing.parse_args([str(photos), "--batch", "0"])
    assert "--batch must be at least 1" in capsys.readouterr().err
