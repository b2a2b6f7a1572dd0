"""A Ray that fails to start is retried once with a longer wait, then refused in one line
naming the log that says why and the command that resumes the sweep (issue 57 item 2).
Ray's GCS is made to fail for real: an unknown storage type stops it at start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from sweep_helpers import CHILD_ENV, write_space


def test_a_ray_that_fails_to_start_is_one_line_with_its_log_and_the_resume_command(tmp_path):
    space = write_space(tmp_path, name="nostart")
    root = tmp_path / "sweeps"
    env = {**CHILD_ENV, "RAY_gcs_storage": "bogus", "RAY_gcs_server_port_wait_time_s": "2",
           "RAY_TMPDIR": str(tmp_path / "rt")}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space),
                           "--root", str(root), "--scheduler", "fifo", "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - began < 110
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [text for text in done.stderr.splitlines() if "error" in text]
    assert line.startswith("shapesweep run: error: Ray did not start: "), line
    assert "tried twice, the second time waiting 4 s" in line, line  # the retry doubled the wait
    log = line.split("Ray's log: ")[1].split(";")[0]
    assert "/logs" in log and Path(log).exists(), log  # kept for the user to read
    assert line.endswith(f"resume nostart --root {root}"), line
    assert done.stderr.strip().splitlines()[-1] == line  # nothing of Ray's after it
