"""How well short trials rank candidates, and how often a full run confirms ASHA's stops.

(`shapesweep.results.stats` describes the whole inference.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from shapesweep.results.paired import resolved_pair_indices
from shapesweep.results.tuned import (
    CANDIDATE,
    FIDELITY_THRESHOLD,
    MIN_RANKED,
    canonical_tuned_column,
    completed_measures,
    loss_sign,
    tuned_stats,
)


def rank_fidelity(trials: pd.DataFrame, curves: pd.DataFrame, metric: str = "val_loss",
                  curve_metric: str | None = None) -> pd.DataFrame:
    """Per sweep and evaluation point shared by >= MIN_RANKED candidates with a result:
    `tokens`, `budget_fraction` (of the longest curve), `n_candidates`, `kendall_tau` over
    the resolved pairs there (NaN with none), `resolved_pairs`, `swapped_resolved_pairs`
    and `unresolved_pairs`. A pair is resolved when the paired 95% interval of its final
    `metric` difference excludes zero. At a point a resolved pair is concordant when its two
    candidates' seed means of `curve_metric` (default `metric`; e.g. a cooled loss) are in
    their final order, swapped when in the other (a tie there is neither):
    tau = (concordant - swapped) / resolved pairs. Unresolved pairs are never swaps."""
    column = curve_metric or metric
    columns = ["sweep", "tokens", "budget_fraction", "n_candidates", "kendall_tau", "resolved_pairs",
               "swapped_resolved_pairs", "unresolved_pairs"]
    if column not in curves:  # e.g. val_ppl: final only, no curve to rank by
        return pd.DataFrame(columns=columns)
    stats = tuned_stats(trials, metric)
    chosen = stats.loc[stats["chosen"], CANDIDATE]
    done = completed_measures(trials, metric).merge(chosen, on=CANDIDATE)
    points = curves[curves[column].notna()].merge(done[["sweep", "trial_id", "key"]], on=["sweep", "trial_id"])
    if points.empty:
        return pd.DataFrame(columns=columns)
    finals = done.pivot_table(index=["sweep", "key"], columns="seed", values=metric, aggfunc="mean")
    at = points.pivot_table(index=["sweep", "tokens"], columns="key", values=column, aggfunc="mean")
    rows = []
    for sweep, at_points in at.groupby(level="sweep"):
        keys = at_points.columns[at_points.notna().any()]
        seeds = finals.loc[sweep].reindex(keys).to_numpy(float)
        first, second, order = resolved_pair_indices(seeds)
        longest = at_points.index.get_level_values("tokens").max()
        for (_, tokens), values in at_points[keys].iterrows():
            value = values.to_numpy(float)
            present = ~np.isnan(value)
            if present.sum() < MIN_RANKED:
                continue
            both = present[first] & present[second]
            agree = np.sign(value[first[both]] - value[second[both]]) * order[both]
            resolved, swapped = int(both.sum()), int((agree < 0).sum())
            unresolved = int(present.sum() * (present.sum() - 1) // 2) - resolved
            tau = float((agree > 0).sum() - swapped) / resolved if resolved else np.nan
            rows.append((sweep, int(tokens), tokens / longest, int(present.sum()), tau, resolved,
                         swapped, unresolved))
    return pd.DataFrame(rows, columns=columns)


def cooled_column(metric: str) -> str:
    """The curves column of `metric` after a branched cooldown (trainers/cooldown.py writes it)."""
    return f"{metric}_cooled"


def cooled_rank_fidelity(trials: pd.DataFrame, curves: pd.DataFrame,
                         metric: str = "val_loss") -> pd.DataFrame:
    """`rank_fidelity` of the cooled evaluations (`METRIC_cooled`, trainers/cooldown.py)
    against each candidate's final `metric`: how well a short run cooled down ranks them.
    Empty when no curve point has one."""
    return rank_fidelity(trials, curves, metric, curve_metric=cooled_column(metric))


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
    out: dict[str, Any] = {"stopped": len(stopped), "checkable": 0, "confirmed": 0, "fraction": None}
    if stats.empty or stopped.empty:
        return out
    stats = stats.assign(rank=(loss_sign(metric) * stats["mean"]).groupby(stats["sweep"]).rank(method="min"))
    top = stats.groupby("sweep")["key"].transform("size").map(lambda n: math.ceil(n / reduction_factor))
    outside = pd.Series((stats["rank"] > top).to_numpy(), index=pd.MultiIndex.from_frame(stats[CANDIDATE]))
    keys = pd.MultiIndex.from_arrays([stopped["sweep"], stopped["key"],
                                      canonical_tuned_column(stopped["tuned_json"])])
    checked = outside.reindex(keys).dropna()
    out.update(checkable=len(checked), confirmed=int(checked.astype(bool).sum()))
    out["fraction"] = out["confirmed"] / out["checkable"] if out["checkable"] else None
    return out
