"""Adaptive measure seeds: a group-sequential design whose verdicts survive every look.

A sweep with `seeds: {min: a, max: b}` looks at each comparison with its baseline after
n = a, a+1, ..., b paired seeds and gives one more seed only to comparisons still open.
Looking after every seed and stopping at the first p < 0.05 inflates the error (the
naive design of tests/test_sequential.py); here each comparison is a group-sequential
test and the family is Holm's step-down over those tests:

- Boundaries: Lan-DeMets O'Brien-Fleming alpha spending, each side alpha_1(t) = 2 - 2
  Phi(z_{alpha/4} / sqrt(t)) at the information fraction t = n / b of each look, computed on the z scale by the
  recursive numerical integration of Jennison & Turnbull (2000, ch. 19) and carried to the
  paired t statistic by matching each look's nominal two-sided level (t with n - 1 degrees
  of freedom). Early looks spend almost nothing, so the last look's level is close to the
  fixed design's and power at b seeds is almost kept.
- Family: the comparisons with the baseline, m of them. Holm on the repeated p-values (the
  smallest level whose boundary the comparison has crossed at some look so far) is the
  closed test of weighted-Bonferroni intersections of group-sequential tests (Maurer &
  Bretz 2013, Holm as a graph), so it bounds the family-wise error at ALPHA over all looks
  and all stopping. Done as a step-down on boundary levels: every comparison that crossed
  its ALPHA/m boundary is resolved, then the rest are held to ALPHA/(m - r), and so on.
- Interval: the repeated confidence interval at ALPHA/m (mean +- the t boundary of the
  look at level ALPHA/m times sd/sqrt(n)): simultaneous over comparisons and looks, never
  narrower than Holm needs (like the fixed design's Bonferroni interval).
- Futile: a comparison that even b seeds would not resolve: the paired t-test at its Holm
  level needs more than b seeds for 80% power at the larger of |mean| and `min_effect`,
  at the observed sd (`shapesweep.results.stats.seeds_for_power`'s test). Futility never rejects,
  so it cannot raise the error (non-binding); it costs power, which the simulation counts.

Decided comparisons keep their decision: `decide(..., previous=...)` never re-decides a
look (a resume reads them back from the sweep's metadata).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy import stats as sps

from shapesweep.common import UserError
from shapesweep.results.multiplicity import ALPHA
from shapesweep.results.stats import HIGHER_IS_BETTER, POWER

DEFAULT_MIN_EFFECT = 0.02  # metric units; val_loss: 2/3 of the median paired sd (0.031)
STATES = ("open", "resolved-better", "resolved-worse", "futile", "max")
PLAUSIBLE = 0.9  # futility's optimistic effect: the one-sided 90% upper bound of |difference|
GRID = 401
CALIBRATION_PATHS = 200_000  # null paths that calibrate the t boundaries (t_boundaries)
CALIBRATION_SEED = 58  # points of the numerical integration (Jennison & Turnbull use about 100 per sd)


@dataclass(frozen=True)
class Design:
    """The looks (n = min_seeds .. max_seeds paired seeds), the family's level and the
    smallest effect worth seeds (metric units)."""

    min_seeds: int
    max_seeds: int
    min_effect: float = DEFAULT_MIN_EFFECT
    alpha: float = ALPHA

    def looks(self) -> list[int]:
        return list(range(self.min_seeds, self.max_seeds + 1))


@dataclass(frozen=True)
class Decision:
    """One comparison after a look: `look` is 1-based (n = min_seeds at look 1), the look
    it was decided at once decided, else the latest; `low`/`high` the repeated interval."""

    state: str
    look: int | None
    n: int
    mean: float | None
    low: float | None
    high: float | None
    level: float | None  # the Holm level it was held to at that look

    @property
    def decided(self) -> bool:
        return self.state != "open"

    def as_dict(self) -> dict:
        return asdict(self)


def check_range(low: object, high: object, key: str, file: str | None = None) -> tuple[int, int]:
    """`{min, max}` of adaptive seeds: whole numbers (not bools), 2 <= min <= max."""
    def whole(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"seeds {name} must be a whole number, got {value!r}", file=file, key=key)
        return value

    low, high = whole("min", low), whole("max", high)
    if low < 2:
        raise UserError(f"seeds min must be at least 2 (a paired interval needs two seeds), got {low}",
                        file=file, key=key)
    if high < low:
        raise UserError(f"seeds max ({high}) is below min ({low})", file=file, key=key)
    return low, high


def check_min_effect(value: float, key: str = "--min-effect") -> float:
    """A positive, finite effect size."""
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"must be a positive number (metric units), got {value!r}", key=key)
    return value


def spent(fraction: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming, each side at alpha/2 (gsDesign's sfLDOF, ldbounds' two-sided
    form): the two-sided error spent by information fraction t, 2 (2 - 2 Phi(z_{alpha/4} / sqrt(t)))."""
    return 4 * sps.norm.sf(sps.norm.isf(alpha / 4) / np.sqrt(fraction))


def _simpson(grid: np.ndarray) -> np.ndarray:
    """Simpson's rule weights of an evenly spaced grid of odd length."""
    weights = np.ones(len(grid))
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    return weights * (grid[1] - grid[0]) / 3


def _excess(c: float, root_t: float, weights: np.ndarray, grid: np.ndarray, step: float,
            target: float) -> float:
    """The chance a continuing path crosses +-c at this look, less the error to spend there."""
    edge = c * root_t
    return float(weights @ (sps.norm.sf((edge - grid) / step) + sps.norm.cdf((-edge - grid) / step))) - target


@lru_cache(maxsize=256)
def z_boundaries(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """Two-sided z boundaries c_k with P(|Z_j| < c_j for j < k, |Z_k| >= c_k) = alpha(t_k) -
    alpha(t_{k-1}) under the null, Z_k the standardised sum at fraction t_k (Brownian motion
    in information). The continuation density is carried on a grid over S = Z sqrt(t)."""
    cum = spent(np.asarray(fractions), alpha)
    bounds = [float(sps.norm.isf(cum[0] / 2))]
    grid = np.linspace(-bounds[0], bounds[0], GRID) * math.sqrt(fractions[0])
    density = sps.norm.pdf(grid, scale=math.sqrt(fractions[0]))
    for k in range(1, len(fractions)):
        step = math.sqrt(fractions[k] - fractions[k - 1])
        weights = density * _simpson(grid)  # the continuation mass at each grid point
        target = cum[k] - cum[k - 1]
        c = optimize.brentq(_excess, 0.1, 40.0, args=(math.sqrt(fractions[k]), weights, grid, step, target),
                            xtol=1e-10)
        bounds.append(c)
        edge = c * math.sqrt(fractions[k])
        new = np.linspace(-edge, edge, GRID)
        density = weights @ sps.norm.pdf((new[None, :] - grid[:, None]) / step) / step
        grid = new
    return tuple(bounds)


def _nominal_t(min_seeds: int, max_seeds: int, alpha: float) -> np.ndarray:
    """Each look's z boundary at `alpha` carried to Student's t with n - 1 degrees of freedom
    at the same nominal level (Jennison & Turnbull's significance-level approach)."""
    looks = np.arange(min_seeds, max_seeds + 1)
    z = z_boundaries(tuple(float(n) / max_seeds for n in looks), alpha)
    return sps.t.isf(sps.norm.sf(np.array(z)), looks - 1)


@lru_cache(maxsize=8)
def _null_paths(min_seeds: int, max_seeds: int) -> np.ndarray:
    """|t| of each look on CALIBRATION_PATHS null paths of normal differences (fixed seed)."""
    x = np.random.default_rng(CALIBRATION_SEED).standard_normal((CALIBRATION_PATHS, max_seeds))
    looks = np.arange(min_seeds, max_seeds + 1)
    csum, csq = np.cumsum(x, 1)[:, looks - 1], np.cumsum(x * x, 1)[:, looks - 1]
    mean = csum / looks
    sd = np.sqrt((csq - looks * mean * mean) / (looks - 1))
    return np.abs(mean) / (sd / np.sqrt(looks))


@lru_cache(maxsize=256)
def t_boundaries(min_seeds: int, max_seeds: int, alpha: float) -> dict[int, float]:
    """n -> the |t| a paired t statistic on n seeds must reach at level `alpha`. The
    significance-level approach alone lets a t path cross more often than `alpha` at these
    few degrees of freedom (0.057 for 0.05 at 2-8 seeds), so the z boundaries are taken at
    the level alpha' <= alpha at which CALIBRATION_PATHS fixed null paths cross at most
    alpha less two Monte Carlo standard errors (bisection on alpha')."""
    paths = _null_paths(min_seeds, max_seeds)
    target = alpha - 2 * math.sqrt(alpha * (1 - alpha) / CALIBRATION_PATHS)

    def rate(level: float) -> float:
        return float((paths >= _nominal_t(min_seeds, max_seeds, level)).any(axis=1).mean())

    low, high = alpha / 4, alpha  # rate(low) <= target here: a t path is not 4x a z path
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if rate(middle) <= target else (low, middle)
        if high - low < 1e-4 * alpha:
            break
    bounds = _nominal_t(min_seeds, max_seeds, low)
    return {n: float(c) for n, c in zip(range(min_seeds, max_seeds + 1), bounds, strict=True)}


def _t_stats(diff: np.ndarray, design: Design) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """|t|, mean and sd of each prefix n = min..len(diff) of one comparison's differences."""
    ns = np.arange(design.min_seeds, min(len(diff), design.max_seeds) + 1)
    means = np.array([diff[:n].mean() for n in ns])
    sds = np.array([diff[:n].std(ddof=1) for n in ns])
    with np.errstate(all="ignore"):
        t = np.abs(means) / (sds / np.sqrt(ns))
    t = np.where(np.isnan(t), 0.0, t)  # 0 / 0: the same value on every seed, no evidence
    return t, means, sds


def futile(mean: np.ndarray, sd: np.ndarray, n: np.ndarray, level: float, design: Design) -> np.ndarray:
    """Even `max_seeds` would not resolve the comparison: a paired t-test at `level` on
    max_seeds seeds has less than 80% power (`seeds_for_power`'s test, read at max_seeds:
    power grows with n) at the largest effect still plausible, the one-sided PLAUSIBLE upper
    bound of |mean difference|, or at `min_effect` when that is larger. No spread: never."""
    mean, sd, n = np.asarray(mean, float), np.asarray(sd, float), np.asarray(n, float)
    with np.errstate(all="ignore"):
        plausible = np.abs(mean) + sps.t.isf(1 - PLAUSIBLE, n - 1) * sd / np.sqrt(n)
        effect = np.maximum(plausible, design.min_effect)
        b = design.max_seeds
        crit = sps.t.isf(level / 2, b - 1)
        shift = effect / sd * math.sqrt(b)
        lower = np.nan_to_num(sps.nct.cdf(-crit, b - 1, shift))  # scipy: NaN far in the tail, where it is 0
        power = sps.nct.sf(crit, b - 1, shift) + lower
    return (sd > 0) & ~(power >= POWER)


def decide(diffs: list[np.ndarray], design: Design, metric: str = "val_loss",
           previous: list[Decision | None] | None = None) -> list[Decision]:
    """Each comparison's state after the seeds so far. `diffs[i]`: candidate i minus the
    baseline, per paired seed in seed order (NaN-free). `previous[i]`: its decision of an
    earlier look, kept when decided. The family is all of `diffs`."""
    previous = previous or [None] * len(diffs)
    m, a, b = len(diffs), design.min_seeds, design.max_seeds
    stats = [_t_stats(np.asarray(d, float), design) for d in diffs]
    bound = {j: t_boundaries(a, b, design.alpha / j) for j in range(1, m + 1)}
    resolved: set[int] = {i for i, p in enumerate(previous) if p is not None and p.state.startswith("resolved")}
    crossed_at: dict[int, tuple[int, float]] = {}  # comparison -> (look index, Holm level)
    while True:  # Holm's step-down on the boundary levels
        level = m - len(resolved)
        if level < 1:
            break
        new = {}
        for i, (t, _, _) in enumerate(stats):
            if i in resolved or not len(t):
                continue
            hits = np.nonzero(t >= np.array([bound[level][n] for n in range(a, a + len(t))]))[0]
            if len(hits):
                new[i] = (int(hits[0]), design.alpha / level)
        if not new:
            break
        resolved |= set(new)
        crossed_at.update(new)
    holm_level = design.alpha / max(m - len(resolved), 1)
    sign = 1 if metric in HIGHER_IS_BETTER else -1  # a loss improves downward
    last = np.array([(means[-1], sds[-1], a + len(t) - 1) if len(t) else (0.0, 0.0, 2) for t, means, sds in stats])
    weak = futile(last[:, 0], last[:, 1], last[:, 2], holm_level, design)
    out: list[Decision] = []
    for i, (t, means, sds) in enumerate(stats):
        before = previous[i]
        if before is not None and before.decided:
            out.append(before)
            continue
        if not len(t):
            out.append(Decision("open", None, len(diffs[i]), None, None, None, None))
            continue
        k, at_level = crossed_at.get(i, (len(t) - 1, holm_level))
        n = a + k
        half = bound[m][n] * sds[k] / math.sqrt(n) if sds[k] == sds[k] else math.nan
        if i in crossed_at:
            state = "resolved-better" if sign * means[k] > 0 else "resolved-worse"
        else:
            state = "max" if n >= b else "futile" if weak[i] else "open"
        out.append(Decision(state, k + 1, int(n), float(means[k]), float(means[k] - half),
                            float(means[k] + half), at_level))
    return out


EXPECTED_REPS = 300  # simulated families behind `plan`'s expected price (its Monte Carlo error ~2%)


def expected_seeds(design: Design, comparisons: int, effect: float, sd: float,
                   reps: int = EXPECTED_REPS, seed: int = CALIBRATION_SEED) -> tuple[float, float]:
    """(mean seeds a compared candidate runs, mean seeds the baseline runs) when the design
    runs a family of `comparisons` whose true paired differences are all `effect` and spread
    by `sd` per seed (normal; the baseline's noise shared, correlation 0.5), by simulation
    with the rounds the driver runs (sweep/driver/rounds.py). Fixed seed: the same figure each time."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, sd / math.sqrt(2), (reps, comparisons + 1, design.max_seeds))
    diffs = noise[:, 1:] + effect - noise[:, :1]
    used = np.zeros(comparisons)
    base = 0.0
    for rep in diffs:
        seeds = np.full(comparisons, design.min_seeds)
        decisions: list[Decision | None] = [None] * comparisons
        while True:
            made = decide([d[:n] for d, n in zip(rep, seeds, strict=True)], design, previous=decisions)
            decisions = list(made)
            open_ = np.array([d.state == "open" for d in made]) & (seeds < design.max_seeds)
            if not open_.any():
                break
            seeds[open_] += 1
        used += seeds
        base += seeds.max()
    return float(used.mean() / reps), base / reps
