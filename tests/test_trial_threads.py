"""A sweep's trial trains on as many torch threads as it holds CPUs, whatever the driver's
environment says: torch's default threads thrash on busy cores (`shapesweep.trainers.threads`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_helpers import CHILD_ENV, write_space

from shapesweep.results.store import sweep_dir

pytestmark = pytest.mark.slow


def _threads_reported(root: Path, sweep: str) -> set[int]:
    """The `threads` field of every report Tune logged for the sweep's trials."""
    reports = [json.loads(line) for path in (Path(sweep_dir(str(root), sweep)) / "_ray").glob("*/*/result.json")
               for line in path.read_text().splitlines()]
    return {report["threads"] for report in reports if "threads" in report}


@pytest.mark.parametrize("cpus", ["1", "2"])
def test_a_trial_trains_on_the_cpus_it_holds(tmp_path, cpus):
    """OMP_NUM_THREADS=7 in the driver's environment (Ray passes it on to its workers) does
    not decide: the trial's CPU count does."""
    space = write_space(tmp_path, name="threads", search={"n_layers": [1]})
    run = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space), "--root",
                          str(tmp_path / "sweeps"), "--scheduler", "fifo", "--no-progress",
                          "--cpus-per-trial", cpus],
                         env={**CHILD_ENV, "OMP_NUM_THREADS": "7"}, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert _threads_reported(tmp_path / "sweeps", "threads") == {int(cpus)}
