"""Trial checkpoints: a killed worker costs at most one evaluation interval, and the curve
and final loss are those of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shapesweep.results.store import load_curves, load_trials, sweep_dir
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.trainable import START_FIELD
from shapesweep.trainers import checkpoint
from shapesweep.trainers.loop import StopTrial, train
from sweep_helpers import CHILD_ENV, TINY_TRAIN, run, write_space

from shapesweep.common import UserError

TINY = dict(family="conventional", d_model=16, n_layers=1, n_heads=2, d_h=64)
RECIPE = dict(steps=12, seq_len=32, batch_tokens=256, eval_tokens=1024, lr=1e-2, eval_every=4)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread, as a Ray trial worker has: the same arithmetic, bit for bit."""


def test_negative_max_failures_is_one_line_and_leaves_nothing(tmp_path, capsys):
    root = tmp_path / "sweeps"
    assert run("run", str(write_space(tmp_path)), "--root", str(root), "--max-failures", "-1") == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["shapesweep run: error: --max-failures: must be 0 or more"]
    assert not root.exists()


def test_weights_of_another_step_are_refused(tmp_path):
    def stop_at_8(metrics):
        if metrics["step"] == 8:
            raise StopTrial

    config, recipe = make_config(TINY), TrainConfig(**RECIPE)
    train(config, recipe, callback=stop_at_8, checkpoint_dir=str(tmp_path / "a"))
    train(config, recipe, checkpoint_dir=str(tmp_path / "b"))  # to the end: step 12
    assert checkpoint.saved_step(tmp_path / "a") == 8
    os.replace(tmp_path / "b" / checkpoint.WEIGHTS, tmp_path / "a" / checkpoint.WEIGHTS)
    with pytest.raises(UserError, match="weights are from step 12, the rest from step 8"):
        train(config, recipe, checkpoint_dir=str(tmp_path / "a"))


def _reports(root: Path, sweep: str) -> list[dict]:
    """Every evaluation report Tune logged for the sweep's trials, in order."""
    lines = [line for path in sorted((Path(sweep_dir(str(root), sweep)) / "_ray").glob(
        "*/*/result.json")) for line in path.read_text().splitlines()]
    return [report for report in map(json.loads, lines) if "step" in report]


def _wait_for_reports(root: Path, sweep: str, count: int, process: subprocess.Popen) -> list:
    deadline = time.monotonic() + 240
    while len(reports := _reports(root, sweep)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no evaluation was reported"
        time.sleep(0.02)
    return reports


@pytest.mark.slow
def test_a_trial_whose_worker_is_killed_continues_from_its_last_evaluation(tmp_path):
    every, steps = 40, 400  # ten evaluations, each well over the time to notice one
    space_path = write_space(tmp_path, name="lost-worker", search={"n_layers": [2]},
                             train={**TINY_TRAIN, "tokens": steps * TINY_TRAIN["batch_tokens"],
                                    "eval_every": every})
    root = tmp_path / "sweeps"
    driver = subprocess.Popen(
        [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space_path), "--root",
         str(root), "--scheduler", "fifo", "--no-progress"],
        env=CHILD_ENV, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    os.kill(_wait_for_reports(root, "lost-worker", 2, driver)[-1]["pid"], signal.SIGKILL)
    code, _, err = driver.wait(timeout=300), *driver.communicate()
    assert code == 0, err[-2000:]

    (row,) = load_trials(str(root), ["lost-worker"]).itertuples()
    assert row.status == "completed"
    curve = load_curves(str(root), ["lost-worker"])
    assert list(curve["step"]) == list(range(every, steps + 1, every))  # none repeated or missing
    starts = [report[START_FIELD] for report in _reports(root, "lost-worker")]
    resumed = starts[-1]  # the retry picked up at the evaluation before the kill, not at 0
    assert resumed >= 2 * every
    assert starts == [0] * (resumed // every) + [resumed] * ((steps - resumed) // every)
    document = json.loads(row.config_json)
    whole = train(make_config(document["model"] | {"family": document["family"]}),
                  TrainConfig(**document["train"]))
    assert row.val_loss == pytest.approx(whole.val_loss, abs=1e-6)
    assert list(curve["val_loss"]) == pytest.approx([m["val_loss"] for m in whole.curve], abs=1e-6)
    # The trial ended: its checkpoints are gone (no --keep-checkpoints).
    assert not list((Path(sweep_dir(str(root), "lost-worker")) / "_ray").glob("*/*/checkpoint_*"))
