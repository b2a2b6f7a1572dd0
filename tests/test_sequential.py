"""Adaptive measure seeds (shapesweep.results.sequential), proven by simulation.

Per-seed losses are drawn with the spread the project measured: the sd of a paired
difference is 0.031 val-loss units, the median over the 54 current comparisons of
docs/small-sweeps.md's per-seed tables (`benchmarks/seeds_needed.py --doc
docs/small-sweeps.md`, column "sd of differences"; range 0.004-0.099). Each trial's loss is
its candidate's mean plus its own noise (sd 0.031 / sqrt 2), so the comparisons of a family
share the baseline's noise (correlation 0.5), as a sweep's do. Families of 6 candidates
against one baseline, seeds {min: 2, max: 8}, against the fixed design on all 8 seeds with
Holm (today's `status`) and against the naive design that runs today's fixed test after
every seed and stops a comparison at its first verdict.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from shapesweep.common import UserError
from shapesweep.results.multiplicity import ALPHA, adjusted_p, paired_p
from shapesweep.results.sequential import (
    Decision,
    Design,
    check_min_effect,
    check_range,
    decide,
    t_boundaries,
    z_boundaries,
)

SD = 0.031  # paired difference, val_loss units (module docstring: where it is from)
M = 6
DESIGN = Design(min_seeds=2, max_seeds=8, min_effect=0.02)


def _losses(rng: np.random.Generator, effects: np.ndarray, reps: int) -> np.ndarray:
    """reps x (baseline + candidates) x max seeds of losses; candidate c's mean is effects[c]."""
    noise = rng.normal(0, SD / math.sqrt(2), (reps, len(effects) + 1, DESIGN.max_seeds))
    noise[:, 1:] += effects[None, :, None]
    return noise


def _adaptive(losses: np.ndarray) -> tuple[list[Decision], int]:
    """One family run as the driver runs it: min seeds each, then a seed per round to the
    open comparisons (and the baseline), to max. Returns the decisions and trials spent."""
    diffs = losses[1:] - losses[0]
    seeds = np.full(len(diffs), DESIGN.min_seeds)
    decisions: list[Decision | None] = [None] * len(diffs)
    while True:
        decisions = decide([d[:n] for d, n in zip(diffs, seeds, strict=True)], DESIGN, previous=decisions)
        open_ = np.array([d.state == "open" for d in decisions])
        if not open_.any():
            return decisions, int(seeds.sum() + seeds.max())
        seeds[open_] += 1


def _fixed(losses: np.ndarray, n: int) -> np.ndarray:
    """Today's design: Holm over paired t-tests on the first n seeds; True where resolved."""
    diffs = losses[1:, :n] - losses[0, :n]
    p = paired_p(np.full(len(diffs), n), diffs.mean(1), diffs.std(1, ddof=1))
    return adjusted_p(p, "holm") <= ALPHA


def _naive(losses: np.ndarray) -> np.ndarray:
    """Today's fixed test after every seed from 2 to max, a comparison stopping at its first
    verdict: True where resolved (the design the sequential one replaces)."""
    out = np.zeros(len(losses) - 1, bool)
    for n in range(DESIGN.min_seeds, DESIGN.max_seeds + 1):
        out |= _fixed(losses, n)
    return out


def _wilson(hits: int, reps: int, z: float = 1.96) -> tuple[float, float]:
    """The Monte Carlo 95% interval of a proportion (Wilson's)."""
    p = hits / reps
    centre, half = p + z * z / (2 * reps), z * math.sqrt(p * (1 - p) / reps + z * z / (4 * reps * reps))
    return (centre - half) / (1 + z * z / reps), (centre + half) / (1 + z * z / reps)


def test_boundaries_match_the_published_obrien_fleming_spending():
    """Five equal looks at two-sided 0.05: 4.877, 3.357, 2.680, 2.290, 2.031 (Jennison &
    Turnbull 2000, table 7.6; gsDesign's sfLDOF gives the same)."""
    bounds = z_boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.05)
    assert np.allclose(bounds, (4.877, 3.357, 2.680, 2.290, 2.031), atol=2e-3)
    one = z_boundaries((1.0,), 0.05)  # one look: the fixed test
    assert one[0] == pytest.approx(1.95996, abs=1e-4)
    t = t_boundaries(2, 8, 0.05)
    assert all(t[n] > t[n + 1] for n in range(2, 8))  # early looks ask for more
    assert t[8] > 2.365  # the last look is stricter than the fixed t(0.975, 7)


@pytest.mark.slow  # 3,000 simulated families a case: 16 s quiet each, the fast tier's second longest
@pytest.mark.parametrize("nulls", [M, 3])
def test_family_wise_error_under_the_null_stays_at_its_level(nulls):
    """All 6 null, and 3 null beside 3 clear effects (Holm's later steps at a higher level):
    a false verdict on any null in at most 5% of families; the naive design exceeds it."""
    rng = np.random.default_rng(58 + nulls)
    effects = np.array([0.0] * nulls + [0.12, -0.12, 0.09][: M - nulls])
    reps = 3000
    losses = _losses(rng, effects, reps)
    adaptive = naive = 0
    for rep in losses:
        decisions, _ = _adaptive(rep)
        adaptive += any(d.state.startswith("resolved") for d in decisions[:nulls])
        naive += bool(_naive(rep)[:nulls].any())
    low, high = _wilson(adaptive, reps)
    naive_low, naive_high = _wilson(naive, reps)
    print(f"\n{nulls} null of {M}: FWER adaptive {adaptive / reps:.4f} [{low:.4f}, {high:.4f}], "
          f"naive repeated fixed test {naive / reps:.4f} [{naive_low:.4f}, {naive_high:.4f}] ({reps} families)")
    assert low <= ALPHA  # not above the level beyond Monte Carlo error
    assert adaptive / reps <= ALPHA + 0.005
    if nulls == M:
        assert naive_low > ALPHA  # the looks inflate a fixed test's error: the check can fail


def test_fewer_seeds_at_the_fixed_designs_power():
    """Effects of 0, 0.5, 1, 2 and 4 sd (one family holds one effect per candidate, the
    sixth null too): the adaptive design resolves within 7 points of the fixed 8-seed
    design's power at each effect (it loses about 5 at 1 sd, 2 at 2 sd, none at 4 sd: the
    price of early looks and futility) and spends a third fewer trials in all."""
    rng = np.random.default_rng(582)
    effects = np.array([0.0, 0.0, 0.5 * SD, SD, 2 * SD, 4 * SD])
    reps = 1500
    losses = _losses(rng, effects, reps)
    power = np.zeros((2, M))
    seeds = np.zeros(M)
    trials = 0
    for rep in losses:
        decisions, spent = _adaptive(rep)
        trials += spent
        power[0] += [d.state == "resolved-worse" for d in decisions]  # a loss up: worse
        power[1] += _fixed(rep, DESIGN.max_seeds)
        seeds += [d.n for d in decisions]
    power, seeds = power / reps, seeds / reps
    fixed_trials = (M + 1) * DESIGN.max_seeds
    print(f"\nseeds {DESIGN.min_seeds}-{DESIGN.max_seeds}, min effect {DESIGN.min_effect}, sd {SD}:")
    for c, effect in enumerate(effects):
        print(f"  effect {effect / SD:.1f} sd: power adaptive {power[0, c]:.3f} vs fixed {power[1, c]:.3f}, "
              f"seeds {seeds[c]:.2f} vs {DESIGN.max_seeds}")
    print(f"  trials per family (baseline included): {trials / reps:.1f} vs {fixed_trials} "
          f"({1 - trials / reps / fixed_trials:.0%} saved)")
    assert (power[0, 2:] >= power[1, 2:] - 0.07).all()
    assert trials / reps < 0.8 * fixed_trials
    assert (seeds[:2] < 0.6 * DESIGN.max_seeds).all()  # the near-ties stop early (futile)


def test_decided_looks_are_kept():
    """A decision passed back is returned as it was, whatever the data say now."""
    rng = np.random.default_rng(1)
    diffs = [rng.normal(0.2, 0.01, 5), rng.normal(0.0, 0.03, 5)]
    first = decide(diffs, DESIGN)
    assert first[0].state == "resolved-worse"
    again = decide([-d for d in diffs], DESIGN, previous=first)
    assert again[0] == first[0]


@pytest.mark.parametrize(("low", "high", "says"), [
    (1, 8, "at least 2"), (4, 3, "below min"), (2.5, 8, "whole number"), (True, 8, "whole number"),
    (2, "8", "whole number")])
def test_bad_ranges_are_refused(low, high, says):
    with pytest.raises(UserError, match=says):
        check_range(low, high, key="seeds")


@pytest.mark.parametrize("value", [0.0, -0.1, float("nan"), float("inf")])
def test_bad_min_effect_is_refused(value):
    with pytest.raises(UserError, match="positive"):
        check_min_effect(value)


def test_at_equal_power_the_adaptive_design_spends_fewer_trials():
    """The fixed design matched to the adaptive one's power: the fewest fixed seeds n whose
    Holm power at every nonzero effect of the family (1, 2 and 4 sd) is at least the adaptive
    design's less its Monte Carlo error; at that n the fixed design costs more trials."""
    rng = np.random.default_rng(5820)
    effects = np.array([0.0, 0.0, 0.0, SD, 2 * SD, 4 * SD])
    reps = 1000
    losses = _losses(rng, effects, reps)
    adaptive = np.zeros(M)
    fixed = np.zeros((DESIGN.max_seeds + 1, M))
    trials = 0
    for rep in losses:
        decisions, spent = _adaptive(rep)
        trials += spent
        adaptive += [d.state == "resolved-worse" for d in decisions]
        for n in range(DESIGN.min_seeds, DESIGN.max_seeds + 1):
            fixed[n] += _fixed(rep, n)
    adaptive, fixed = adaptive / reps, fixed / reps
    margin = 2 * np.sqrt(adaptive * (1 - adaptive) / reps)  # two Monte Carlo standard errors
    real = effects > 0
    equal = next(n for n in range(DESIGN.min_seeds, DESIGN.max_seeds + 1)
                 if (fixed[n, real] >= adaptive[real] - margin[real]).all())
    fixed_trials = (M + 1) * equal
    print(f"\nadaptive power at 1/2/4 sd {adaptive[real].round(3)}: the fixed design needs {equal} seeds "
          f"({fixed[equal, real].round(3)}); trials per family {trials / reps:.1f} vs {fixed_trials} "
          f"({1 - trials / reps / fixed_trials:.0%} saved)")
    assert trials / reps < 0.85 * fixed_trials
