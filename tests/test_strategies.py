"""Search strategies (`shapesweep.sweep.search.strategies`) and the trial-row contract
(`shapesweep.results.rows`): each sampler name builds its Optuna sampler, a bad or misplaced
`--sampler` is one line before anything is written, the grid plans what the store lacks,
a TrialRecord round-trips through the real Parquet store, and one real Optuna sweep with
`--sampler random` runs, saves its sampler for `resume`, and leaves the process as it was.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from datetime import UTC, datetime

import optuna
import pytest
from sweep_helpers import TINY_TRAIN, run, write_space

from shapesweep.results.rows import CURVE_FIELDS, TrialRecord, final_metrics
from shapesweep.results.store import load_curves, load_trials, read_sweep_file
from shapesweep.search_spaces.cadence import token_budget
from shapesweep.search_spaces.solver import candidate_document, plan
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.driver.ray_compat import QUIET_ENV
from shapesweep.sweep.driver.runner import SweepOptions, run_sweep
from shapesweep.sweep.search.strategies import (
    SAMPLERS,
    STRATEGIES,
    GridStrategy,
    OptunaStrategy,
    PlanContext,
    default_sampler,
    make_sampler,
    strategy_for,
)
from shapesweep.sweep.search.trials import trial_spec


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_each_sampler_name_builds_its_optuna_sampler(name):
    expected = {"tpe": optuna.samplers.TPESampler, "nsga2": optuna.samplers.NSGAIISampler,
                "cmaes": optuna.samplers.CmaEsSampler, "gp": optuna.samplers.GPSampler,
                "random": optuna.samplers.RandomSampler}[name]
    assert type(make_sampler(name, seed=3)) is expected
    # A study over a categorical space (what shapesweep asks) takes a few trials from it.
    study = optuna.create_study(sampler=make_sampler(name, seed=3))
    study.optimize(lambda t: t.suggest_categorical("n_layers", [1, 2, 3, 4]), n_trials=4)
    assert len(study.trials) == 4


def test_defaults_and_the_registries():
    assert (default_sampler(None), default_sampler("flops_per_token")) == ("tpe", "nsga2")
    assert STRATEGIES == {"grid": GridStrategy, "optuna": OptunaStrategy}


@pytest.mark.parametrize("args, line", [
    (["--search", "optuna", "--sampler", "annealing"],
     "--sampler: unknown sampler 'annealing' (tpe, nsga2, cmaes, gp, random)"),
    (["--sampler", "random"], "--sampler: a sampler needs --search optuna"),
    (["--search", "optuna", "--sampler", "cmaes", "--multi-objective"],
     "--sampler: cmaes optimises one objective; with --multi-objective use tpe, nsga2, gp, random"),
    (["--search", "bayes"], "--search: unknown search 'bayes' (grid or optuna)"),
])
def test_bad_search_or_sampler_is_one_line_and_leaves_nothing(tmp_path, capsys, args, line):
    space = write_space(tmp_path)
    root = tmp_path / "sweeps"
    assert run("run", str(space), "--root", str(root), *args) == 2
    assert capsys.readouterr().err == f"shapesweep run: error: {line}\n"
    assert not root.exists()


def test_grid_plans_every_trial_the_store_lacks(tmp_path):
    space = load_space(write_space(tmp_path))
    options = SweepOptions(space=str(tmp_path), root=str(tmp_path))
    grid = strategy_for(options, space)
    keys = [c.key for c in grid.candidates]
    context = PlanContext(str(tmp_path), "s", [0, 1], None, "sqlite://", TINY_TRAIN["tokens"],
                          skip={(keys[0], "{}", 0)})
    trials = grid.plan(context)
    assert (trials.total, trials.launches, trials.num_samples) == (2 * len(keys), 2 * len(keys) - 1, 1)
    # Tune's own grid expansion, which saves no state file (it pickled the interpreter's path)
    assert type(trials.search_alg).__name__ == "GridVariants" and grid.settings() == {}
    specs = trials.param_space["spec"]["grid_search"]
    assert {(s["key"], s["seed"]) for s in specs} == {(k, s) for k in keys for s in (0, 1)} - {(keys[0], 0)}


def test_a_trial_record_round_trips_through_the_store(tmp_path):
    space = load_space(write_space(tmp_path))
    candidate = plan(space).candidates[0]
    spec = trial_spec(candidate, space, 0, None)
    curve = [{"step": s, "tokens": 512 * s, "train_loss": 5.0 / s, "val_loss": 5.2 / s,
              "lr": 3e-3, "elapsed_s": 0.1 * s, "psnr": None, "ssim": None} for s in (1, 2, 4)]
    finished = datetime(2026, 5, 1, 12, tzinfo=UTC)
    record = TrialRecord(
        sweep="rt", trial_id=spec["trial_id"], key=spec["key"], seed=0, status="stopped_early",
        candidate=spec["row"], document=spec["document"],
        budget_tokens=token_budget(spec["document"]["train"], "conventional"),
        metrics=final_metrics({"tokens": 2048}, curve, "stopped_early"), curve=curve,
        code_version="test", data_hash="abc", finished_at=finished)
    record.write(str(tmp_path))

    row = load_trials(str(tmp_path), ["rt"]).iloc[0]
    assert (row["trial_id"], row["key"], row["status"], row["seed"]) == (
        spec["trial_id"], candidate.key, "stopped_early", 0)
    assert row["val_loss"] == 1.3 and row["best_val_loss"] == 1.3 and row["tokens"] == 2048
    assert row["train_tokens_budget"] == TINY_TRAIN["tokens"] and row["lr"] == TINY_TRAIN["lr"]
    assert row["seq_len"] == TINY_TRAIN["seq_len"] and row["finished_at"] == finished
    train = space.train.model_copy(update={"seed": 0})
    assert json.loads(row["config_json"]) == candidate_document(candidate, train)
    for column, value in candidate.to_row().items():
        if column in row.index and not isinstance(value, list):
            assert row[column] == pytest.approx(value), column
    curves = load_curves(str(tmp_path), ["rt"])
    assert curves[list(CURVE_FIELDS[:4])].to_dict("records") == [
        {k: p[k] for k in CURVE_FIELDS[:4]} for p in curve]
    with pytest.raises(ValueError, match="unknown metrics: accuracy"):
        TrialRecord(**{**record.__dict__, "metrics": {"accuracy": 1.0}}).trial_row()


@pytest.mark.slow
def test_an_optuna_sweep_with_the_random_sampler_end_to_end(local_ray, tmp_path):
    space = write_space(tmp_path, name="tiny-random", search={"n_layers": [1, 2, 3, 4, 8]})
    root = tmp_path / "sweeps"
    options = SweepOptions(space=str(space), root=str(root), search="optuna", sampler="random",
                           num_samples=3, scheduler="fifo", progress=False, sampler_seed=1)
    given = copy.deepcopy(options)
    env = {k: os.environ.get(k) for k in QUIET_ENV}
    tune_level = logging.getLogger("ray.tune").level
    optuna_level = optuna.logging.get_verbosity()

    outcome = run_sweep(options)

    assert (outcome.status, outcome.launched, outcome.counts["completed"]) == ("finished", 3, 3)
    assert options == given  # the caller's options are not changed
    assert {k: os.environ.get(k) for k in QUIET_ENV} == env  # nor the process's settings
    assert logging.getLogger("ray.tune").level == tune_level
    assert optuna.logging.get_verbosity() == optuna_level
    saved = json.loads(read_sweep_file(str(root), "tiny-random", "sweep.json"))
    assert (saved["search"], saved["sampler"], saved["sampler_seed"]) == ("optuna", "random", 1)
    trials = load_trials(str(root), ["tiny-random"])
    assert len(trials) == 3 and (trials["status"] == "completed").all()
    study = optuna.load_study(study_name="tiny-random", storage=f"sqlite:///{root}/shapesweep.db")
    ran = {t.user_attrs["trial_id"]: t.value for t in study.trials
           if t.state == optuna.trial.TrialState.COMPLETE and "duplicate_of" not in t.user_attrs}
    assert ran == dict(zip(trials["trial_id"], trials["val_loss"], strict=True))

    # `resume` runs the saved search (random sampler, 3 samples): nothing is left to run.
    assert run("resume", "tiny-random", "--root", str(root)) == 0
    assert len(load_trials(str(root), ["tiny-random"])) == 3
