"""Evaluations where decisions are made, and warm workers under ASHA: a trial evaluates at
its recipe's cadence and at each of ASHA's rungs, `run` states what evaluation costs, and a
real ASHA sweep reuses its workers (a stopped trial's actor is reset, not stalled on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_helpers import TINY_TRAIN, run, write_space

from shapesweep.results.store import load_curves, load_trials, sweep_dir
from shapesweep.search_spaces.cadence import eval_steps, evaluation_line
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import BUILTIN_DIR, load_space
from shapesweep.sweep.search.scheduling import rung_tokens
from shapesweep.trainers.loop import train

STEP = TINY_TRAIN["batch_tokens"]  # 512 tokens a step; the tiny recipe trains 16 steps
BUDGET = TINY_TRAIN["tokens"]


def _ray_rungs(grace: int, factor: float, budget: int) -> list[float]:
    """The milestones Ray's own ASHAScheduler builds for these settings."""
    from ray.tune.schedulers import ASHAScheduler

    scheduler = ASHAScheduler(time_attr="tokens", metric="val_loss", mode="min", max_t=budget,
                              grace_period=grace, reduction_factor=factor)
    return sorted(milestone for bracket in scheduler._brackets for milestone, _ in bracket._rungs)


def test_rungs_are_the_grace_period_times_powers_of_the_reduction_factor():
    assert rung_tokens(1024, 2, BUDGET) == [1024, 2048, 4096, 8192]
    assert rung_tokens(1000, 3, BUDGET) == [1000, 3000]


@pytest.mark.parametrize("grace, factor, budget", [
    (1024, 2, 8192), (1000, 3, 8192), (910, 3, 8192), (3641, 3, 32768), (100, 3, 8100),
    (100, 4, 6400), (512, 1.5, 8192), (7, 2.5, 1000), (4096, 2, 8192)])
def test_the_rungs_from_asha_s_documented_settings_are_the_ones_ray_builds(grace, factor, budget):
    assert rung_tokens(grace, factor, budget) == _ray_rungs(grace, factor, budget)


def test_evaluation_steps_are_the_cadence_the_last_step_and_the_first_step_past_each_rung():
    recipe = TrainConfig(**TINY_TRAIN, eval_every=5)
    assert eval_steps(recipe, 16, STEP) == [5, 10, 15, 16]
    assert eval_steps(recipe, 16, STEP, [1000, 3000]) == [2, 5, 6, 10, 15, 16]
    assert eval_steps(TrainConfig(**TINY_TRAIN), 16, STEP) == list(range(1, 17))  # 16 // 10 = 1
    assert eval_steps(TrainConfig(**TINY_TRAIN), 40, STEP) == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40]
    # an interval of 10 steps or more adds one early look at a fifth of it
    assert eval_steps(TrainConfig(**TINY_TRAIN), 120, STEP)[:3] == [2, 12, 24]
    assert eval_steps(TrainConfig(**{**TINY_TRAIN, "eval_every": 50}), 600, STEP)[:3] == [10, 50, 100]


def test_the_loop_evaluates_at_the_tokens_it_is_given(one_torch_thread):
    config = make_config(dict(family="conventional", d_model=16, n_layers=1, n_heads=2, d_h=64,
                              vocab_size=256))
    recipe = TrainConfig(**{**TINY_TRAIN, "eval_every": 6, "eval_tokens": 256})
    plain, aligned = train(config, recipe), train(config, recipe, eval_at=[1000, 3000])
    assert [m["tokens"] for m in plain.curve] == [3072, 6144, 8192]
    assert [m["tokens"] for m in aligned.curve] == [1024, 3072, 6144, 8192]
    assert aligned.val_loss == plain.val_loss  # evaluating more never changes the training


@pytest.mark.parametrize(("changes", "rungs", "expected"), [
    # every step (16 // 10 = 1): 16 x 2,048 evaluated against 8,192 trained
    ({}, [], "16 per trial (the recipe's cadence) x 2.05K tokens = 400.0%"),
    # steps 4, 8, 12, 16 and the rungs' 2, 4, 8, 16: five evaluations
    ({"eval_every": 4}, [1024, 2048, 4096, 8192],
     "5 per trial (the recipe's cadence and ASHA's 4 rungs) x 2.05K tokens = 125.0%"),
    # steps 8, 16 and the rungs' 2, 4: four evaluations of 128 tokens, 6.25%
    ({"eval_every": 8, "eval_tokens": 128}, [1024, 2048, 4096, 8192],
     "4 per trial (the recipe's cadence and ASHA's 4 rungs) x 128 tokens = 6.2%"),
])
def test_run_states_the_evaluation_share_and_flags_more_than_a_tenth(tmp_path, changes, rungs,
                                                                       expected):
    space = load_space(write_space(tmp_path, train={**TINY_TRAIN, **changes}))
    line = evaluation_line(space, plan(space).candidates, rungs)
    assert line.startswith(f"evaluation: {expected} of the 8.19K tokens a trial trains")
    assert line.endswith("above the 10% target: lower train.eval_tokens or raise train.eval_every") \
        == ("eval_tokens" not in changes)


@pytest.mark.parametrize("path", sorted(BUILTIN_DIR.glob("*-small.yaml")) + sorted(BUILTIN_DIR.glob("demo-*.yaml")),
                         ids=lambda path: path.stem)
def test_the_built_in_cpu_spaces_keep_evaluation_under_a_tenth_of_training(path):
    space = load_space(str(path))
    line = evaluation_line(space, plan(space).candidates, [])
    if space.families == ["vision_mlp"]:
        assert line is None  # a vision trial evaluates its dataset's validation split
    else:
        assert line is not None and "above the" not in line, line


def _worker_pids(root: Path, sweep: str) -> dict[str, set[int]]:
    """The worker process of each trial, from Tune's own result files."""
    return {path.parent.name: {json.loads(line)["pid"] for line in path.read_text().splitlines()}
            for path in (Path(sweep_dir(str(root), sweep)) / "_ray").glob("*/*/result.json")}


@pytest.mark.slow
def test_an_asha_sweep_evaluates_at_its_rungs_and_reuses_its_workers(local_ray, tmp_path, capsys):
    every = 3  # steps 3, 6, ... 15 and 16; the rungs fall at steps 2, 4 and 8
    space_path = write_space(tmp_path, name="asha-warm", search={"n_layers": [1, 2]},
                             tune={"lr": [3e-3, 1e-5]},  # at 1e-5 a candidate is clearly worse
                             train={**TINY_TRAIN, "eval_every": every})
    root = tmp_path / "sweeps"
    assert run("run", str(space_path), "--root", str(root), "--seeds", "2", "--scheduler", "asha",
               "--grace-tokens", "1024", "--reduction-factor", "2", "--max-concurrent", "2") == 0
    assert "evaluation: 9 per trial (the recipe's cadence and ASHA's 3 rungs)" \
        in capsys.readouterr().err

    rungs = [1024, 2048, 4096]  # 8192 is the budget: no decision there
    points = sorted({*range(every * STEP, BUDGET + 1, every * STEP), BUDGET, *rungs})
    trials = load_trials(str(root), ["asha-warm"]).set_index("trial_id")
    curves = load_curves(str(root), ["asha-warm"]).groupby("trial_id")["tokens"].apply(list)
    assert len(trials) == 8 and set(trials["status"]) == {"completed", "stopped_early"}
    for trial_id, tokens in curves.items():
        assert tokens == [t for t in points if t <= tokens[-1]], trial_id
        if trials.loc[trial_id, "status"] == "stopped_early":
            assert tokens[-1] in rungs  # stopped where a decision was made, on a fresh loss

    pids = _worker_pids(root, "asha-warm")  # a paused trial may resume in another worker
    assert len(pids) == 8 and len(set().union(*pids.values())) < 8  # workers ran trial after trial


@pytest.mark.slow
def test_fresh_workers_give_every_trial_a_process_of_its_own(local_ray, tmp_path):
    space_path = write_space(tmp_path, name="fresh", search={"n_layers": [2]})
    root = tmp_path / "sweeps"
    assert run("run", str(space_path), "--root", str(root), "--seeds", "2", "--scheduler", "fifo",
               "--max-concurrent", "1", "--fresh-workers", "--no-progress") == 0
    pids = _worker_pids(root, "fresh")
    assert len(pids) == 2 and len(set().union(*pids.values())) == 2
