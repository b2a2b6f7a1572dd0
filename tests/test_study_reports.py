"""The study reports of issue 40 on inputs whose answers are known by construction:
benchmarks/early_ranking.py (docs/scheduling.md's early-ranking check: the comparison with
FIFO's winner, the resolved pairs, the rung tau) and benchmarks/lr_transfer.py's fitted
optimum (docs/lr-transfer.md's study)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
STUDY = BENCHMARKS / "data" / "lr-transfer-study"  # the lr-transfer study's committed stores


@pytest.fixture
def early_ranking(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import early_ranking
    return early_ranking


def _table(means: dict[str, float], noise: float = 0.01, seeds: int = 5) -> pd.DataFrame:
    """Candidates x seeds: each candidate's mean plus a seed effect shared by all (pairing)
    and a small own noise."""
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 0.05, seeds)
    return pd.DataFrame({name: mean + shared + rng.normal(0, noise, seeds) for name, mean in means.items()},
                        index=range(seeds)).T.rename_axis(columns="seed")


def test_against_winner_holm_verdicts(early_ranking):
    fifo = _table({"a": 1.00, "b": 1.002, "c": 1.30})
    versus = early_ranking.against_winner(fifo).set_index("candidate")
    winner = versus.index[0]
    assert versus.loc[winner, "verdict"] == "FIFO's winner" and winner in ("a", "b")
    assert versus.loc[({"a", "b"} - {winner}).pop(), "verdict"] == "within noise"  # 0.002 apart, noise 0.01
    assert versus.loc["c", "verdict"] == "worse"
    # Holm over 2: the adjusted p is at least the raw one, the adjusted interval wider
    assert (versus["p_holm"].dropna() >= versus["p"].dropna() - 1e-12).all()
    c = versus.loc["c"]
    assert c["ci_low_holm"] < c["ci_low"] < c["diff"] < c["ci_high"] < c["ci_high_holm"]


def test_tau_counts_only_resolved_pairs(early_ranking):
    final = _table({"a": 1.0, "b": 1.2, "c": 1.4, "d": 1.401})
    pairs = early_ranking.resolved_pairs(final)
    assert ("a", "b") in pairs and ("b", "c") in pairs
    assert not any({"c", "d"} == set(p) for p in pairs)  # within noise: never a swap
    same = final.copy()
    assert early_ranking.tau(same, final, pairs) == 1.0
    flipped = final.copy()
    flipped.loc["a"], flipped.loc["b"] = final.loc["b"], final.loc["a"]  # one resolved pair swapped
    swapped = early_ranking.tau(flipped, final, pairs)
    assert swapped == pytest.approx((len(pairs) - 2) / len(pairs))
    # a candidate missing at the rung (stopped before it) leaves its pairs out
    assert early_ranking.tau(final.drop(index="a"), final, pairs) == 1.0


def test_replayed_stops_are_the_live_rule_and_bonferroni_stops_fewer(early_ranking):
    """`--replay`'s 95% column is `sweep.search.scheduling.decide` on the whole rung; Bonferroni
    over the candidates below the cut stops a subset of what it stops."""
    from shapesweep.sweep.search.scheduling import decide

    # four level at the top (the cut is one of them), one a little behind (p ~0.02 against
    # the cut: past 95%, short of Bonferroni's 0.05 / 6), four far behind
    means = {"c0": 1.0, "c1": 1.0, "c2": 1.0, "c3": 1.0, "near": 1.015,
             "f0": 1.1, "f1": 1.1, "f2": 1.1, "f3": 1.1}
    rung = _table(means, noise=0.005)
    replay = early_ranking.replay_stops(rung).set_index("candidate")
    losses = {c: dict(rung.loc[c].items()) for c in rung.index}
    assert len(replay) == 9 - 3 and set(replay["cut"]) <= {"c0", "c1", "c2", "c3"}  # keep ceil(9 / 3)
    for candidate, row in replay.iterrows():
        assert row["stop_95"] == decide(losses, candidate, 3).stop
    assert replay.loc["near", "stop_95"] and not replay.loc["near", "stop_bonferroni"]
    assert replay.loc[["f0", "f1", "f2", "f3"], "stop_bonferroni"].all()
    assert (replay["stop_bonferroni"] <= replay["stop_95"]).all()


def test_replay_within_a_tuned_key_groups_by_its_value(early_ranking):
    rung = _table({"a lr=0.003": 1.0, "b lr=0.003": 1.1, "a lr=0.0015": 1.2, "b lr=0.0015": 1.3})
    groups = early_ranking.group_by_tuned(rung, "lr")
    assert {k: sorted(g.index) for k, g in groups.items()} == {
        "0.003": ["a lr=0.003", "b lr=0.003"], "0.0015": ["a lr=0.0015", "b lr=0.0015"]}
    assert list(early_ranking.group_by_tuned(rung, None)) == ["all"]
    with pytest.raises(ValueError, match="carry no tuned beta"):
        early_ranking.group_by_tuned(rung, "beta")


@pytest.fixture
def lr_transfer(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import lr_transfer
    return lr_transfer


@pytest.mark.parametrize("true_optimum", [-7.9, -7.1, -6.3])
def test_lr_fit_finds_a_quadratic_optimum_between_grid_points(lr_transfer, true_optimum):
    """benchmarks/lr_transfer.py's fit: on a loss quadratic in log2(lr) near its minimum and
    flatter further out, the fitted optimum is the true one, off the grid's points."""
    grid = np.log2(1.5e-3) + 0.5 * np.arange(8)  # the study's sqrt(2) grid
    loss = 1.6 + 0.05 * (grid - true_optimum) ** 2 + 0.01 * np.abs(grid - true_optimum) ** 3
    optimum, interior = lr_transfer.fit_optimum(grid, loss)
    assert abs(optimum - true_optimum) < 0.1 and interior


def test_lr_fit_at_the_grids_edge_is_flagged(lr_transfer):
    grid = np.log2(1.5e-3) + 0.5 * np.arange(8)
    optimum, interior = lr_transfer.fit_optimum(grid, 2.0 - 0.1 * grid)  # still falling at the top
    assert optimum == grid[-1] and not interior


def _trial(name: str, variant: str, lr: float, seed: int, loss: float, status: str = "completed",
           tokens: int = 1000, finished: str = "2026-11-29T05:00:00+00:00") -> dict:
    return {"trial_id": f"{variant}-{lr}-s{seed}", "key": name, "family": "conventional", "seed": seed,
            "variant": variant, "tuned_json": json.dumps({"lr": lr}), "status": status,
            "val_loss": loss, "tokens": tokens, "cooldown_tokens": tokens // 10, "wall_time_s": 10.0,
            "finished_at": pd.Timestamp(finished), "d_model": 64, "n_layers": 4, "d_h": 256,
            "params_non_embedding": 1000, "params_total": 1200, "params_active": 1000}


def test_lr_fit_table_from_stores(lr_transfer, tmp_path):
    """The --fit table read from two real stores: a shape whose optimum sits 2 sqrt(2) steps
    above the base's `moves`, one at the base's is `within one step`, paired by seed."""
    from shapesweep.results.store import write_trial

    grid = 1.5e-3 * 2 ** (0.5 * np.arange(8))
    seed_effect = {0: 0.0, 1: 0.03, 2: -0.02}
    for sweep, variant, optimum in (("a", "base", 3e-3), ("a", "same", 3e-3), ("b", "up", 6e-3),
                                    ("b", "running", 3e-3)):
        for lr in grid[:5] if variant == "running" else grid:  # a shape whose sweep is still running
            for seed, effect in seed_effect.items():
                loss = 1.6 + 0.04 * (np.log2(lr / optimum)) ** 2 + effect + 0.002 * ((seed + 3 * lr * 1e3) % 1)
                write_trial(str(tmp_path), sweep, _trial(variant, variant, float(lr), seed, float(loss)), [])
    out = lr_transfer.fit_table({"a": (str(tmp_path), "a"), "b": (str(tmp_path), "b")}, ("a", "base"),
                                resamples=200).set_index("shape")
    assert out.loc["base", "steps_from_base"] == 0 and out.loc["base", "verdict"] == "within one step"
    assert out.loc["same", "verdict"] == "within one step"
    assert out.loc["up", "steps_from_base"] == pytest.approx(2, abs=0.2) and out.loc["up", "verdict"] == "moves"
    assert out.loc["up", "low"] <= out.loc["up", "optimum"] <= out.loc["up", "high"]
    assert out.loc["running", "verdict"] == "incomplete" and out.loc["running", "lrs"] == 5
    rows = {line.split(" | ")[1]: line for line in lr_transfer.fit_markdown(out.reset_index()).splitlines()[2:]}
    up = out.loc["up"]
    assert (f"| {up['optimum']:.2e} [{up['low']:.2e}, {up['high']:.2e}] 95% t, 2 df | "
            f"{up['steps_from_base']:+.2f} [") in rows["up"]
    assert rows["up"].endswith("| yes | moves |") and "| 3 | 8 |" in rows["up"]


def _noisy_store(root: Path, seeds: int) -> None:
    """A base at 3e-3 and a shape at 4.2e-3, each seed's optimum jittered, in one real store."""
    from shapesweep.results.store import write_trial

    rng = np.random.default_rng(1)
    grid = 1.5e-3 * 2 ** (0.5 * np.arange(8))
    for variant, optimum in (("base", 3e-3), ("up", 4.2e-3)):
        for seed in range(seeds):
            own = optimum * 2 ** rng.normal(0, 0.4)
            for lr in grid:
                loss = 1.6 + 0.04 * np.log2(lr / own) ** 2 + 0.01 * seed
                write_trial(str(root), "a", _trial(variant, variant, float(lr), seed, float(loss)), [])


@pytest.mark.parametrize("seeds", [3, 8])
def test_lr_fit_level(lr_transfer, tmp_path, seeds):
    """--level: the t-interval over per-seed fits widens with the level on 3 seeds as on 8
    (the old seed bootstrap on 3 seeds gave the same interval at 95% and Bonferroni's 99.17%:
    tests/test_fit_intervals.py), and each cell prints its level and method."""
    _noisy_store(tmp_path, seeds)
    stores, base = {"a": (str(tmp_path), "a")}, ("a", "base")
    at95 = lr_transfer.fit_table(stores, base, level=0.95).set_index("shape").loc["up"]
    at99 = lr_transfer.fit_table(stores, base, level=0.99167).set_index("shape").loc["up"]
    assert at99["steps_low"] < at95["steps_low"] <= at95["steps_high"] < at99["steps_high"]
    assert at95["steps_low"] <= at95["steps_from_base"] <= at95["steps_high"]
    assert at95["interval"] == f"t, {seeds - 1} df"
    shown = lr_transfer.fit_markdown(at99.to_frame().T.reset_index(names="shape").assign(rule="a"), 0.99167)
    assert f"] 99.17% t, {seeds - 1} df |" in shown


@pytest.mark.parametrize("sweep, shapes, trials", [("lr-transfer-study-depth-tp6", 6, 144),
                                                  ("lr-transfer-study-vformer", 3, 72),
                                                  ("lr-transfer-study-depth", 1, 24)])
def test_committed_study_stores_are_whole(sweep, shapes, trials, tmp_path):
    """The study's committed stores, which docs/lr-transfer.md's tables are read from, hold
    each shape's whole grid (8 lrs x seeds 0-2) once, every trial completed. Read from a
    copy: a read takes the store's lock file, which would leave the checkout unclean."""
    from shapesweep.results.store import load_trials

    shutil.copytree(STUDY / sweep, tmp_path / sweep, symlinks=True)
    rows = load_trials(str(tmp_path), [sweep])
    assert len(rows) == trials and set(rows["status"]) == {"completed"}
    per_cell = rows.groupby(["variant", "lr", "seed"]).size()
    assert len(per_cell) == trials and per_cell.max() == 1
    assert rows["variant"].nunique() == shapes and rows["lr"].nunique() == 8 and set(rows["seed"]) == {0, 1, 2}


def test_lr_per_seed_table_from_a_store(lr_transfer, tmp_path):
    """--per-seed: each seed's own optimum, its steps from the base's on that seed, and the
    seeds' spread, read from a real store."""
    from shapesweep.results.store import write_trial

    grid = 1.5e-3 * 2 ** (0.5 * np.arange(8))
    optima = {"base": {0: 3e-3, 1: 3e-3}, "up": {0: 6e-3, 1: 3e-3}}  # up moves on seed 0 alone
    for variant, by_seed in optima.items():
        for lr in grid:
            for seed, optimum in by_seed.items():
                loss = 1.6 + 0.04 * np.log2(lr / optimum) ** 2 + 0.01 * seed
                write_trial(str(tmp_path), "a", _trial(variant, variant, float(lr), seed, float(loss)), [])
    out = lr_transfer.per_seed_table({"a": (str(tmp_path), "a")}, ("a", "base")).set_index("shape")
    assert out.loc["up", "seed 0 steps"] == pytest.approx(2, abs=0.05)
    assert out.loc["up", "seed 1 steps"] == pytest.approx(0, abs=0.05)
    assert out.loc["up", "seed 0 optimum"] == pytest.approx(6e-3, rel=0.03)
    assert out.loc["base", "sd_at_lowest"] == pytest.approx(0.01 / np.sqrt(2), rel=1e-6)
    assert out.loc["base", "median_sd"] == pytest.approx(0.01 / np.sqrt(2), rel=1e-6)


def test_early_ranking_report_from_stores(early_ranking, tmp_path):
    """The report from a FIFO and an ASHA store: ASHA stopped a candidate FIFO places within
    noise of its winner (a miss), its winner is FIFO's, its tokens are counted with cooldowns."""
    from shapesweep.results.store import write_trial

    fifo, asha = str(tmp_path / "fifo"), str(tmp_path / "asha")
    means = {"a": 1.00, "b": 1.001, "c": 1.20, "d": 1.40}
    shared = [0.0, 0.02, -0.01, 0.03, -0.02]
    for name, mean in means.items():
        for seed, effect in enumerate(shared):
            loss = mean + effect + 0.003 * ((seed * 7 + ord(name)) % 3)
            curve = [{"step": 10, "tokens": 170, "val_loss": loss + 0.5, "val_loss_cooled": loss + 0.1}]
            write_trial(fifo, "s", _trial(name, name, 3e-3, seed, loss), curve)
            stopped = name in ("b", "d")
            write_trial(asha, "s", _trial(name, name, 3e-3, seed, loss + (0.5 if stopped else 0),
                                          "stopped_early" if stopped else "completed", 170 if stopped else 1000),
                        curve)
    out = early_ranking.report(fifo, asha, "s", resamples=100)
    assert out["fifo_winner"] == out["asha_winner"] == "a lr=0.003"
    assert out["stopped"] == ["b lr=0.003", "d lr=0.003"]
    assert out["misses"] == ["ASHA stopped b lr=0.003, within noise of FIFO's winner after adjustment"]
    assert out["cost"]["asha"]["tokens"] == pytest.approx(2 * 5 * 1100 + 2 * 5 * 187)
    taus = out["taus"]["fifo"]
    assert list(taus["tau"]) == [1.0] and taus["low"].iloc[0] == 1.0
