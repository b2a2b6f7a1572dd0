"""How many threads torch trains on: the cores a run was given, never more.

torch starts one thread per core whatever else runs. On busy cores those threads wait for
each other at every op: a small model trained at 4.9K tokens/s with torch's default threads
and 23.2K with one, on two cores shared with a sweep (issue 25). So a sweep's trial uses the
CPUs Ray gave it, and `shapesweep train` the cores no one else is using.
"""

from __future__ import annotations

import math
import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def free_cores(cores: int | None = None, load: float | None = None) -> int:
    """The usable cores less the work already running on them (the 1-minute load average,
    rounded), at least 1: `shapesweep train`'s default thread count."""
    cores = usable_cores() if cores is None else cores
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform
            load = 0.0
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def use_threads(threads: int) -> None:
    """Train on `threads` torch threads (intra-op), and as many for inter-op work. The inter-op
    pool can be sized only before its first use: a worker that already trained keeps it."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already started in this process (a reused Ray worker)
        pass
