"""`shapesweep run --log-to mlflow|wandb|tensorboard` (issue 15): one tracker run per trial,
named by its trial id and tagged with the sweep, family and shape, with the learning curve
as metric history; bad targets and missing extras refused in one line before any work.

Offline and real: an MLflow file store read back with `mlflow.search_runs`, TensorBoard
event files read back with TensorBoard's EventAccumulator, W&B in offline mode.
"""

from __future__ import annotations

import sys

import pytest
from sweep_helpers import TINY_SPACE, TINY_TRAIN, pairs, raw_trial_rows, run, write_space

from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.store import load_curves, load_trials, sweep_dir
from shapesweep.search_spaces.solver import SHAPE_COLUMNS

SPACE = {**TINY_SPACE, "name": "tracked", "search": {"n_layers": [1, 2]},
         "train": {**TINY_TRAIN, "tokens": 4096}}


@pytest.mark.parametrize(("argv", "problem"), [
    (["--log-to", "neptune"], "--log-to: unknown tracker 'neptune' (mlflow, wandb, tensorboard)"),
    (["--log-to", "tensorboard", "--log-to", "mlflow"],
     "--log-to: mlflow needs the mlflow extra: pip install 'shapesweep[mlflow]'"),
])
def test_bad_targets_are_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv, problem):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # Python's own "not installed" marker
    root = tmp_path / "sweeps"
    assert run("run", str(write_space(tmp_path, SPACE)), "--root", str(root), *argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"shapesweep run: error: {problem}"
    assert not root.exists()


@pytest.mark.own_ray  # it asserts this process started no Ray
@pytest.mark.parametrize(("uri", "problem"), [
    ("file:{tmp}/mlruns", "MLflow 3 no longer writes its file store"),
    ("nowhere://tracking", "nowhere://tracking"),
])
def test_mlflow_settings_it_cannot_use_are_one_line_before_ray_starts(tmp_path, capsys, monkeypatch,
                                                                       uri, problem):
    import ray

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.format(tmp=tmp_path))
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    root = tmp_path / "sweeps"
    assert run("run", str(write_space(tmp_path, SPACE)), "--root", str(root), "--log-to",
               "mlflow") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "MLFLOW_TRACKING_URI" in err and problem in err, err
    assert not root.exists() and not (tmp_path / "mlruns").exists() and not ray.is_initialized()


ENDINGS = {**SPACE, "name": "endings", "search": {"n_layers": [1]},
           "tune": {"lr": [3.0e-3, 1.0e-5]},  # the second is far worse: ASHA stops it
           "variants": [{"name": "ok"}, {"name": "poison", "fixed": {"vocab_size": 100}}]}


@pytest.fixture(scope="module")
def endings(shared_ray, tmp_path_factory):
    """One real sweep logged to all three trackers, read by the tests below: (root, its rows,
    the folder W&B wrote to). Its trials end in every way (completed, stopped_early by ASHA,
    failed: a vocabulary the data overflows); those that trained have curves."""
    tmp = tmp_path_factory.mktemp("endings")
    root = tmp / "sweeps"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_DIR", str(tmp))
        shared_ray.start()
        assert run("run", str(write_space(tmp, ENDINGS)), "--root", str(root), "--seeds", "2",
                   "--scheduler", "asha", "--grace-tokens", "1024", "--reduction-factor", "2",
                   "--max-concurrent", "2", "--max-failures", "0", "--log-to", "mlflow",
                   "--log-to", "tensorboard", "--log-to", "wandb") == 1  # its poison trials failed
        yield root, load_trials(str(root), ["endings"]).set_index("trial_id"), tmp


@pytest.mark.slow
def test_asha_stops_some_trials_and_a_poisoned_candidate_fails(endings):
    """The sweep itself, trackers aside (what test_sweep_run's own 12-trial ASHA sweep showed):
    the `poison` variant's vocabulary of 100 is overflowed by the byte corpus's 256 ids, so its
    trials raise inside the trainable and the sweep records them and goes on; lr 1e-5, clearly
    worse than 3e-3, is stopped by ASHA, both seeds at once. Each (key, seed, lr) lands once."""
    root, rows, tmp = endings
    trials = rows.reset_index()
    expected = pairs(tmp / "endings.yaml", seeds=(0, 1))
    assert set(zip(trials["key"], trials["seed"], strict=True)) == expected
    assert len(raw_trial_rows(root, "endings")) == len(trials) == 2 * len(expected)  # 2 lrs
    by_status = trials.groupby("status").size().to_dict()
    assert by_status == {"completed": 2, "failed": 4, "stopped_early": 2}, by_status
    failed = trials[trials["status"] == "failed"]
    assert (failed["vocab_size"] == 100).all()
    assert failed["error"].str.contains("vocab_size").all()
    stopped = trials[trials["status"] == "stopped_early"]
    assert (stopped["tokens"] < SPACE["train"]["tokens"]).all()
    assert (stopped.groupby(["key", "tuned_json"]).size() == 2).all()  # stopped whole
    assert Catalog(default_catalog_url(root)).get("endings").status == "finished"


@pytest.mark.slow
def test_each_tracker_run_is_tagged_with_how_its_trial_ended(endings):
    """completed, stopped_early (ASHA) and failed, as the trial's row says: an MLflow tag, a
    TensorBoard text summary, a W&B config value."""
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, rows, wandb_dir = endings
    # the noise-aware ASHA judges each candidate on its 2 seeds and stops lr 1e-5 whole
    assert sorted(rows["status"]) == ["completed"] * 2 + ["failed"] * 4 + ["stopped_early"] * 2

    client = MlflowClient()
    (experiment,) = client.search_experiments(filter_string="name = 'endings'")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert {name: r.data.tags["status"] for name, r in runs.items()} == rows["status"].to_dict()
    (ray_run,) = (root / "endings" / "_ray").iterdir()
    for trial_id, row in rows.iterrows():
        (text,) = EventAccumulator(str(ray_run / trial_id)).Reload().Tensors("status/text_summary")
        assert text.tensor_proto.string_val == [row.status.encode()]
    logs = [path.read_bytes() for path in wandb_dir.glob("wandb/offline-run-*/*.wandb")]
    for trial_id in rows.index[rows["status"] == "stopped_early"]:
        (stopped,) = [log for log in logs if trial_id.encode() in log]
        assert b"stopped_early" in stopped


@pytest.mark.slow
def test_each_trial_is_one_tracker_run_with_its_curve(endings):
    """The same sweep's trials that trained (completed and stopped): a run each, named by its
    trial id and tagged with the sweep, family and shape, holding every evaluation."""
    import mlflow
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, rows, wandb_dir = endings
    evaluations = load_curves(str(root), ["endings"]).groupby("trial_id").size()
    trained = rows.loc[evaluations.index]
    assert len(trained) == 4 and (evaluations[rows.index[rows["status"] == "completed"]] >= 4).all()

    # MLflow: an experiment per sweep, a run per trial named by its trial id.
    runs = mlflow.search_runs(experiment_names=["endings"]).set_index("tags.mlflow.runName")
    assert sorted(runs.index) == sorted(rows.index)
    client = MlflowClient()
    for trial_id, row in trained.iterrows():
        tags = client.get_run(runs.loc[trial_id, "run_id"]).data.tags
        assert tags["sweep"] == "endings" and tags["family"] == row.family
        for name in SHAPE_COLUMNS:
            if name in tags:
                assert tags[name] == str(row[name]), name
        assert {"d_model", "n_layers", "d_h"} <= set(tags)
        history = client.get_metric_history(runs.loc[trial_id, "run_id"], "val_loss")
        assert len(history) == evaluations[trial_id]
        assert history[-1].step == row.tokens and history[-1].value == pytest.approx(row.val_loss)

    # TensorBoard: event files in each trial's folder (named by trial id) under the sweep.
    ray_runs = list((root / "endings" / "_ray").iterdir())
    assert len(ray_runs) == 1 and str(root) in sweep_dir(str(root), "endings")
    for trial_id in trained.index:
        events = EventAccumulator(str(ray_runs[0] / trial_id)).Reload()
        scalars = events.Scalars("ray/tune/val_loss")
        assert len(scalars) == evaluations[trial_id]
        assert scalars[-1].step == rows.loc[trial_id, "tokens"]

    # W&B offline: a run per trial in WANDB_DIR, holding its name, tags and history.
    offline = sorted((wandb_dir / "wandb").glob("offline-run-*/*.wandb"))
    assert len(offline) == len(rows)
    logs = [path.read_bytes() for path in offline]
    for trial_id, row in trained.iterrows():
        (log,) = [data for data in logs if trial_id.encode() in data]
        assert b"sweep=endings" in log and f"d_model={row.d_model}".encode() in log
        assert log.count(b"val_loss") >= evaluations[trial_id]
