"""Real sweeps end to end: real Ray Tune, real tiny training on the built-in corpus, real
Parquet rows checked against the plan, real SQLite (the catalog), a real `ray start` cluster
and an export trained by `shapesweep train`. (A driver SIGKILLed mid-sweep and resumed is
test_integrity_driver's sweep; ASHA with a poisoned candidate is test_trackers'; Optuna with
SQLite storage is test_sweep_more's multi-objective sweep and test_optuna_outputs'.)

The in-process tests share one local Ray instance (started once here) to keep the file
to a few minutes on 2 cores; the cluster test runs the driver as a subprocess.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sweep_helpers import (
    CHILD_ENV,
    TINY_TRAIN,
    pairs,
    raw_trial_rows,
    run,
    write_space,
)

from shapesweep.common import UserError
from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.store import load_curves, load_trials, write_sweep_file
from shapesweep.search_spaces.solver import candidate_document, plan
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main as shapesweep
from shapesweep.sweep.driver.sweep_files import check_saved_space as _check_saved_space
from shapesweep.sweep.driver.sweep_files import space_hash as _space_hash

pytestmark = pytest.mark.slow


def test_grid_rows_match_plan_then_rerun_is_noop_and_export_round_trips(local_ray, tmp_path, capsys):
    # 40 layers of attention alone exceed the budget: the run says so before it starts.
    space_path = write_space(tmp_path, search={"n_layers": [1, 2, 3, 4, 40]})
    root = tmp_path / "sweeps"
    assert run("run", str(space_path), "--root", str(root), "--scheduler", "fifo",
               "--max-concurrent", "2") == 0
    notices = capsys.readouterr().err.splitlines()
    assert notices[:2] == ["tiny-depths: 5 raw points -> 5 feasible -> 4 within tolerance -> "
                           "4 unique candidates", "dropped 1 of 5 grid points:"]
    assert notices[2].startswith("  conventional: n_layers=40: closest budget error +")

    space = load_space(space_path)
    candidates = {c.key: c for c in plan(space).candidates}
    trials = load_trials(str(root), ["tiny-depths"])
    assert sorted(trials["key"]) == sorted(candidates)
    for row in trials.to_dict("records"):
        candidate = candidates[row["key"]]
        assert row["trial_id"] == f"{row['key']}-s0" and row["seed"] == 0
        assert row["status"] == "completed" and pd.isna(row["error"])
        assert row["tokens"] == TINY_TRAIN["tokens"] and row["steps"] == 16
        assert math.isfinite(row["val_loss"]) and row["val_loss"] < math.log(256)
        assert row["best_val_loss"] <= row["val_loss"] + 1e-12
        for column, value in candidate.to_row().items():
            if column in trials.columns and not isinstance(value, list):
                assert row[column] == pytest.approx(value), column
        train = space.train.model_copy(update={"seed": 0})
        assert json.loads(row["config_json"]) == candidate_document(candidate, train)
        assert row["data_hash"] and row["code_version"]
    curves = load_curves(str(root), ["tiny-depths"])
    for _trial_id, curve in curves.groupby("trial_id"):
        assert list(curve["tokens"]) == sorted(curve["tokens"]) and curve["tokens"].max() == 8192

    record = Catalog(default_catalog_url(root)).get("tiny-depths")
    assert record.status == "finished" and len(trials) == 4  # every row completed (above)

    # Same name and space again: nothing is missing, so nothing runs and nothing is added.
    assert run("run", str(space_path), "--root", str(root)) == 0
    assert len(raw_trial_rows(root, "tiny-depths")) == 4

    # Export the best two; `shapesweep train` accepts each file unchanged.
    out = tmp_path / "best"
    assert run("export", "tiny-depths", "--root", str(root), "--top", "2", "--out", str(out)) == 0
    files = sorted(out.glob("*.yaml"))
    assert len(files) == 2
    best = trials.sort_values("val_loss").iloc[0]
    exported = yaml.safe_load(files[0].read_text())
    assert exported["provenance"]["trial_id"] == best["trial_id"]
    assert exported["provenance"]["sweep"] == "tiny-depths"
    assert exported["metrics"]["val_loss"] == pytest.approx(best["val_loss"])
    trained = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "train", str(files[0]), "--json"],
                             capture_output=True, text=True, timeout=300, env=CHILD_ENV)
    assert trained.returncode == 0, trained.stderr
    metrics = json.loads(trained.stdout.strip().splitlines()[-1])
    # Same config, same seed, same data: the trial's result is reproduced.
    assert metrics["val_loss"] == pytest.approx(best["val_loss"], rel=1e-4)


def test_different_space_under_the_same_name_is_refused(tmp_path, capsys):
    root = tmp_path / "sweeps"
    Catalog(default_catalog_url(root)).register("tiny-depths", "other", "name: other\n",
                                                "0123456789ab", 3)
    assert shapesweep(["run", str(write_space(tmp_path)), "--root", str(root)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "different search space" in error[0]


def test_a_folder_holding_another_spaces_trials_is_refused(tmp_path, capsys):
    # A sweep folder copied into a fresh root has no catalog row, but its space.yaml says
    # whose trials it holds; a changed space under that name would mislabel them.
    root = tmp_path / "sweeps"
    space_path = write_space(tmp_path)
    write_sweep_file(str(root), "tiny-depths", "space.yaml", space_path.read_text())
    (tmp_path / "changed").mkdir()
    changed = write_space(tmp_path / "changed", search={"n_layers": [1, 5]})
    assert shapesweep(["run", str(changed), "--root", str(root)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "already holds trials of a different search space" in error[0]
    assert Catalog(default_catalog_url(root)).get("tiny-depths") is None  # nothing registered
    # Comments and formatting do not make another space; a changed value does.
    space = load_space(space_path)
    _check_saved_space("tiny-depths", "# a comment\n" + space_path.read_text(), space)
    assert _space_hash(space_path.read_text()) == space.space_hash  # what the catalog rereads
    with pytest.raises(UserError, match="different search space"):
        _check_saved_space("tiny-depths", changed.read_text(), space)


def test_run_against_a_real_ray_start_cluster(tmp_path):
    """`ray start --head` on loopback with token auth, then `run --address` joins it."""
    import secrets
    import shutil
    import tempfile

    from ray_nodes import start_head, stop_node

    token = tmp_path / "auth_token"
    token.write_text(secrets.token_hex(32))
    # RAY_AUTH_MODE unset: the head turns token auth on because a token exists, and the
    # driver must find and send the same token by itself (a bare `ray.init`, the probe, is
    # told to).
    env = {k: v for k, v in CHILD_ENV.items() if k != "RAY_AUTH_MODE"}
    env["RAY_AUTH_TOKEN_PATH"] = str(token)
    node_tmp = Path(tempfile.mkdtemp(prefix="ss-head-"))  # short: Ray's socket paths must fit
    head, address = start_head(node_tmp, 2, env, probe_env={**env, "RAY_AUTH_MODE": "token"})
    try:
        space_path = write_space(tmp_path, name="on-cluster", search={"n_layers": [1, 2]})
        root = tmp_path / "sweeps"
        driver = subprocess.run(
            [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space_path), "--root", str(root),
             "--address", address, "--scheduler", "fifo", "--no-progress"],
            env=env, capture_output=True, text=True, timeout=300)
        assert driver.returncode == 0, driver.stderr[-2000:]
        trials = load_trials(str(root), ["on-cluster"])
        assert sorted(trials["key"]) == sorted(k for k, _ in pairs(space_path))
        assert (trials["status"] == "completed").all()
    finally:
        stop_node(head)
        shutil.rmtree(node_tmp, ignore_errors=True)
