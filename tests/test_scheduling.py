"""Which scheduler a sweep runs and the noise-aware rule, on synthetic rung losses: a
candidate is stopped only when it is below ASHA's cut and worse than the candidate at the
cut with 95% confidence, paired by seed; near-ties and the baseline are kept."""

from __future__ import annotations

import pytest
from sweep_helpers import TINY_SPACE, TINY_TRAIN, write_space

from shapesweep.common import UserError
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.search.scheduling import ASHA_MIN_CANDIDATES, choose, decide, rung_tokens

WSD = {**TINY_TRAIN, "decay": "wsd"}  # cooldown evaluations at the rungs by default


def rung(**means_and_noise) -> dict[str, dict[int, float]]:
    """Candidate -> seed -> loss: each candidate's mean plus a per-seed offset."""
    return {name: {seed: mean + offset for seed, offset in enumerate(noise)}
            for name, (mean, noise) in means_and_noise.items()}


def test_a_candidate_clearly_worse_than_the_cut_is_stopped():
    losses = rung(a=(3.0, [0.01, -0.01, 0.0]), b=(3.1, [0.02, -0.02, 0.0]),
                  c=(3.2, [0.0, 0.01, -0.01]), d=(3.6, [0.01, 0.0, -0.01]))
    verdict = decide(losses, "d", reduction_factor=3)
    # 4 candidates, the top ceil(4/3) = 2 kept: the cut is b, and d is 0.5 worse on every seed
    assert verdict.stop and verdict.cut == "b"
    assert verdict.delta == pytest.approx(0.5) and verdict.ci_low > 0


def test_a_near_tie_below_the_cut_is_kept():
    # c's mean is worse than the cut's (b), but seed by seed the difference changes sign
    losses = rung(a=(3.0, [0, 0, 0]), b=(3.10, [-0.05, 0.05, 0.0]), c=(3.12, [0.05, -0.06, 0.01]))
    verdict = decide(losses, "c", reduction_factor=3)
    assert not verdict.stop and verdict.cut == "a"
    assert verdict.ci_low < 0 < verdict.ci_high


def test_the_same_gap_with_the_same_sign_on_every_seed_is_stopped():
    """What decides is the paired difference, not the spread of the means: seeds that agree
    resolve a small gap."""
    losses = rung(a=(3.0, [-0.05, 0.05, 0.0]), b=(3.1, [-0.05, 0.05, 0.0]),
                  c=(3.12, [-0.05, 0.05, 0.0]))
    assert decide(losses, "c", reduction_factor=3).stop


def test_the_top_candidates_and_the_baseline_are_never_stopped():
    losses = rung(a=(3.0, [0, 0.01, 0]), b=(3.5, [0, 0.01, 0]), c=(4.0, [0, 0.01, 0]))
    assert not decide(losses, "a", reduction_factor=3).stop  # the cut itself
    assert decide(losses, "c", reduction_factor=3).stop
    assert not decide(losses, "c", reduction_factor=3, protected=True).stop
    # alone at a rung (the first candidate there), nothing to compare with
    assert not decide({"c": losses["c"]}, "c", reduction_factor=3).stop


def test_one_seed_or_unpaired_seeds_never_stop():
    assert not decide({"a": {0: 3.0}, "b": {0: 9.0}}, "b", reduction_factor=2).stop
    assert not decide({"a": {0: 3.0, 1: 3.0}, "b": {2: 9.0, 3: 9.0}}, "b", reduction_factor=2).stop


def _space(tmp_path, n_layers=(1, 2, 3, 4), train=WSD, seeds=(0, 1, 2), **changes):
    path = write_space(tmp_path, search={"n_layers": list(n_layers)}, train=train,
                       seeds=list(seeds), **changes)
    space = load_space(path)
    return space, plan(space).candidates


def test_auto_runs_fifo_for_few_candidates_one_seed_or_no_cooldown_rungs(tmp_path, monkeypatch):
    """Each reason `auto` gives for FIFO; and, were the evidence to support it
    (AUTO_RUNS_ASHA), the noise-aware ASHA where none applies."""
    from shapesweep.sweep.search import scheduling

    monkeypatch.setattr(scheduling, "AUTO_RUNS_ASHA", True)
    space, candidates = _space(tmp_path)  # 4 candidates
    assert ASHA_MIN_CANDIDATES > 4
    few = choose("auto", space, candidates, [0, 1, 2])
    assert few.kind == "fifo" and few.rungs == []
    assert "4 candidates, fewer than 9" in few.line and "--scheduler asha overrides" in few.line
    lr = {"lr": [1e-3, 2e-3, 3e-3]}  # 4 shapes x 3 lrs = 12 candidates
    space, candidates = _space(tmp_path, tune=lr)
    many = choose("auto", space, candidates, [0, 1, 2])
    assert many.kind == "asha" and not many.per_trial
    assert many.line.startswith("scheduler: noise-aware ASHA (12 candidates x 3 seeds, "
                                "cooldown rungs): each candidate's 3-seed mean cooled loss at")
    assert choose("auto", space, candidates, [0]).line.endswith(
        "(one seed: no seed mean to judge on; --scheduler asha overrides)")
    cosine, candidates = _space(tmp_path, train=TINY_TRAIN, tune=lr)
    assert "no cooldown rungs" in choose("auto", cosine, candidates, [0, 1, 2]).line
    assert "Optuna" in choose("auto", space, None, [0, 1, 2]).line


def test_auto_runs_fifo_for_every_grid_while_no_study_shows_asha_safe(tmp_path):
    """docs/scheduling.md: FIFO is the conservative default until a committed study shows the
    noise-aware ASHA safe, with the reason in the plan's line."""
    from shapesweep.sweep.search.scheduling import AUTO_RUNS_ASHA

    assert not AUTO_RUNS_ASHA
    space, candidates = _space(tmp_path, tune={"lr": [1e-3, 2e-3, 3e-3]})  # 12 candidates, wsd
    auto = choose("auto", space, candidates, [0, 1, 2])
    assert auto.kind == "fifo" and auto.rungs == []
    assert "no committed study shows the noise-aware ASHA safe" in auto.line
    assert auto.line.endswith("--scheduler asha overrides)")
    assert choose("asha", space, candidates, [0, 1, 2]).kind == "asha"


def test_the_noise_aware_rungs_stop_below_the_budget_and_optuna_keeps_ray_s_asha(tmp_path):
    space, candidates = _space(tmp_path)
    grid = choose("asha", space, candidates, [0, 1], grace_tokens=1024, reduction_factor=2)
    assert grid.rungs == [1024, 2048, 4096]  # 8192 is the budget: the trial's end
    assert rung_tokens(1024, 2, 8192) == [1024, 2048, 4096, 8192]
    optuna = choose("asha", space, None, [0], grace_tokens=1024, reduction_factor=2)
    assert optuna.per_trial and optuna.rungs == [1024, 2048, 4096, 8192]
    assert choose("fifo", space, candidates, [0]).rungs == []


@pytest.mark.parametrize(("seeds", "workers", "problem"), [
    ([0], 1, "needs 2 or more seeds"),
    ([0, 1], 2, "a data-parallel trial"),
])
def test_a_noise_aware_asha_it_cannot_run_is_refused(tmp_path, seeds, workers, problem):
    space, candidates = _space(tmp_path)
    with pytest.raises(UserError, match=problem) as refused:
        choose("asha", space, candidates, seeds, workers_per_trial=workers)
    assert refused.value.key == "--scheduler"


def test_the_plan_says_which_scheduler_and_why(tmp_path, capsys, monkeypatch):
    from shapesweep.sweep.cli.main import main
    from shapesweep.sweep.search import scheduling

    monkeypatch.setattr(scheduling, "AUTO_RUNS_ASHA", True)  # the line it would print

    path = write_space(tmp_path, {**TINY_SPACE, "train": WSD, "tune": {"lr": [1e-3, 2e-3, 3e-3]},
                                  "seeds": [0, 1, 2]})
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("scheduler: noise-aware ASHA (12 candidates x 3 seeds") for line in out)
    assert any(line.startswith("cooldown evaluations: 1 per trial (at each of ASHA's rungs)")
               for line in out), out


def test_a_grid_with_choice_seeds_runs_fifo_and_refuses_the_noise_aware_asha(tmp_path):
    """Its measure trials are planned as choices end, so no scheduler knows them up front."""
    lr = {"lr": [1e-3, 2e-3, 3e-3], "choice_seeds": [100]}  # 12 candidates: auto's ASHA size
    space, candidates = _space(tmp_path, tune=lr)
    auto = choose("auto", space, candidates, [0, 1, 2])
    assert auto.kind == "fifo" and "tune.choice_seeds" in auto.line
    with pytest.raises(UserError, match="needs every candidate's trials up front") as refused:
        choose("asha", space, candidates, [0, 1, 2])
    assert refused.value.key == "--scheduler"


def test_a_noise_aware_asha_needs_a_concurrent_place_for_each_seed(tmp_path):
    """A trial paused at a rung keeps its place under --max-concurrent: with fewer places
    than seeds a candidate's last seed could never start (the sweep would wait for ever)."""
    lr = {"lr": [1e-3, 2e-3, 3e-3]}
    space, candidates = _space(tmp_path, tune=lr)
    with pytest.raises(UserError, match="pauses a trial at each rung until its 3 seeds") as refused:
        choose("asha", space, candidates, [0, 1, 2], max_concurrent=2)
    assert refused.value.key == "--max-concurrent"
    auto = choose("auto", space, candidates, [0, 1, 2], max_concurrent=2)
    assert auto.kind == "fifo" and "--max-concurrent 2 is below the 3 seeds" in auto.line
    assert "--max-concurrent" not in choose("auto", space, candidates, [0, 1, 2], max_concurrent=3).line
