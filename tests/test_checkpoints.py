"""Trial checkpoints: a killed worker costs at most the checkpoint interval (one evaluation
interval with `--checkpoint-every 0`), and the curve and final loss are those of a run that
was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sweep_helpers import CHILD_ENV, TINY_TRAIN, run, write_space

from shapesweep.common import UserError
from shapesweep.results import live
from shapesweep.results.store import load_curves, load_trials, sweep_dir
from shapesweep.search_spaces.cadence import eval_steps
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.driver.trainable import START_FIELD, TRIAL_FOLDER_PREFIX, remove_orphans
from shapesweep.trainers import checkpoint
from shapesweep.trainers.loop import StopTrial, train

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


@pytest.mark.parametrize(("every", "saved"), [
    (0.0, [4, 8, 12]),  # every evaluation
    (1e9, [None, None, None]),  # the interval never passes
])
def test_a_trial_checkpoints_once_its_interval_has_passed(tmp_path, every, saved):
    seen = []
    result = train(make_config(TINY), TrainConfig(**RECIPE), checkpoint_dir=str(tmp_path),
                   checkpoint_every_s=every,
                   callback=lambda metrics: seen.append(checkpoint.saved_step(tmp_path)))
    assert seen == saved
    assert [m["step"] for m in result.curve] == [4, 8, 12]


def _reports(root: Path, sweep: str) -> dict[str, list[dict]]:
    """Every evaluation report Tune logged for the sweep, by driver run (oldest first)."""
    runs = sorted(p for p in (Path(sweep_dir(str(root), sweep)) / "_ray").glob("*") if p.is_dir())
    return {run.name: [report for path in sorted(run.glob("*/result.json"))
                       for report in map(json.loads, path.read_text().splitlines())
                       if "step" in report] for run in runs}


def _wait_for_reports(root: Path, sweep: str, count: int, process: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 240
    while sum(map(len, (reports := _reports(root, sweep)).values())) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no evaluation was reported"
        time.sleep(0.02)
    return reports


def _start(space_path: Path, root: Path, *options: str) -> subprocess.Popen:
    """A driver of one long trial (ten evaluations) in its own process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space_path), "--root",
         str(root), "--scheduler", "fifo", "--no-progress", *options],
        env=CHILD_ENV, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


EVERY, STEPS = 40, 400  # ten evaluations, each well over the time it takes to notice one
LONG_TRAIN = {**TINY_TRAIN, "tokens": STEPS * TINY_TRAIN["batch_tokens"], "eval_every": EVERY}
POINTS = eval_steps(TrainConfig(**LONG_TRAIN), STEPS, TINY_TRAIN["batch_tokens"])  # + an early look


def _space(tmp_path: Path, name: str) -> Path:
    return write_space(tmp_path, name=name, search={"n_layers": [2]}, train=LONG_TRAIN)


def _check_curve(root: Path, sweep: str, save_dir: Path | None = None, points: list[int] = POINTS):
    """The sweep's one trial completed with the curve (evaluations at `points`) and final loss
    of an uninterrupted run."""
    (row,) = load_trials(str(root), [sweep]).itertuples()
    assert row.status == "completed"
    curve = load_curves(str(root), [sweep])
    assert list(curve["step"]) == points  # none repeated or missing
    document = json.loads(row.config_json)
    whole = train(make_config(document["model"] | {"family": document["family"]}),
                  TrainConfig(**document["train"]), save_dir=save_dir)
    assert row.val_loss == pytest.approx(whole.val_loss, abs=1e-6)
    assert list(curve["val_loss"]) == pytest.approx([m["val_loss"] for m in whole.curve], abs=1e-6)


def _check_continued(reports: list[dict]) -> None:
    """Every attempt of the trial after the first continued from the evaluation reported just
    before it: each evaluation is reported once, in order, and a report's start is its
    attempt's (the one before's) or, for a new attempt, the step reported last. On a busy
    machine the retry may itself be retried (`[0, 0, 40, 80, ...]`), each from its last
    evaluation; an attempt that started over, or from an older checkpoint, repeats steps."""
    steps = [report["step"] for report in reports]
    starts = [report[START_FIELD] for report in reports]
    assert steps == POINTS, steps  # none repeated: no attempt went back
    assert starts[0] == 0 and starts[-1] >= POINTS[1], starts  # it continued, past 2 evaluations
    for i in range(1, len(reports)):
        assert starts[i] in (starts[i - 1], steps[i - 1]), (i, steps, starts)


def _resumed_at(starts: list[int]) -> int:
    """Where an attempt that continued from a checkpoint started (one value, past 2 evaluations)."""
    assert len(set(starts)) == 1 and starts[0] >= POINTS[1], starts
    return starts[0]


@pytest.mark.slow
def test_a_trial_whose_worker_is_killed_continues_from_its_last_evaluation(tmp_path):
    space_path, root = _space(tmp_path, "lost-worker"), tmp_path / "sweeps"
    driver = _start(space_path, root, "--keep-checkpoints")  # implies --checkpoint-every 0
    (reports,) = _wait_for_reports(root, "lost-worker", 2, driver).values()
    os.kill(reports[-1]["pid"], signal.SIGKILL)
    code, _, err = driver.wait(timeout=300), *driver.communicate()
    assert code == 0, err[-2000:]
    # the killed worker's checkpoint folder went with the retry's start (`trial_folder`)
    assert not _folders_of(reports[-1]["pid"])

    _check_curve(root, "lost-worker", save_dir=tmp_path / "whole")
    (reports,) = _reports(root, "lost-worker").values()
    _check_continued(reports)

    # --keep-checkpoints: the exported weights are the trial's last, those of the whole run.
    assert run("export", "lost-worker", "--root", str(root), "--top", "1", "--format", "torch",
               "--weights", "--out", str(tmp_path / "out")) == 0
    (exported,) = (tmp_path / "out").glob(f"*/{checkpoint.WEIGHTS}")
    whole = load_file(str(tmp_path / "whole" / checkpoint.WEIGHTS))
    assert load_file(str(exported)).keys() == whole.keys()
    assert all(torch.allclose(t, whole[n], atol=1e-6) for n, t in load_file(str(exported)).items())


def _folders_of(pid: int) -> list[Path]:
    owner = f"{TRIAL_FOLDER_PREFIX}{socket.gethostname()}-{pid}-"
    return list(Path(tempfile.gettempdir()).glob(f"{owner}*"))


def test_the_folders_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    owner = f"{TRIAL_FOLDER_PREFIX}test-{os.getpid()}-{tmp_path.name}-"  # this test's alone
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = Path(tempfile.mkdtemp(prefix=f"{owner}{gone.stdout.strip()}-"))
    (dead / checkpoint.FILENAME).write_bytes(b"x" * 1000)
    live_folder = Path(tempfile.mkdtemp(prefix=f"{owner}{os.getpid()}-"))
    # a host named as this one with "-7" added: its folders are not this host's to judge
    other_host = Path(tempfile.mkdtemp(prefix=f"{owner}7-{gone.stdout.strip()}-"))
    try:
        assert remove_orphans(owner) == [str(dead)]
        assert not dead.exists() and live_folder.is_dir() and other_host.is_dir()
    finally:
        live_folder.rmdir()
        other_host.rmdir()


@pytest.mark.slow
def test_a_trial_killed_before_its_first_checkpoint_starts_again_and_lands_each_point_once(
        tmp_path):
    """Under the default interval this short trial saves no checkpoint: its retry trains from
    step 0 and evaluates again what the killed attempt reported, which the curve holds once."""
    space_path, root = _space(tmp_path, "no-checkpoint"), tmp_path / "sweeps"
    driver = _start(space_path, root)
    deadline = time.monotonic() + 240
    while len(live.load_live(str(root), ["no-checkpoint"])[1]) < 3:  # the driver's live curve
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, "no evaluation was reported"
        time.sleep(0.02)
    killed = _trial_worker(driver)
    os.kill(killed, signal.SIGKILL)
    code, _, err = driver.wait(timeout=300), *driver.communicate()
    assert code == 0, err[-2000:]
    _check_curve(root, "no-checkpoint")  # the points made again replaced the lost attempt's
    (reports,) = _reports(root, "no-checkpoint").values()
    assert {report[START_FIELD] for report in reports} == {0}
    assert [r["step"] for r in reports if r["pid"] != killed] == POINTS  # all made again


def _trial_worker(driver: subprocess.Popen) -> int:
    """The pid of the Ray worker running the trial of `driver` (in its session)."""
    import psutil

    (pid,) = [p.pid for p in psutil.process_iter(["cmdline"])
              if (p.info["cmdline"] or [""])[0].startswith("ray::ImplicitFunc")
              and os.getsid(p.pid) == driver.pid]
    return pid


@pytest.mark.slow
def test_resume_of_a_killed_driver_continues_the_trial_from_its_checkpoint(local_ray, tmp_path, capsys):
    space_path, root = _space(tmp_path, "lost-driver"), tmp_path / "sweeps"
    driver = _start(space_path, root, "--checkpoint-every", "0")
    _wait_for_reports(root, "lost-driver", 2, driver)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray it started
    driver.wait()
    assert run("resume", "lost-driver", "--root", str(root)) == 0

    _check_curve(root, "lost-driver")
    first, second = _reports(root, "lost-driver").values()
    assert {report[START_FIELD] for report in first} == {0}
    resumed = _resumed_at([report[START_FIELD] for report in second])
    assert [r["step"] for r in second] == POINTS  # replayed first
    assert resumed <= POINTS[min(len(first), len(POINTS) - 1)]
    # The trial ended: its checkpoints are gone, from both runs, and export says so.
    assert not list((Path(sweep_dir(str(root), "lost-driver")) / "_ray").glob("*/*/checkpoint_*"))
    capsys.readouterr()
    assert run("export", "lost-driver", "--root", str(root), "--top", "1", "--format", "torch",
               "--weights", "--out", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "kept no checkpoint of trial" in error[0], error
    assert not (tmp_path / "out").exists()


def _checkpoint_at(step: int, folder: Path) -> Path:
    """A real checkpoint of TINY's trial at `step` (training stopped there)."""
    def stop(metrics):
        if metrics["step"] == step:
            raise StopTrial

    train(make_config(TINY), TrainConfig(**RECIPE), callback=stop, checkpoint_dir=str(folder),
          checkpoint_every_s=0)
    assert checkpoint.saved_step(folder) == step
    return folder


@pytest.mark.parametrize("how", ["found in the Ray folder", "restored by Tune"])
@pytest.mark.parametrize("damaged", [checkpoint.FILENAME, checkpoint.WEIGHTS])
def test_a_truncated_newest_checkpoint_falls_back_to_the_older_intact_one(tmp_path, capfd, how, damaged):
    """`resume` (and `--retry-failed`) after a kill that truncated the newest checkpoint: the
    trial continues from the older intact one, at its step, saying so in one line, and ends
    with the curve of a run never interrupted."""
    from ray.tune import Checkpoint

    from shapesweep.sweep.driver.trainable import _restore

    ray_folder = tmp_path / "_ray"
    older = _checkpoint_at(4, ray_folder / "run-1" / "t0" / "checkpoint_000000")
    newest = _checkpoint_at(8, ray_folder / "run-2" / "t0" / "checkpoint_000001")
    path = newest / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    capfd.readouterr()

    folder = tmp_path / "trial"
    folder.mkdir()
    restored = Checkpoint.from_directory(str(newest)) if how == "restored by Tune" else None
    replay = _restore(str(folder), "t0", str(ray_folder), "run-3", restored)
    (line,) = [ln for ln in capfd.readouterr().err.splitlines() if "checkpoint" in ln]
    assert f"trial t0: damaged checkpoint(s) passed over ({newest}: {damaged} cannot be read" in line
    assert line.endswith(f"continuing from {older} (step 4)")
    assert checkpoint.saved_step(folder) == 4 and [m["step"] for m in replay] == [4]

    resumed = train(make_config(TINY), TrainConfig(**RECIPE), checkpoint_dir=str(folder))
    whole = train(make_config(TINY), TrainConfig(**RECIPE))
    assert [m["step"] for m in resumed.curve] == [4, 8, 12]
    assert resumed.curve[-1]["val_loss"] == whole.curve[-1]["val_loss"]  # the same arithmetic


def test_no_intact_checkpoint_starts_the_trial_from_step_0(tmp_path, capfd):
    from shapesweep.sweep.driver.checkpoints import latest

    ray_folder = tmp_path / "_ray"
    only = _checkpoint_at(4, ray_folder / "run-1" / "t0" / "checkpoint_000000")
    (only / checkpoint.FILENAME).write_bytes(b"")
    capfd.readouterr()
    assert latest(ray_folder, "t0") is None
    (line,) = capfd.readouterr().err.splitlines()
    assert str(only) in line and line.endswith("no intact checkpoint: starting from step 0")
