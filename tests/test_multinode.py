"""A node lost mid-trial: a real Ray cluster of a head and two worker nodes on this machine
(`ray start`, each node its own process group and temp folder, one CPU per worker node, none
on the head), a sweep with a checkpoint at every evaluation on a root they share, and the
worker node running the trial killed whole (raylet, object store, workers: SIGKILL to its
process group), as a machine is lost. The trial continues on the other node from its last
checkpoint; its curve has each step once and its final loss is an uninterrupted run's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ray_nodes import TEST_ENV, kill_node, start_head, start_worker, stop_node, wait_for_nodes
from sweep_helpers import CHILD_ENV, TINY_TRAIN, write_space
from test_checkpoints import _check_curve, _reports, _wait_for_reports

from shapesweep.search_spaces.cadence import eval_steps
from shapesweep.search_spaces.configs import TrainConfig
from shapesweep.sweep.driver.trainable import START_FIELD

pytestmark = pytest.mark.slow

# A trial long enough (seconds even on a quiet fast machine) that the node is lost while it
# trains: the test sees a report only after the driver has it, and the trial trains on.
STEPS, BATCH = 1000, 2048
TRAIN = {**TINY_TRAIN, "batch_tokens": BATCH, "tokens": STEPS * BATCH, "eval_every": STEPS // 10}
POINTS = eval_steps(TrainConfig(**TRAIN), STEPS, BATCH)


def test_a_trial_on_a_lost_node_continues_on_another_from_its_last_checkpoint(
        tmp_path, one_torch_thread):
    env = {**CHILD_ENV, **TEST_ENV}
    nodes_tmp = Path(tempfile.mkdtemp(prefix="ss-nodes-"))  # short: Ray's socket paths must fit
    head, workers = None, []
    try:
        head, address = start_head(nodes_tmp / "head", 0, env)  # no CPU: trials run on workers
        workers = [start_worker(address, nodes_tmp / f"w{i}", 1, env) for i in range(2)]
        wait_for_nodes(address, 3, env, head)
        space_path = write_space(tmp_path, name="lost-node", search={"n_layers": [2]}, train=TRAIN)
        root = tmp_path / "sweeps"
        driver = subprocess.Popen(
            [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space_path), "--root",
             str(root), "--address", address, "--scheduler", "fifo", "--checkpoint-every", "0",
             "--max-failures", "2", "--no-progress"],
            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        (reports,) = _wait_for_reports(root, "lost-node", 2, driver).values()
        trial_pid = reports[-1]["pid"]
        (lost,) = [w for w in workers if w.pid == os.getsid(trial_pid)]  # the node running it
        seen = reports[-1]["step"]  # reported, so its checkpoint was stored before: not lost
        kill_node(lost)
        code, _, err = driver.wait(timeout=420), *driver.communicate()
        assert code == 0, err[-3000:]

        _check_curve(root, "lost-node", points=POINTS)  # each step once; the loss of an uninterrupted run
        (reports,) = _reports(root, "lost-node").values()
        retried = [r for r in reports if r["pid"] != trial_pid]
        assert retried
        resumed = {r[START_FIELD] for r in retried}
        assert len(resumed) == 1, resumed
        (resumed,) = resumed
        # At most one checkpoint interval lost: the retry began at the last evaluation the
        # driver had (or a later one), never from scratch.
        assert seen <= resumed < POINTS[-1], (seen, resumed)
        assert [r["step"] for r in retried] == [p for p in POINTS if p > resumed]
        (survivor,) = [w for w in workers if w is not lost]
        assert survivor.poll() is None and lost.poll() is not None
    finally:
        for node in (*workers, *([head] if head else [])):
            stop_node(node)
        shutil.rmtree(nodes_tmp, ignore_errors=True)
