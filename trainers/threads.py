"""How many threads torch trains on: the cores a run was given, never more.

torch starts one thread per core whatever else runs. On busy cores those threads wait for
each other at every op: a small model trained at 4.9K tokens/s with torch's default threads
and 23.2K with one, on two cores shared with a sweep (issue 25). So a sweep's trial uses the
CPUs Ray gave it, and `shapesweep train` the cores no one else is using now (measured at its start).
"""

from __future__ import annotations

import math
import os

import psutil

# Long enough to average over a scheduler tick's noise, short beside a run's start-up.
SAMPLE_S = 0.25


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def busy_cores(sample_s: float = SAMPLE_S) -> float:
    """The cores other work keeps busy now: each usable core's utilisation over a short sample
    of the kernel's CPU counters (psutil), summed. This process sleeps while it samples, so
    only others count; a load average would still carry the last minute's work."""
    per_cpu = psutil.cpu_percent(interval=sample_s, percpu=True)
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(len(per_cpu))
    return sum(per_cpu[cpu] for cpu in usable if cpu < len(per_cpu)) / 100


def free_cores(cores: int | None = None, busy: float | None = None) -> int:
    """The usable cores less those busy now (`busy_cores`, rounded), at least 1: `shapesweep
    train`'s default thread count. An idle 2-core machine trains on 2."""
    cores = usable_cores() if cores is None else cores
    busy = busy_cores() if busy is None else busy
    return max(1, min(cores, math.floor(cores - busy + 0.5)))


def use_threads(threads: int) -> None:
    """Train on `threads` torch threads (intra-op), and as many for inter-op work. The inter-op
    pool can be sized only before its first use: a worker that already trained keeps it."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already started in this process (a reused Ray worker)
        pass
