"""`shapesweep train`'s default threads: the cores free now, from a short sample of the CPU
counters, not the last minute's load average (issue 55.6)."""

from __future__ import annotations

import subprocess
import sys
import time

from shapesweep.trainers.threads import busy_cores, free_cores, usable_cores


def test_free_cores_rounds_the_busy_cores_off_the_usable_ones():
    assert free_cores(cores=2, busy=0.1) == 2  # an idle 2-core machine trains on both
    assert free_cores(cores=2, busy=0.9) == 1
    assert free_cores(cores=4, busy=2.2) == 2
    assert free_cores(cores=2, busy=5.0) == 1  # never fewer than one
    assert free_cores(cores=2, busy=-0.3) == 2  # never more than the cores


def test_busy_cores_sees_work_started_a_moment_ago():
    """Busy loops on every usable core, started just before: a load average would still read
    the idle minute before them; the sample reads them at once."""
    cores = usable_cores()
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)  # the interpreters are up and spinning
        busy = busy_cores(sample_s=0.5)
        assert busy >= cores - 0.6, f"{cores} busy loops read as {busy:.2f} busy cores"
        assert free_cores() == 1
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
