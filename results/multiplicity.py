"""Family-wise control of a sweep's comparisons: adjusted p-values and the adjusted
intervals that go with them.

A sweep compares 4-24 candidates with its baseline on a few seeds; at 95% each, one in
twenty true-null comparisons reads `better` or `worse` by chance. So the comparisons of one
sweep form a family, and a verdict needs its family-adjusted p-value below ALPHA:

- `holm` (the default): Holm's step-down adjustment, which bounds the family-wise error
  rate (the chance of any false verdict in the family) at ALPHA. Its interval is the
  Bonferroni one, at confidence 1 - ALPHA/m: simultaneous (all m cover together with
  probability >= 1 - ALPHA) and never narrower than Holm's test needs, so a Holm verdict
  can stand while that interval still touches zero (never the reverse).
- `bh`: Benjamini-Hochberg, which bounds the false discovery rate (the expected share of
  false verdicts among those given) at ALPHA. Its interval is Benjamini and Yekutieli's
  (2005) false-coverage-rate one, at confidence 1 - R * ALPHA/m for the R comparisons BH
  resolves (1 - ALPHA/m when it resolves none): it excludes zero exactly where BH resolves.
  Not simultaneous.
- `none`: each comparison at 95% on its own (the raw p-value and interval).

m counts the comparisons with a p-value (two or more paired seeds). Holm's formula is
short and kept here; BH is scipy's (`scipy.stats.false_discovery_control`).
"""

from __future__ import annotations

import numpy as np
from scipy import special
from scipy import stats as sps

from shapesweep.common import UserError

ADJUST_METHODS = ("holm", "bh", "none")
DEFAULT_ADJUST = "holm"
ALPHA = 0.05  # 1 - shapesweep.results.stats.CONFIDENCE
INTERVALS = {"holm": "Bonferroni (simultaneous), at 1 - alpha/m",
             "bh": "Benjamini-Yekutieli false-coverage-rate, at 1 - R alpha/m (R resolved; 1 when none)",
             "none": "each at 1 - alpha, unadjusted"}


def check_method(method: str, key: str = "--adjust") -> str:
    """`method` when it is one of ADJUST_METHODS, else one line naming `key`."""
    if method not in ADJUST_METHODS:
        raise UserError(f"{method!r} is not one of {', '.join(ADJUST_METHODS)}", key=key)
    return method


def adjusted_p(p: np.ndarray, method: str) -> np.ndarray:
    """The family-adjusted p-values of `p` (NaN entries stay NaN and are not in the family)."""
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    present = ~np.isnan(p)
    family = p[present]
    if method == "none" or not len(family):
        out[present] = family
    elif method == "holm":  # step-down: the i-th smallest times (m - i), never below an earlier one
        order = np.argsort(family, kind="stable")
        m = len(family)
        scaled = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * family[order]))
        adjusted = np.empty(m)
        adjusted[order] = scaled
        out[present] = adjusted
    elif method == "bh":
        out[present] = sps.false_discovery_control(family, method="bh")
    else:
        check_method(method)
    return out


def interval_confidence(p: np.ndarray, method: str, alpha: float = ALPHA) -> float:
    """The confidence of the family's adjusted intervals (the module docstring says which)."""
    p = np.asarray(p, float)
    m = int((~np.isnan(p)).sum())
    if method == "none" or m == 0:
        return 1 - alpha
    if method == "holm":
        return 1 - alpha / m
    resolved = int((adjusted_p(p, "bh") <= alpha).sum())
    return 1 - max(resolved, 1) * alpha / m


def paired_p(n: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Two-sided p-value of the paired t-test of each row (n pairs, their mean and sd): NaN
    with fewer than 2 pairs; 0 for a nonzero mean with no spread, 1 for a zero one."""
    n, mean, sd = (np.asarray(x, float) for x in (n, mean, sd))
    with np.errstate(all="ignore"):
        t = np.abs(mean) / (sd / np.sqrt(n))
        p = 2 * special.stdtr(n - 1, -t)  # Student's t cdf, without scipy.stats' checks per call
    p = np.where(np.isnan(t) & (sd == 0), 1.0, p)  # 0 / 0: the same values on every seed
    return np.where(n >= 2, p, np.nan)
