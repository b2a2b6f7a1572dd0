"""Paired differences over seeds: the t-interval, verdicts and the seeds a verdict needs.

(`shapesweep.results.stats` describes the whole inference.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as sps

from shapesweep.results.multiplicity import (
    ALPHA,
)
from shapesweep.results.tuned import CONFIDENCE, MAX_POWER_SEEDS, POWER, loss_sign


def paired_rows(diff: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, ...]:
    """For each row of paired differences (last axis: seeds, NaN where a side has no
    completed trial): n, mean, sd (ddof=1) and the Student-t interval's ends (NaN with
    fewer than 2 pairs). The one formula of every paired comparison here."""
    valid = ~np.isnan(diff)
    n = valid.sum(axis=-1)
    with np.errstate(all="ignore"):
        mean = np.where(valid, diff, 0.0).sum(axis=-1) / n
        sd = np.sqrt(np.where(valid, (diff - mean[..., None]) ** 2, 0.0).sum(axis=-1) / (n - 1))
        critical = sps.t.ppf((1 + confidence) / 2, np.arange(n.max(initial=0) + 1) - 1)  # per n, once
        half = critical[n] * sd / np.sqrt(n)
    return n, mean, sd, mean - half, mean + half


def verdict_words(n: np.ndarray, low: np.ndarray, high: np.ndarray, metric: str) -> list[str | None]:
    """better / worse when the interval is on one side of zero, else within noise; None
    with fewer than 2 pairs (no interval)."""
    improves, hurts = (high < 0, low > 0) if loss_sign(metric) > 0 else (low > 0, high < 0)
    return [None if k < 2 else "better" if up else "worse" if down else "within noise"
            for k, up, down in zip(n.tolist(), improves.tolist(), hurts.tolist(), strict=True)]


def paired_difference(candidate: pd.Series, baseline: pd.Series, metric: str = "val_loss",
                      confidence: float = CONFIDENCE) -> dict[str, Any]:
    """candidate - baseline over the seeds both have (Series indexed by seed): mean, the sd of
    the differences, t-interval, verdict. Fewer than 2 pairs: no interval, no verdict."""
    diff = (candidate - baseline).dropna().to_numpy(float)
    n, mean, sd, low, high = (float(x[0]) for x in paired_rows(diff[None, :], confidence))
    n = int(n)
    two = n >= 2
    return {"delta": mean if n else None, "sd": sd if two else None, "ci_low": low if two else None,
            "ci_high": high if two else None, "n_paired": n,
            "verdict": verdict_words(np.array([n]), np.array([low]), np.array([high]), metric)[0]}


def seeds_for_power(delta: ArrayLike, sd: ArrayLike, power: float = POWER,
                    confidence: float = CONFIDENCE) -> np.ndarray:
    """Paired seeds a two-sided paired t-test at `confidence` needs to exclude zero with
    probability `power` when the true mean difference is `delta` and the differences spread
    by `sd` (arrays): the smallest n >= 2 with P(|T| > t_crit(n-1)) >= power, T noncentral t
    with n-1 degrees of freedom and noncentrality delta/sd*sqrt(n) (scipy.stats.nct, no
    normal approximation). NaN where no n up to MAX_POWER_SEEDS does (delta 0, or tiny); 2 for
    a large effect, or one with no spread (sd 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        effect = np.abs(np.asarray(delta, float)) / np.asarray(sd, float)
    # no spread (sd 0) under a nonzero difference: every pair of seeds shows it, 2 suffice
    effect = np.where(np.isfinite(effect) | (effect == np.inf), effect, np.nan)

    def enough(n: np.ndarray) -> np.ndarray:
        crit = sps.t.ppf((1 + confidence) / 2, n - 1)
        noncentral = effect * np.sqrt(n)
        with np.errstate(all="ignore"):
            upper = np.where(np.isinf(noncentral), 1.0, sps.nct.sf(crit, n - 1, noncentral))
            # the far tail underflows to NaN in scipy at a large noncentrality: it is ~0 there
            lower = np.nan_to_num(sps.nct.cdf(-crit, n - 1, noncentral), nan=0.0)
            return (upper + lower) >= power

    low = np.ones(effect.shape)  # fails (n = 1 has no test)
    high = np.full(effect.shape, 2.0)
    while True:  # double until enough, or past the cap
        short = ~enough(high) & (high <= MAX_POWER_SEEDS) & ~np.isnan(effect)
        if not short.any():
            break
        low, high = np.where(short, high, low), np.where(short, 2 * high, high)
    found = enough(high) & (high <= 2 * MAX_POWER_SEEDS)
    while True:  # the smallest n in (low, high]
        middle = np.floor((low + high) / 2)
        open_ = found & (high - low > 1)
        if not open_.any():
            break
        ok = enough(middle)
        high = np.where(open_ & ok, middle, high)
        low = np.where(open_ & ~ok, middle, low)
    return np.where(found & (high <= MAX_POWER_SEEDS), high, np.nan)


def verdict_words_of_p(n: np.ndarray, mean: np.ndarray, p: np.ndarray, metric: str) -> list[str | None]:
    """better / worse where the (adjusted) p-value is at most ALPHA, by the sign of the mean
    difference; else within noise; None with fewer than 2 pairs."""
    improves = (mean < 0) if loss_sign(metric) > 0 else (mean > 0)
    return [None if k < 2 else "within noise" if not q <= ALPHA else "better" if up else "worse"
            for k, q, up in zip(n.tolist(), p.tolist(), improves.tolist(), strict=True)]


PAIR_BLOCK = 4_000_000  # differences computed at once (memory: 8 bytes each)


def resolved_pair_indices(seeds: np.ndarray, confidence: float = CONFIDENCE):
    """The pairs (i < j) of rows of `seeds` (candidates x seeds, NaN where not completed)
    whose paired difference has a `confidence` t-interval that excludes zero: index arrays
    and the sign of their mean difference (row i minus row j). Computed a block of rows at
    a time: a sweep of K candidates has K(K-1)/2 pairs."""
    count = len(seeds)
    block = max(1, PAIR_BLOCK // max(1, count * seeds.shape[1]))
    firsts, seconds, signs = [], [], []
    for start in range(0, count, block):
        rows = np.arange(start, min(start + block, count))
        later = seeds[start + 1:]  # each pair once: row i against the rows after it
        n, mean, _, low, high = paired_rows(seeds[rows, None, :] - later[None, :, :], confidence)
        resolved = (n >= 2) & ((low > 0) | (high < 0)) & (np.arange(start + 1, count)[None, :] > rows[:, None])
        i, j = np.nonzero(resolved)
        firsts.append(rows[i])
        seconds.append(j + start + 1)
        signs.append(np.sign(mean[i, j]))
    if not firsts:
        return np.array([], int), np.array([], int), np.array([], float)
    return np.concatenate(firsts), np.concatenate(seconds), np.concatenate(signs)
