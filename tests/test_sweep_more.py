"""The sweep paths issue 4 promises beyond the happy run: `--retry-failed` reruns failed
trials, a multi-objective (NSGA-II) Optuna search, `status`. (That Ctrl-C leaves a resumable
sweep, with plain progress lines when stdout is not a terminal, is test_integrity_driver's
Ctrl-C, SIGKILL and resume sweep.)

Real Ray Tune, real tiny training on real data, real Parquet and SQLite; the tests share one
local Ray started here.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from sweep_helpers import TINY_SPACE, TINY_TRAIN, pairs, raw_trial_rows, run
from sweep_helpers import write_space as write_tiny_space

from shapesweep.families.base import candidate_label
from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.store import load_trials
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main as shapesweep

pytestmark = pytest.mark.slow

# Conventional LM, d_model 32: each depth gets the d_h that meets the budget.
TRAIN = {**TINY_TRAIN, "tokens": 4096, "eval_tokens": 1024}
TINY = {**TINY_SPACE, "name": "tiny-more", "search": {"n_layers": [1, 2]}, "train": TRAIN}
# A second variant whose model reads only 100 token ids: it fails on data that uses more.
POISON_VARIANTS = [{"name": "ok"},
                   {"name": "poison", "fixed": {"vocab_size": 100}, "search": {"n_layers": [2]}}]
def write_space(folder: Path, **changes) -> Path:
    return write_tiny_space(folder, TINY, **changes)


def write_tokens(path: Path, top: int) -> None:
    """A real token stream (the built-in corpus's bytes) folded into ids below `top`."""
    from shapesweep.trainers.data import load_lm_data

    tokens = (np.asarray(load_lm_data().train[:60_000]) % top).astype(np.uint16)
    tmp = path.with_name(f".{path.name}.tmp.npy")
    np.save(tmp, tokens)
    os.replace(tmp, path)


def finished(trials, rows) -> dict[str, object]:
    """trial_id -> finished_at of the selected rows: a trial that ran again has a new one."""
    return dict(zip(trials["trial_id"][rows], trials["finished_at"][rows], strict=True))


@pytest.fixture(scope="module")
def poisoned(shared_ray, tmp_path_factory):
    """One real sweep of three candidates, one of which fails (its model reads 100 token ids,
    the data holds 150): (its space, its root, its data file). `status` reads it as it is;
    `--retry-failed` resumes a copy."""
    tmp = tmp_path_factory.mktemp("poisoned")
    data = tmp / "tokens.npy"
    write_tokens(data, top=150)  # fits vocab_size 256, not the poison variant's 100
    space_path = write_space(tmp, name="retry", variants=POISON_VARIANTS)
    root = tmp / "sweeps"
    shared_ray.start()
    assert run("run", str(space_path), "--root", str(root), "--data", str(data),
               "--scheduler", "fifo", "--max-concurrent", "2") == 1  # a trial failed
    return space_path, root, data


def test_retry_failed_reruns_only_failed_trials(local_ray, poisoned, tmp_path):
    from shapesweep.trainers.data import load_lm_data

    space_path, ran, data = poisoned
    root = tmp_path / "sweeps"  # a copy (its links as links): the status test reads the original
    shutil.copytree(ran, root, symlinks=True)
    first = load_trials(str(root), ["retry"])
    assert set(zip(first["key"], first["seed"], strict=True)) == pairs(space_path)
    failed = first[first["status"] == "failed"]
    assert len(failed) == 1 and (failed["vocab_size"] == 100).all()
    assert failed["error"].str.contains("vocab_size").all()
    assert (first[first["status"] != "failed"]["status"] == "completed").all()
    assert len(raw_trial_rows(root, "retry")) == 3

    # Nothing fixed, no flag: the failed trial counts as done, so nothing runs (the sweep
    # still holds a failed trial: exit 1).
    assert run("resume", "retry", "--root", str(root)) == 1
    assert len(raw_trial_rows(root, "retry")) == 3

    # --retry-failed: only the failed trial runs again; it fails again, and its new row
    # is the one readers see (the driver compacts the sweep when it ends: one row per trial).
    assert run("resume", "retry", "--root", str(root), "--retry-failed") == 1
    assert len(raw_trial_rows(root, "retry")) == 3
    again = load_trials(str(root), ["retry"])
    assert finished(again, ~again["trial_id"].isin(failed["trial_id"])) == finished(
        first, first["status"] != "failed")  # the others did not run again
    retried = again[again["trial_id"] == failed["trial_id"].iloc[0]].iloc[0]
    assert retried["status"] == "failed"
    assert retried["finished_at"] > failed["finished_at"].iloc[0]
    assert (again["status"] == "failed").sum() == 1

    # Fix the data (ids below 100 now; the sweep reads the file it was given) and retry: the
    # trial trains and completes.
    write_tokens(data, top=100)
    assert run("resume", "retry", "--root", str(root), "--retry-failed") == 0
    final = load_trials(str(root), ["retry"])
    assert finished(final, ~final["trial_id"].isin(failed["trial_id"])) == finished(
        first, first["status"] != "failed")
    assert (final["status"] == "completed").all()
    fixed = final[final["trial_id"] == failed["trial_id"].iloc[0]].iloc[0]
    assert math.isfinite(fixed["val_loss"]) and fixed["tokens"] == TRAIN["tokens"]
    assert fixed["data_hash"] == load_lm_data(str(data)).data_hash != first["data_hash"].iloc[0]
    # each row names the machine it ran on: this one, its torch, its CPU, one thread a trial
    assert final[["torch_version", "device_name", "torch_threads"]].drop_duplicates().values.tolist() == [
        [torch.__version__, "cpu", 1]]
    assert (final["cpu_model"].str.len() > 0).all()
    record = Catalog(default_catalog_url(root)).get("retry")
    assert record.status == "finished" and len(final) == 3  # every row completed (above)
    # Everything done: another retry has nothing to run.
    assert run("resume", "retry", "--root", str(root), "--retry-failed") == 0
    assert finished(load_trials(str(root), ["retry"]), slice(None)) == finished(final, slice(None))


def test_multi_objective_optuna_search_uses_two_objectives(local_ray, tmp_path):
    import optuna
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    space_path = write_space(tmp_path, name="nsga", search={"n_layers": [1, 2, 3, 4, 8]})
    root = tmp_path / "sweeps"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    assert run("run", str(space_path), "--root", str(root), "--search", "optuna",
               "--multi-objective", "--num-samples", "3", "--storage", storage,
               "--scheduler", "fifo", "--max-concurrent", "2") == 0
    study = optuna.load_study(study_name="nsga", storage=storage)
    assert study.directions == [StudyDirection.MINIMIZE, StudyDirection.MINIMIZE]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE
                and "duplicate_of" not in t.user_attrs]
    assert len(complete) == 3
    trials = load_trials(str(root), ["nsga"])
    assert sorted(trials["trial_id"]) == sorted(t.user_attrs["trial_id"] for t in complete)
    for t in complete:
        row = trials[trials["trial_id"] == t.user_attrs["trial_id"]].iloc[0]
        assert len(t.values) == 2
        assert t.values[0] == pytest.approx(row["val_loss"])
        assert t.values[1] == pytest.approx(row["params_non_embedding"])
    for t in study.trials:  # 8 layers cannot meet the budget: pruned before training
        if t.params["n_layers"] == 8:
            assert t.state == TrialState.PRUNED and t.user_attrs.get("infeasible")
    assert len(study.best_trials) >= 1  # the Pareto front of a 2-objective study
    # The catalog lives in the study's storage (test_sweep_run's single-objective sqlite sweep
    # of the same space showed this and the pruning and the continuation below: 17.8 s quiet).
    assert Catalog(storage).get("nsga").status == "finished"

    # Continuing the study to 4 completed trials in all keeps both objectives.
    assert run("resume", "nsga", "--root", str(root)) == 0
    assert run("run", str(space_path), "--root", str(root), "--search", "optuna",
               "--multi-objective", "--num-samples", "4", "--storage", storage,
               "--scheduler", "fifo") == 0
    study = optuna.load_study(study_name="nsga", storage=storage)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE
                and "duplicate_of" not in t.user_attrs]
    assert len(complete) == 4 and all(len(t.values) == 2 for t in complete)
    assert len(load_trials(str(root), ["nsga"])) == 4


def test_status_lists_sweeps_and_one_sweeps_best_trials(poisoned, capsys, monkeypatch):
    space_path, root, _ = poisoned
    trials = load_trials(str(root), ["retry"])
    completed = trials[trials["status"] == "completed"].sort_values("val_loss")
    best = completed.iloc[0]
    space = load_space(space_path)
    capsys.readouterr()

    monkeypatch.setenv("COLUMNS", "300")  # rich wraps at 80 columns off a terminal
    assert shapesweep(["status", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip("│┃ ").startswith("retry "))
    cells = [cell.strip() for cell in row.strip("│┃").split("│")]
    assert cells == ["retry", "retry", "finished", "2 completed, 1 failed (of 3)",
                     f"{best['val_loss']:.4f}"]

    assert shapesweep(["status", "retry", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"space retry ({space.space_hash})" in out and "status finished" in out
    assert "3 candidates, 3 trials" in out  # the failed one is listed too, with why it has no verdict
    assert "completed: 2  failed: 1" in out
    rows = [line for line in out.splitlines() if re.match(r"^[│┃]\s*(ok|poison) ", line)]
    order = [line.strip("│┃ ").split("│")[0].strip() for line in rows]
    # Best first by val_loss, the failed trial (no loss) last, with its error; named by
    # variant and shape, not by trial id.
    failed = trials[trials["status"] == "failed"]
    assert order == [candidate_label(row) for row in [*completed.to_dict("records"), *failed.to_dict("records")]]
    assert order[-1].startswith("poison 32×2L")
    assert "failed" in rows[-1] and "UserError" in rows[-1]  # the error, cut to 60 characters

    assert shapesweep(["status", "nope", "--root", str(root)]) == 2
    assert "no sweep named 'nope'" in capsys.readouterr().err


def _read_pty(master: int) -> str:
    import select

    chunks = []
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunks.append(os.read(master, 65536))
        except OSError:  # the other end closed
            break
    return b"".join(chunks).decode()


@pytest.mark.parametrize("on_terminal", [True, False])
def test_progress_is_a_live_table_on_a_terminal_and_plain_lines_elsewhere(on_terminal):
    """On a pty the live table ends with its own line end, so the next line starts clean;
    off a terminal nothing but plain lines is written."""
    import io

    from rich.console import Console

    from shapesweep.sweep.driver.progress import SweepProgress

    master, replica = os.openpty()
    stream = os.fdopen(replica, "w") if on_terminal else io.StringIO()
    try:
        progress = SweepProgress(total=2, console=Console(file=stream, width=100), out=stream)
        assert progress.mode == ("live" if on_terminal else "plain")
        baseline = {"family": "conventional", "variant": "baseline", "d_model": 64, "n_layers": 4,
                    "d_h": 256}
        hourglass = {"family": "hourglass", "variant": "hourglass", "d_model": 80, "n_layers": 6,
                     "d_h": 37, "k": 2}
        with progress:
            progress.finished("t1", "completed", "abc-s0", None,
                              {"key": "abc", "seed": 0, "val_loss": 4.5, "tokens": 4096,
                               "wall_time_s": 1.25, **baseline})
            progress.finished("t2", "failed", "def-s0", "ValueError: boom",
                              {"key": "def", "seed": 0, **hourglass})
        print("sweep X: finished", file=stream, flush=True)
        text = _read_pty(master) if on_terminal else stream.getvalue()
    finally:
        stream.close()
        os.close(master)
    if on_terminal:
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # cursor and colour codes
        before, _, _ = plain.partition("sweep X: finished")
        assert "shapesweep" in before and before.endswith("\n"), repr(before[-80:])
        assert "trial hourglass 80×6L d_h=37 k=2, seed 0 failed:" in before
        assert "ValueError: boom" in before
    else:
        assert text.splitlines() == [
            "trial 1/2 completed: baseline 64×4L d_h=256, seed 0: val_loss=4.5000 tokens=4096 "
            "elapsed=1.2s key=abc",
            "trial 2/2 failed: hourglass 80×6L d_h=37 k=2, seed 0: val_loss=- tokens=- "
            "elapsed=-s key=def error=ValueError: boom",
            text.splitlines()[2],
            "sweep X: finished",
        ]
        assert re.fullmatch(r"sweep done: 2 of 2 trials ended this run \(1 completed, 0 stopped "
                            r"early, 1 failed\); best val_loss 4\.5000 \(baseline 64×4L d_h=256, "
                            r"seed 0\); \d+s", text.splitlines()[2])


def test_ctrl_c_while_a_row_is_filed_lands_after_it():
    """The results writer files a row, its curve and the counts under `sigint_deferred`."""
    from shapesweep.sweep.driver.runner import sigint_deferred

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the signal is delivered here, and held
            steps.append("filed")
    assert steps == ["filed"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with sigint_deferred():  # no Ctrl-C: nothing raised
        steps.append("quiet")
    assert steps == ["filed", "quiet"]
