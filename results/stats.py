"""Seed-level statistics of a sweep: every comparison with its uncertainty.

Seeds of one model differ by more than most effects the seed papers report, so a verdict
from one run is noise. Here:

- `tuned_stats`: per (sweep, key, tuned value) the mean, std (ddof=1) and n over seeds of
  the final metric of completed trials; per key the tuned value with the best mean is
  `chosen` (the candidate's result), the others are kept with `chosen` False.
- `compare`: each candidate at its chosen tuned value against the baseline variant at its
  own: the paired difference over the seeds both ran (same seed = same data order), its
  mean and 95% t-interval, and a verdict: `better` / `worse` when the interval lies on one
  side of zero, else `within noise` (also with fewer than 2 paired seeds: no interval).
- `rank_fidelity`: how well a short trial ranks candidates. At each evaluation point
  (tokens) that >= 3 candidates share, Kendall's tau between the candidates' mean metric
  there and their final mean; `stable_fraction` is the budget fraction from which tau
  stays >= 0.8 to the end.
- `asha_confirmation`: of ASHA's stop decisions, the fraction a full run confirms. A stopped
  trial is *checkable* when its candidate has a completed trial at the same tuned value (any
  seed); the decision is *confirmed* when that completed mean is outside the top
  ceil(N / reduction_factor) of the sweep's N completed (key, tuned value) means, i.e. ASHA's
  own promotion rule applied to the finals.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from shapesweep.common import UserError

HIGHER_IS_BETTER = frozenset({"psnr", "ssim", "accuracy", "tokens_per_s"})  # the rest: losses
CONFIDENCE = 0.95
FIDELITY_THRESHOLD = 0.8
MIN_RANKED = 3  # fewer candidates give no meaningful rank correlation
BUDGET_GAP = 1.15  # iso-budget candidates sit within a few percent: a wider gap is a new budget
CANDIDATE = ["sweep", "key", "tuned"]


def canonical_tuned(text: Any) -> str:
    """A trial's `tuned_json` as one canonical JSON text ("{}" when it tuned nothing)."""
    if not isinstance(text, str) or not text.strip():
        return "{}"
    return json.dumps(json.loads(text), sort_keys=True)


def canonical_tuned_column(texts: pd.Series) -> pd.Series:
    """`canonical_tuned` of every row, parsing each distinct text once."""
    return texts.map({text: canonical_tuned(text) for text in texts.unique()})


def _sign(metric: str) -> int:
    """+1 when lower is better, -1 when higher is: `sign * value` is always a loss."""
    return -1 if metric in HIGHER_IS_BETTER else 1


def _completed(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    done = trials[(trials["status"] == "completed") & trials[metric].notna()]
    return done.assign(tuned=canonical_tuned_column(done["tuned_json"]))


def tuned_stats(trials: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """One row per (sweep, key, tuned): the first trial's columns plus `mean`, `std`, `n`
    over seeds and `chosen` (the key's best mean). Only completed trials count."""
    done = _completed(trials, metric)
    if done.empty:
        return done.assign(mean=np.nan, std=np.nan, n=0, chosen=False)  # typed, though empty
    grouped = done.groupby(CANDIDATE, sort=False)
    out = _first_rows(done, grouped)
    out["mean"] = grouped[metric].mean()
    out["std"] = grouped[metric].std(ddof=1)  # NaN for one seed: no spread to speak of
    out["n"] = grouped[metric].size()
    out = out.reset_index()
    best = (_sign(metric) * out["mean"]).groupby([out["sweep"], out["key"]]).idxmin()
    out["chosen"] = out.index.isin(best.to_numpy())
    return out


def _first_rows(done: pd.DataFrame, grouped) -> pd.DataFrame:
    """`grouped.first()` from one take of each group's first row: a per-column first over
    some 70 columns costs a tenth of a second per call at 50,000 trials. Only a column where
    a first row lacks its value takes the first value its group has, as `first` does."""
    numbers, first = np.unique(grouped.ngroup().to_numpy(), return_index=True)
    out = done.iloc[first[numbers >= 0]].drop(columns=CANDIDATE)  # -1: a key with NaN, dropped
    out.index = grouped.size().index
    gaps = [c for c in out.columns if out[c].isna().any()]
    if gaps:
        out[gaps] = grouped[gaps].first()
    return out


def _seed_values(trials: pd.DataFrame, metric: str) -> pd.Series:
    """Final metric per (sweep, key, tuned, seed) of completed trials."""
    return _completed(trials, metric).groupby([*CANDIDATE, "seed"])[metric].mean()


def paired_difference(candidate: pd.Series, baseline: pd.Series, metric: str = "val_loss",
                      confidence: float = CONFIDENCE) -> dict[str, Any]:
    """candidate - baseline over the seeds both have (Series indexed by seed): mean, t-interval,
    verdict. Fewer than 2 pairs: no interval, `within noise`."""
    diff = (candidate - baseline).dropna()
    n = len(diff)
    out = {"delta": float(diff.mean()) if n else None, "ci_low": None, "ci_high": None,
           "n_paired": n, "verdict": "within noise"}
    if n < 2:
        return out
    half = sps.t.ppf((1 + confidence) / 2, n - 1) * diff.std(ddof=1) / math.sqrt(n)
    low, high = out["delta"] - half, out["delta"] + half
    out.update(ci_low=float(low), ci_high=float(high))
    improves, hurts = (high < 0, low > 0) if _sign(metric) > 0 else (low > 0, high < 0)
    out["verdict"] = "better" if improves else "worse" if hurts else "within noise"
    return out


def budget_clusters(frame: pd.DataFrame) -> pd.Series:
    """A budget group number per row: sorted non-embedding (else total) parameter counts, a
    gap of more than BUDGET_GAP starting a new group; NaN without parameter counts."""
    params = frame["params_non_embedding"].astype(float).fillna(frame["params_total"].astype(float))
    order = params.dropna().sort_values()
    return (order / order.shift(1) > BUDGET_GAP).cumsum().reindex(frame.index)


def _baseline_of(chosen: pd.DataFrame, baseline: str) -> pd.Series:
    """Index of each chosen candidate's baseline row (NaN where its group has none).

    One baseline candidate anchors the whole sweep; several (one per budget) anchor their
    own budget group, and two in one group is ambiguous: refused.
    """
    bases = chosen[chosen["variant"] == baseline]
    if len(bases) == 1:
        return pd.Series(bases.index[0], index=chosen.index)
    group = budget_clusters(chosen)
    per_group = bases.groupby(group[bases.index]).size()
    if (per_group > 1).any() or group[bases.index].isna().any():
        sweep = chosen["sweep"].iloc[0]
        raise UserError(f"sweep {sweep!r} has {len(bases)} candidates of variant {baseline!r} "
                        "and they do not fall one per parameter budget, so no candidate has one "
                        "baseline to compare with", key="--baseline")
    base_of_group = pd.Series(bases.index, index=group[bases.index].to_numpy())
    return group.map(base_of_group)


def compare(trials: pd.DataFrame, metric: str = "val_loss",
            baseline: str | None = "baseline") -> pd.DataFrame:
    """The chosen row of every candidate, ordered best first, with `delta_vs_baseline`,
    `ci_low`, `ci_high`, `n_paired`, `verdict` and `baseline_key` (all None without a
    candidate of variant `baseline` in its sweep)."""
    stats = tuned_stats(trials, metric)
    chosen = stats[stats["chosen"]].copy()
    columns = ("delta_vs_baseline", "ci_low", "ci_high", "n_paired", "verdict", "baseline_key")
    for column in columns:
        chosen[column] = None
    values = _seed_values(trials, metric)
    for _, sweep in chosen.groupby("sweep"):
        if baseline is None or not (sweep["variant"] == baseline).any():
            continue
        base_index = _baseline_of(sweep, baseline)
        for index, base in base_index.dropna().items():
            base = chosen.loc[base]
            result = paired_difference(values[tuple(chosen.loc[index, CANDIDATE])],
                                       values[tuple(base[CANDIDATE])], metric)
            chosen.loc[index, list(columns)] = [result["delta"], result["ci_low"], result["ci_high"],
                                                result["n_paired"], result["verdict"], base["key"]]
    return chosen.sort_values("mean", ascending=_sign(metric) > 0).reset_index(drop=True)


def rank_fidelity(trials: pd.DataFrame, curves: pd.DataFrame,
                  metric: str = "val_loss") -> pd.DataFrame:
    """Per sweep and evaluation point shared by >= MIN_RANKED candidates: `tokens`,
    `budget_fraction` (of the longest curve), `n_candidates` and `kendall_tau` between the
    candidates' mean metric there and their final mean (completed trials, chosen tuned value)."""
    columns = ["sweep", "tokens", "budget_fraction", "n_candidates", "kendall_tau"]
    if metric not in curves:  # e.g. val_ppl: final only, no curve to rank by
        return pd.DataFrame(columns=columns)
    stats = tuned_stats(trials, metric)
    chosen = stats.loc[stats["chosen"], CANDIDATE + ["mean"]]
    done = _completed(trials, metric).merge(chosen, on=CANDIDATE)[["sweep", "trial_id", "key", "mean"]]
    points = curves[curves[metric].notna()].merge(done, on=["sweep", "trial_id"])
    if points.empty:
        return pd.DataFrame(columns=columns)
    at = points.groupby(["sweep", "tokens", "key"]).agg(value=(metric, "mean"), final=("mean", "first"))
    longest = points.groupby("sweep")["tokens"].max()
    rows = []
    for (sweep, tokens), group in at.groupby(level=["sweep", "tokens"]):
        if len(group) >= MIN_RANKED:
            tau = sps.kendalltau(group["value"], group["final"]).statistic
            rows.append((sweep, int(tokens), tokens / longest[sweep], len(group), float(tau)))
    return pd.DataFrame(rows, columns=columns)


def cooled_rank_fidelity(trials: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """`rank_fidelity` of the cooled evaluations (`val_loss_cooled`, trainers/cooldown.py)
    against each candidate's final val_loss: how well a short run cooled down ranks them.
    Empty when no curve point has one."""
    if "val_loss_cooled" not in curves:
        return rank_fidelity(trials, curves.iloc[:0])
    return rank_fidelity(trials, curves.assign(val_loss=curves["val_loss_cooled"]))


def stable_fraction(fidelity: pd.DataFrame, threshold: float = FIDELITY_THRESHOLD) -> float | None:
    """The budget fraction from which Kendall's tau stays >= threshold to the last point (one
    sweep's `rank_fidelity`); None when the last point is below it."""
    ordered = fidelity.sort_values("tokens")
    tau = ordered["kendall_tau"].to_numpy(float)
    below = np.flatnonzero(~(tau >= threshold - 1e-9))  # NaN counts as below; 4/5 is 0.7999...
    start = below[-1] + 1 if len(below) else 0
    return float(ordered["budget_fraction"].iloc[start]) if start < len(ordered) else None


def asha_confirmation(trials: pd.DataFrame, reduction_factor: float,
                      metric: str = "val_loss") -> dict[str, Any]:
    """How many stop decisions a full run confirms (the module docstring defines it):
    `stopped`, `checkable`, `confirmed` and `fraction` (None when nothing is checkable)."""
    stats = tuned_stats(trials, metric)
    stopped = trials[trials["status"] == "stopped_early"]
    out = {"stopped": len(stopped), "checkable": 0, "confirmed": 0, "fraction": None}
    if stats.empty or stopped.empty:
        return out
    stats = stats.assign(rank=(_sign(metric) * stats["mean"]).groupby(stats["sweep"]).rank(method="min"))
    top = stats.groupby("sweep")["key"].transform("size").map(lambda n: math.ceil(n / reduction_factor))
    outside = pd.Series((stats["rank"] > top).to_numpy(), index=pd.MultiIndex.from_frame(stats[CANDIDATE]))
    keys = pd.MultiIndex.from_arrays([stopped["sweep"], stopped["key"],
                                      canonical_tuned_column(stopped["tuned_json"])])
    checked = outside.reindex(keys).dropna()
    out.update(checkable=len(checked), confirmed=int(checked.astype(bool).sum()))
    out["fraction"] = out["confirmed"] / out["checkable"] if out["checkable"] else None
    return out
