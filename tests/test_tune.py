"""`tune:` in a space: every candidate x every tuned combination x every seed is one trial."""

from __future__ import annotations

import json
import re

import optuna
import pytest
from sweep_helpers import TINY_SPACE, raw_trial_rows, run, write_space

from shapesweep.results.store import load_trials
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space, tuned_json
from shapesweep.sweep.search.trials import DefineSpace, SpecMaker, grid_specs, trial_triple


def _specs(path, seeds, skip=frozenset()):
    space = load_space(path)
    return space, plan(space).candidates, *grid_specs(space, plan(space).candidates, seeds,
                                                      None, set(skip))


def test_expansion_counts_trial_ids_and_documents(tmp_path):
    path = write_space(tmp_path, tune={"lr": [1.0e-3, 3.0e-3, 1.0e-2], "warmup_frac": [0.0, 0.1]})
    space, candidates, specs, total = _specs(path, [0, 1])
    assert len(space.tuned_settings()) == 6
    assert total == len(specs) == len(candidates) * 6 * 2
    assert len({s["trial_id"] for s in specs}) == total
    for spec in specs:
        tuned = json.loads(spec["tuned_json"])
        assert set(tuned) == {"lr", "warmup_frac"}
        assert spec["tuned_json"] == json.dumps(tuned, sort_keys=True)
        assert re.fullmatch(rf"{spec['key']}-t[0-9a-f]{{6}}-s{spec['seed']}", spec["trial_id"])
        train = spec["document"]["train"]
        assert (train["lr"], train["warmup_frac"], train["seed"]) == (
            tuned["lr"], tuned["warmup_frac"], spec["seed"])
        assert train["tokens"] == TINY_SPACE["train"]["tokens"]  # the rest of train: unchanged
    # the tuned values hash into the id: same candidate and seed, other lr -> other id
    by_key_seed = {}
    for spec in specs:
        by_key_seed.setdefault((spec["key"], spec["seed"]), set()).add(spec["trial_id"])
    assert all(len(ids) == 6 for ids in by_key_seed.values())
    # resume skips exactly the (key, tuned_json, seed) triples already held
    done = {trial_triple(specs[0]), trial_triple(specs[5])}
    left, total_again = grid_specs(space, candidates, [0, 1], None, done)
    assert total_again == total and len(left) == total - 2
    assert not {trial_triple(s) for s in left} & done


def test_without_tune_ids_and_rows_stay_as_before(tmp_path):
    space, candidates, specs, total = _specs(write_space(tmp_path), [3])
    assert space.tuned_settings() == [{}]
    assert total == len(candidates)
    assert {s["trial_id"] for s in specs} == {f"{c.key}-s3" for c in candidates}
    assert {s["tuned_json"] for s in specs} == {"{}"} == {tuned_json({})}


def test_plan_counts_trials(tmp_path, capsys):
    path = write_space(tmp_path, tune={"lr": [1.0e-3, 3.0e-3]}, seeds=[0, 1, 2])
    n = len(plan(load_space(path)).candidates)
    assert run("plan", str(path), "--format", "json") == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert f"{n} candidates x 2 tuned settings x 3 seeds = {n * 6} trials" in lines
    assert any(line.startswith("scheduler: FIFO") for line in lines)
    assert any(line.startswith("evaluation: 16 per trial (the recipe's cadence)") for line in lines)


@pytest.mark.parametrize(("tune", "key", "problem"), [
    ({"learning_rate": [1e-3]}, "tune.learning_rate", "unknown train key 'learning_rate'"),
    ({"lr": []}, "tune.lr", "empty list of values"),
    ({"lr": [1e-3, 3e-3, -1.0]}, "tune.lr[2]", "greater than 0"),
    ({"lr": [1e-3, 1.0e-3]}, "tune.lr[1]", "listed twice"),
    ({"decay": ["cosine", "step"]}, "tune.decay[1]", "'cosine', 'linear', 'constant', 'power' or 'wsd'"),
    ({"seed": [1, 2]}, "tune.seed", "cannot be tuned"),
    ({"tokens": [4096, 8192]}, "tune.tokens", "cannot be tuned"),
    ({"init": ["normal"], "parametrization": ["mup"]}, "tune", "contradicts"),
    ({"lr": 1e-3}, "tune.lr", "valid list"),
])
def test_bad_tune_is_one_line_exit_2_and_nothing_on_disk(tmp_path, capsys, tune, key, problem):
    path = write_space(tmp_path, tune=tune)
    root = tmp_path / "sweeps"
    for argv in (("plan", str(path)), ("run", str(path), "--root", str(root))):
        assert run(*argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err, err
        assert f"{path}: {key}: " in err and problem in err, err
    assert not root.exists()


def test_optuna_suggests_tuned_values_as_categorical_params(tmp_path):
    space = load_space(write_space(tmp_path, tune={"lr": [1.0e-3, 3.0e-3]}))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    define = DefineSpace(space, SpecMaker(space, 0, None))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        spec = define(trial)["spec"]
        assert trial.distributions["tune.lr"].choices == (1.0e-3, 3.0e-3)
        assert json.loads(spec["tuned_json"]) == {"lr": trial.params["tune.lr"]}
        assert spec["document"]["train"]["lr"] == trial.params["tune.lr"]
        seen.add(trial.params["tune.lr"])
        study.tell(trial, 1.0)
    assert seen == {1.0e-3, 3.0e-3}


@pytest.mark.slow
def test_tuned_sweep_rows_then_resume_trains_nothing(local_ray, tmp_path):
    lrs = [1.0e-3, 3.0e-3]
    path = write_space(tmp_path, name="tiny-tuned", search={"n_layers": [1, 2]},
                       tune={"lr": lrs}, seeds=[0, 1])
    candidates = plan(load_space(path)).candidates
    root = tmp_path / "sweeps"
    assert run("run", str(path), "--root", str(root), "--scheduler", "fifo",
               "--max-concurrent", "2") == 0
    trials = load_trials(str(root), ["tiny-tuned"])
    assert len(trials) == 2 * 2 * len(candidates)
    assert {(r.key, r.tuned_json, r.seed) for r in trials.itertuples()} == {
        (c.key, tuned_json({"lr": lr}), seed) for c in candidates for lr in lrs for seed in (0, 1)}
    for row in trials.itertuples():
        assert row.status == "completed", row.error
        assert row.lr == json.loads(row.tuned_json)["lr"]
        assert json.loads(row.config_json)["train"]["lr"] == row.lr
        assert row.variant == "conventional"
    rows_before = len(raw_trial_rows(root, "tiny-tuned"))
    assert run("resume", "tiny-tuned", "--root", str(root)) == 0
    assert len(raw_trial_rows(root, "tiny-tuned")) == rows_before
