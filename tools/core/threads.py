"""How many CPU threads one model call may use on this machine.

Every runtime (PyTorch's intra-op pool, ONNX Runtime's, the bulk sentence encoder) asks
:func:`intra_op_threads`, so a container limited to two CPUs on a 64-core host runs two threads,
not 64 that the kernel then throttles. The answer, in order:

1. ``OMP_NUM_THREADS`` when it is a positive integer: the person (or a benchmark) chose;
2. else the CPUs this process may run on (``os.sched_getaffinity``: ``taskset``, Docker ``--cpuset-cpus``),
3. lowered to a cgroup CPU quota when there is one (Docker ``--cpus``, Kubernetes CPU limits): cgroup v2
   ``cpu.max`` (``"200000 100000"`` is two CPUs, ``"max 100000"`` none), or cgroup v1
   ``cpu/cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (``-1``: none). A fractional quota rounds down
   (at least one thread): a thread more than the quota spends its time throttled.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Collection, Mapping

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: str | os.PathLike = CGROUP_ROOT) -> float | None:
    """The CPUs a cgroup quota allows under ``root`` (``1.5`` for 150 ms per 100 ms), or ``None`` without one."""
    root = Path(root)
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    for folder in (root / "cpu", root / "cpu,cpuacct", root):  # cgroup v1 layouts
        try:
            quota_us = int((folder / "cpu.cfs_quota_us").read_text())
            period_us = int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    return None


def usable_cpus(cgroup_root: str | os.PathLike = CGROUP_ROOT, affinity: Collection[int] | None = None) -> int:
    """CPUs this process may keep busy: its affinity mask, capped by a cgroup quota (at least 1)."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # pragma: no cover - not Linux
            affinity = range(os.cpu_count() or 1)
    cores = max(1, len(affinity))
    limit = cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        cores = min(cores, max(1, int(limit)))
    return cores


def intra_op_threads(
    environ: Mapping[str, str] | None = None,
    cgroup_root: str | os.PathLike = CGROUP_ROOT,
    affinity: Collection[int] | None = None,
) -> int:
    """Threads for one model call: ``OMP_NUM_THREADS`` when set to a positive integer, else :func:`usable_cpus`.

    ``environ``, ``cgroup_root`` and ``affinity`` default to this process's; tests pass fakes.
    """
    explicit = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    return usable_cpus(cgroup_root, affinity)
