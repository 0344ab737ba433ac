"""How many threads a model call gets: OMP_NUM_THREADS, the affinity mask and cgroup CPU quotas (fake files)."""

from __future__ import annotations

from pictrieve.tools.core.threads import cgroup_cpu_limit, intra_op_threads, usable_cpus

EIGHT = range(8)


def test_omp_num_threads_wins_when_it_is_a_positive_integer(tmp_path):
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert intra_op_threads({"OMP_NUM_THREADS": "3"}, tmp_path, EIGHT) == 3
    for ignored in ("", "0", "-2", "two", " "):
        assert intra_op_threads({"OMP_NUM_THREADS": ignored}, tmp_path, EIGHT) == 1


def test_the_affinity_mask_counts_when_there_is_no_quota(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None  # no cgroup files at all
    assert intra_op_threads({}, tmp_path, EIGHT) == 8
    assert intra_op_threads({}, tmp_path, {0, 5}) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")  # cgroup v2 without a limit
    assert intra_op_threads({}, tmp_path, EIGHT) == 8


def test_a_cgroup_v2_quota_caps_the_threads_rounding_down(tmp_path):
    (tmp_path / "cpu.max").write_text("200000 100000\n")  # docker --cpus 2
    assert cgroup_cpu_limit(tmp_path) == 2.0
    assert intra_op_threads({}, tmp_path, EIGHT) == 2
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: a second thread would be throttled
    assert usable_cpus(tmp_path, EIGHT) == 1
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU still gets one thread
    assert usable_cpus(tmp_path, EIGHT) == 1
    (tmp_path / "cpu.max").write_text("400000 100000\n")  # a quota above the mask: the mask
    assert usable_cpus(tmp_path, {0, 1}) == 2


def test_a_cgroup_v1_quota_caps_the_threads(tmp_path):
    folder = tmp_path / "cpu,cpuacct"
    folder.mkdir()
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    (folder / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    assert intra_op_threads({}, tmp_path, EIGHT) == 3
    (folder / "cpu.cfs_quota_us").write_text("-1\n")  # v1 without a limit
    assert intra_op_threads({}, tmp_path, EIGHT) == 8


def test_unreadable_cgroup_files_mean_no_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("garbage\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").write_text("100000 0\n")
    assert intra_op_threads({}, tmp_path, EIGHT) == 8
