"""Seeded randomness that stays inside a block, so one seeded run never reseeds anyone else's.

``torch.manual_seed`` sets the process-wide generator: a graph node that calls it changes the random
numbers of every other run in the process (concurrent served runs, a caller's own sampling).
:func:`torch_seeded` forks torch's CPU (and CUDA) generator state with ``torch.random.fork_rng``,
seeds it, runs the block and restores the previous state afterwards.

Seeded blocks are serialised by a lock: two of them in different threads would otherwise save and
restore the one global state under each other. Unseeded code running in another thread during the
block still shares torch's global generator, so bit-for-bit repeatability needs no concurrent
sampling; for numpy and Python randomness, pass a local ``numpy.random.default_rng(seed)`` or
``random.Random(seed)`` instead of seeding the global ones.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.RLock()


@contextmanager
def torch_seeded(seed: int | None) -> Iterator[None]:
    """Run the block with torch's generators seeded with ``seed``, restoring them after.

    ``seed=None`` runs the block unseeded (and untouched), so callers can pass an optional seed.
    """
    if seed is None:
        yield
        return
    import torch

    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with _lock, torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        yield
