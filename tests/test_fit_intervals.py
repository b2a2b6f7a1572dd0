"""benchmarks/lr_transfer.py's fit intervals hold their stated level at 3 seeds (issue 56).

A simulation: a shape and the base whose loss is quadratic in log2(lr) on the study's sqrt(2)
grid, with seed noise of the size the lr-transfer study measured (docs/lr-transfer.md: the
seeds' standard deviation at a point is 0.007-0.045, so 0.02 each point; each seed's own
optimum scattered by 0.4 log2, as its per-seed fits scatter by one to two sqrt(2) steps; a
seed effect shared by every lr). Over many draws the t-interval over per-seed fits covers the
true distance in sqrt(2) steps, and the true optimum, at its nominal level within Monte Carlo
error; the seed bootstrap the study used covers far less than its "95%".
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

GRID = np.log2(1.5e-3) + 0.5 * np.arange(8)  # the study's grid, log2(lr)
BASE_OPT = math.log2(4.5e-3)
SHIFT = 0.5  # log2: the shape's optimum one sqrt(2) step above the base's
CURVATURE, POINT_SD, SEED_SD, JITTER = 0.1, 0.02, 0.02, 0.4
SEEDS, SIMS = 3, 2000


@pytest.fixture(scope="module")
def lr_transfer():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import lr_transfer
    finally:
        sys.path.pop(0)
    return lr_transfer


def _curves(rng: np.random.Generator, optimum: float, seeds: int) -> np.ndarray:
    """seeds x lrs losses: each seed's optimum jittered, its own offset, noise at each lr."""
    own = optimum + rng.normal(0, JITTER, (seeds, 1))
    return (1.6 + CURVATURE * (GRID - own) ** 2 + rng.normal(0, SEED_SD, (seeds, 1))
            + rng.normal(0, POINT_SD, (seeds, len(GRID))))


def _draws(seed: int = 7):
    rng = np.random.default_rng(seed)
    for _ in range(SIMS):
        yield _curves(rng, BASE_OPT + SHIFT, SEEDS), _curves(rng, BASE_OPT, SEEDS)


def _band(hits: int, level: float) -> tuple[float, float]:
    """Nominal +- 4 Monte Carlo standard errors."""
    se = math.sqrt(level * (1 - level) / SIMS)
    return level - 4 * se, level + 4 * se


@pytest.mark.parametrize("level", [0.95, 0.99167])
def test_t_interval_over_seed_fits_holds_its_level_at_three_seeds(lr_transfer, level):
    """The interval `fit_interval` computes (per-seed `fit_optimum`, then `t_interval`) covers
    the true distance and the true optimum at `level`, within Monte Carlo error."""
    steps_hits = optimum_hits = 0
    for shape, base in _draws():
        own = np.array([lr_transfer.fit_optimum(GRID, y)[0] for y in shape])
        ref = np.array([lr_transfer.fit_optimum(GRID, y)[0] for y in base])
        _, low, high = lr_transfer.t_interval(2 * (own - ref), level)
        steps_hits += low <= 2 * SHIFT <= high
        _, low, high = lr_transfer.t_interval(own, level)
        optimum_hits += low <= BASE_OPT + SHIFT <= high
    band = _band(steps_hits, level)
    assert band[0] <= steps_hits / SIMS <= band[1], (steps_hits / SIMS, band)
    assert band[0] <= optimum_hits / SIMS <= band[1], (optimum_hits / SIMS, band)


def test_the_old_seed_bootstrap_covers_far_less_than_95(lr_transfer):
    """The study's paired seed bootstrap on 3 seeds: 10 distinct resamples, each >= 1/27 likely,
    so its 95% percentile interval is their range. That range covers ~75-80%, not 95%."""
    multisets = list(itertools.combinations_with_replacement(range(SEEDS), SEEDS))
    assert len(multisets) == 10
    hits = 0
    for shape, base in _draws():
        steps = [2 * (lr_transfer.fit_optimum(GRID, shape[list(m)].mean(axis=0))[0]
                      - lr_transfer.fit_optimum(GRID, base[list(m)].mean(axis=0))[0]) for m in multisets]
        hits += min(steps) <= 2 * SHIFT <= max(steps)
    assert 0.6 < hits / SIMS < 0.88, hits / SIMS


def test_fit_interval_is_the_t_interval_over_seed_fits_and_names_it(lr_transfer):
    """`fit_interval` on lrs x seeds tables is the computation the simulation checks, and says
    which interval it is; the bootstrap is refused below BOOTSTRAP_MIN_SEEDS (t instead)."""
    rng = np.random.default_rng(3)
    shape, base = _curves(rng, BASE_OPT + SHIFT, SEEDS), _curves(rng, BASE_OPT, SEEDS)
    table = pd.DataFrame(shape.T, index=2 ** GRID, columns=range(SEEDS))
    reference = pd.DataFrame(base.T, index=2 ** GRID, columns=range(SEEDS))
    fit = lr_transfer.fit_interval(table, reference, list(range(SEEDS)), 0.95)
    own = np.array([lr_transfer.fit_optimum(GRID, y)[0] for y in shape])
    ref = np.array([lr_transfer.fit_optimum(GRID, y)[0] for y in base])
    steps, low, high = lr_transfer.t_interval(2 * (own - ref), 0.95)
    assert (fit["steps"], fit["steps_low"], fit["steps_high"]) == pytest.approx((steps, low, high))
    assert fit["interval"] == "t, 2 df"
    asked = lr_transfer.fit_interval(table, reference, list(range(SEEDS)), 0.95, method="bootstrap")
    assert asked["interval"] == "t, 2 df" and asked["steps_low"] == pytest.approx(low)
    assert lr_transfer.BOOTSTRAP_MIN_SEEDS >= 10


def test_t_interval_widens_with_the_level_and_needs_two_seeds(lr_transfer):
    values = np.array([0.2, -0.4, 0.9])
    _, low95, high95 = lr_transfer.t_interval(values, 0.95)
    _, low99, high99 = lr_transfer.t_interval(values, 0.99167)
    assert low99 < low95 < values.mean() < high95 < high99
    # 2 df: t(0.975) = 4.303
    assert high95 - values.mean() == pytest.approx(4.3027 * values.std(ddof=1) / math.sqrt(3), rel=1e-4)
    mean, low, high = lr_transfer.t_interval(np.array([0.3]), 0.95)
    assert mean == 0.3 and math.isnan(low) and math.isnan(high)

