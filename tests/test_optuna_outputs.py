"""What Optuna's and Ray's own tools read from a sweep (issue 15): ASHA-stopped trials are
PRUNED with their evaluations as intermediate values, failed ones FAIL, every trial carries
its candidate's shape and accounting columns, the study names its objectives, and Ray's
result files give `tune.ExperimentAnalysis` a dataframe.

Real Optuna storage (SQLite through SQLAlchemy); the searcher is driven through Tune's
searcher calls without Ray, then one tiny real ASHA sweep checks it all end to end.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sweep_helpers import TINY_SPACE, TINY_TRAIN, run, write_space

from shapesweep.results.store import load_curves, load_trials, sweep_dir
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.driver.trainable import FINAL_FLAG
from shapesweep.sweep.search.strategies import default_sampler, make_sampler
from shapesweep.sweep.search.trials import SpecMaker, make_optuna_search

BUDGET = TINY_TRAIN["tokens"]


def searcher_for(tmp_path: Path, multi_objective: str | None = None):
    space = load_space(write_space(tmp_path, search={"n_layers": [1, 2, 3, 4, 8]}))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    return make_optuna_search(space, "study", storage, SpecMaker(space, 0, None),
                              multi_objective, BUDGET, make_sampler(default_sampler(multi_objective)))


def evaluate(searcher, tune_id: str, losses: list[float], final: bool) -> dict:
    """What Tune tells the searcher about one trial: each evaluation, then its end (the
    result ASHA stops a trial on comes only with its end)."""
    config = searcher.suggest(tune_id)
    results = [{"val_loss": loss, "tokens": 512 * (i + 1)} for i, loss in enumerate(losses)]
    for result in results if final else results[:-1]:
        searcher.on_trial_result(tune_id, result)
    last = {**results[-1], FINAL_FLAG: True, "tokens": BUDGET} if final else results[-1]
    searcher.on_trial_complete(tune_id, last)
    return config["spec"]


def test_searcher_files_completed_pruned_and_failed_trials(tmp_path):
    searcher, study = searcher_for(tmp_path)
    full = evaluate(searcher, "a", [5.0, 4.5, 4.0], final=True)
    stopped = evaluate(searcher, "b", [5.5, 5.2], final=False)
    failed = searcher.suggest("c")["spec"]
    searcher.on_trial_result("c", {"val_loss": 6.0, "tokens": 512})
    searcher.on_trial_complete("c", {"val_loss": 6.0, "tokens": 512}, error=True)

    trials = {t.user_attrs["trial_id"]: t for t in optuna.load_study(
        study_name="study", storage=f"sqlite:///{tmp_path / 'optuna.db'}").trials
        if "trial_id" in t.user_attrs and "duplicate_of" not in t.user_attrs}
    done, pruned, fail = (trials[s["trial_id"]] for s in (full, stopped, failed))
    assert done.state == TrialState.COMPLETE and done.value == 4.0
    assert done.intermediate_values == {512: 5.0, 1024: 4.5, 1536: 4.0}
    assert pruned.state == TrialState.PRUNED and pruned.intermediate_values == {512: 5.5, 1024: 5.2}
    assert pruned.value == 5.2  # Optuna keeps a pruned trial's last intermediate value
    assert fail.state == TrialState.FAIL and fail.value is None
    for spec, trial in ((full, done), (stopped, pruned), (failed, fail)):
        for name in ("key", "family", "d_model", "n_layers", "d_h", "params_non_embedding",
                     "flops_per_token", "params_total"):
            assert trial.user_attrs[name] == spec["row"][name], name
    assert study.metric_names == ["val_loss"]
    # An infeasible point never reaches Ray: PRUNED, no trial id, no values.
    assert all(t.state == TrialState.PRUNED and t.value is None for t in study.trials
               if t.user_attrs.get("infeasible"))


def _exhaust(searcher, asks: int) -> list[dict]:
    """Ask for up to `asks` trials, completing each at the full budget; the specs launched."""
    from ray.tune.search import Searcher

    launched = []
    for n in range(asks):
        config = searcher.suggest(f"t{n}")
        if config == Searcher.FINISHED:
            break
        assert config is not None  # a space this small is never too slow to search
        launched.append(config["spec"])
        searcher.on_trial_complete(f"t{n}", {"val_loss": 4.0 - 0.1 * n, "tokens": BUDGET,
                                             FINAL_FLAG: True})
    return launched


@pytest.mark.parametrize("sampler", ["tpe", "random", "nsga2"])
def test_more_samples_than_the_space_holds_file_each_point_once(tmp_path, sampler):
    """5 points, one infeasible: 4 trials train, the search ends, and the study holds those 4
    and the infeasible point once each (it held 500 duplicates more)."""
    space = load_space(write_space(tmp_path, search={"n_layers": [1, 2, 3, 4, 8]}))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    searcher, study = make_optuna_search(space, "study", storage, SpecMaker(space, 0, None), None,
                                         BUDGET, make_sampler(sampler, seed=0))
    launched = _exhaust(searcher, 20)
    assert sorted(spec["row"]["n_layers"] for spec in launched) == [1, 2, 3, 4]
    trials = optuna.load_study(study_name="study", storage=storage).trials
    assert sorted(t.params["n_layers"] for t in trials) == [1, 2, 3, 4, 8]
    assert [t.params["n_layers"] for t in trials if t.state == TrialState.COMPLETE] != []
    assert {t.params["n_layers"] for t in trials if t.state == TrialState.PRUNED} == {8}
    assert not any("duplicate_of" in t.user_attrs for t in trials)

    # The study continued (resume, a second run): nothing left, nothing filed.
    again, _ = make_optuna_search(space, "study", storage, SpecMaker(space, 0, None), None,
                                  BUDGET, make_sampler(sampler, seed=1))
    assert _exhaust(again, 5) == []
    assert len(optuna.load_study(study_name="study", storage=storage).trials) == 5


def test_points_that_solve_to_one_shape_train_it_once(tmp_path):
    """Two variants of the same shapes: 6 points, 3 candidates, 3 trials in the study."""
    space = load_space(write_space(tmp_path, search={"n_layers": [1, 2, 3]},
                                   variants=[{"name": "a"}, {"name": "b"}]))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    searcher, _ = make_optuna_search(space, "study", storage, SpecMaker(space, 0, None), None,
                                     BUDGET, make_sampler("tpe", seed=0))
    launched = _exhaust(searcher, 20)
    assert sorted(spec["row"]["n_layers"] for spec in launched) == [1, 2, 3]
    trials = optuna.load_study(study_name="study", storage=storage).trials
    assert len(trials) == 3 and len({t.user_attrs["key"] for t in trials}) == 3


@pytest.mark.slow
def test_an_optuna_sweep_past_its_space_ends_with_no_duplicate_in_the_catalog(local_ray, tmp_path):
    """`run --search optuna --num-samples 12` over 3 points (one infeasible): 2 trials, and
    the study in the catalog's database (the default storage) holds 3 trials."""
    from shapesweep.results.catalog import default_catalog_url

    root = tmp_path / "sweeps"
    space_path = write_space(tmp_path, name="few", search={"n_layers": [1, 2, 8]})
    assert run("run", str(space_path), "--root", str(root), "--search", "optuna",
               "--num-samples", "12", "--scheduler", "fifo") == 0
    assert sorted(load_trials(str(root), ["few"])["n_layers"]) == [1, 2]
    study = optuna.load_study(study_name="few", storage=default_catalog_url(str(root)))
    assert sorted((t.params["n_layers"], t.state.name) for t in study.trials) == [
        (1, "COMPLETE"), (2, "COMPLETE"), (8, "PRUNED")]


def test_a_multi_objective_study_names_both_objectives(tmp_path):
    _, study = searcher_for(tmp_path, "flops_per_token")
    assert study.metric_names == ["val_loss", "flops_per_token"]
    # Reopening the study (resume) keeps the names.
    _, again = searcher_for(tmp_path, "flops_per_token")
    assert again.metric_names == ["val_loss", "flops_per_token"]


@pytest.mark.slow
def test_asha_optuna_sweep_as_optuna_and_ray_tools_read_it(local_ray, tmp_path):
    from ray import tune

    # A bad learning rate makes some trials clearly worse, so ASHA stops them.
    space_path = write_space(tmp_path, {**TINY_SPACE, "name": "asha-optuna",
                                        "search": {"n_layers": [1, 2, 3]},
                                        "tune": {"lr": [3.0e-3, 1.0e-5]}})
    root = tmp_path / "sweeps"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    assert run("run", str(space_path), "--root", str(root), "--search", "optuna",
               "--num-samples", "5", "--storage", storage, "--scheduler", "asha",
               "--grace-tokens", "1024", "--reduction-factor", "2", "--max-concurrent", "1") == 0

    study = optuna.load_study(study_name="asha-optuna", storage=storage)
    assert study.metric_names == ["val_loss"]
    rows = load_trials(str(root), ["asha-optuna"]).set_index("trial_id")
    curves = load_curves(str(root), ["asha-optuna"])
    launched = [t for t in study.trials
                if "trial_id" in t.user_attrs and "duplicate_of" not in t.user_attrs]
    assert sorted(t.user_attrs["trial_id"] for t in launched) == sorted(rows.index)
    state = {"completed": TrialState.COMPLETE, "stopped_early": TrialState.PRUNED,
             "failed": TrialState.FAIL}
    for trial in launched:
        row = rows.loc[trial.user_attrs["trial_id"]]
        assert trial.state == state[row.status]
        curve = curves[curves["trial_id"] == row.name]
        assert trial.intermediate_values == pytest.approx(
            dict(zip(curve["tokens"], curve["val_loss"], strict=True)))
        assert trial.value == pytest.approx(row.val_loss)
        for name in ("key", "d_model", "n_layers", "d_h", "params_non_embedding"):
            assert trial.user_attrs[name] == row[name], name
    assert (rows["status"] == "stopped_early").sum() >= 1, rows["status"]

    # Ray's own result files: one run folder whose dataframe holds every trial.
    ray_folder = Path(sweep_dir(str(root), "asha-optuna")) / "_ray"
    (run_folder,) = [p for p in ray_folder.iterdir() if p.is_dir()]
    analysis = tune.ExperimentAnalysis(str(run_folder))
    frame = analysis.dataframe(metric="val_loss", mode="min")
    assert len(frame) == len(rows) and frame["val_loss"].notna().all()
    # Each trial's metrics over time (ResultGrid's metrics_dataframe), up to where it ended.
    histories = analysis.trial_dataframes.values()
    assert sorted(h["tokens"].max() for h in histories) == sorted(rows["tokens"])
    assert all(h["val_loss"].notna().sum() >= 2 for h in histories)
    # Tune's own restore, given the trainable the sweep ran (README), reads the same run.
    from shapesweep.sweep.driver.trainable import run_trial

    grid = tune.Tuner.restore(str(run_folder), trainable=run_trial).get_results()
    assert sorted(r.metrics["trial_key"] for r in grid) == sorted(rows["key"])
