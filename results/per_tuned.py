"""Every tuned value a candidate ran, each against its baseline at the same and at the chosen value.

(`shapesweep.results.stats` describes the whole inference.)
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from shapesweep.results.paired import paired_rows, verdict_words
from shapesweep.results.tuned import (
    CANDIDATE,
    canonical_tuned_column,
    is_choice,
    is_ok,
    seed_values,
    tuned_stats,
)
from shapesweep.results.verdicts import baseline_of

PER_TUNED_SIDES = ("same", "chosen")  # the baseline at the row's tuned value; at its own chosen one


def per_tuned(trials: pd.DataFrame, metric: str = "val_loss", baseline: str | None = "baseline") -> pd.DataFrame:
    """One row per (sweep, key, tuned value) that trials ran, every value, not only the chosen
    one: `variant`, `state` (`measured`; `stopped`, a seed stopped early: no mean of the
    survivors; `failed`; `pending`, none ended; `choice only`, only choice seeds ran it),
    `mean`, `std`, `n`, `seeds` over its completed measure seeds (a choice seed's trial never
    counts: `choice_mean` and `choice_n` say what the choice seeds measured, apart), `chosen`
    (`tuned_stats`' result value), and for each side of PER_TUNED_SIDES the paired difference
    to the candidate's baseline (`baseline_of`'s) over the seeds both completed:
    `delta_SIDE`, `ci_low_SIDE`, `ci_high_SIDE`, `n_SIDE`, `verdict_SIDE` (the baseline at
    the row's own tuned value, and at the baseline's chosen value), with `baseline_key`
    and `baseline_tuned`."""
    columns = ["sweep", "key", "variant", "tuned", "state", "mean", "std", "n", "seeds", "chosen",
               "choice_mean", "choice_n", "baseline_key", "baseline_tuned",
               *(f"{c}_{side}" for side in PER_TUNED_SIDES
                 for c in ("delta", "ci_low", "ci_high", "n", "verdict"))]
    if trials.empty:
        return pd.DataFrame(columns=columns)
    rows = trials.assign(tuned=canonical_tuned_column(trials["tuned_json"]), is_ok=is_ok(trials, metric),
                         _choice=is_choice(trials))
    chosen = tuned_stats(trials, metric)
    chosen = set(map(tuple, chosen.loc[chosen["chosen"], CANDIDATE].itertuples(index=False, name=None)))
    table = []
    for (sweep, key, tuned), group in rows.groupby(CANDIDATE, sort=False):
        measure, choice = group[~group["_choice"]], group[group["_choice"]]
        done = measure[measure["is_ok"]]
        statuses = set(measure["status"])
        state = ("choice only" if measure.empty else "stopped" if "stopped_early" in statuses
                 else "measured" if len(done) else "failed" if "failed" in statuses else "pending")
        values = done.groupby("seed")[metric].mean()
        picked = choice.loc[choice["is_ok"], metric].astype(float)
        table.append({"sweep": sweep, "key": key, "variant": group["variant"].iloc[0], "tuned": tuned,
                      "state": state, "mean": values.mean() if state == "measured" else np.nan,
                      "std": values.std(ddof=1) if state == "measured" and len(values) > 1 else np.nan,
                      "n": len(values) if state == "measured" else 0,
                      "seeds": sorted(int(s) for s in values.index), "chosen": (sweep, key, tuned) in chosen,
                      "choice_mean": float(picked.mean()) if len(picked) else None, "choice_n": len(picked)})
    out = pd.DataFrame(table).reindex(columns=columns)
    for column in ("baseline_key", "baseline_tuned"):
        out[column] = pd.Series(None, index=out.index, dtype=object)
    _per_tuned_baselines(out, trials, chosen, baseline)
    if out["baseline_key"].notna().any():
        _per_tuned_differences(out, trials, metric)
    numbers = [tuple(v for v in json.loads(t).values() if isinstance(v, int | float)) for t in out["tuned"]]
    order = sorted(range(len(out)), key=lambda i: (out.at[i, "sweep"], out.at[i, "key"] != out.at[i, "baseline_key"],
                                                    str(out.at[i, "variant"]), out.at[i, "key"], numbers[i]))
    return out.iloc[order].reset_index(drop=True)


def _per_tuned_baselines(out: pd.DataFrame, trials: pd.DataFrame, chosen: set, baseline: str | None) -> None:
    """`baseline_key` and `baseline_tuned` (its chosen value, None while it has none) of each
    row of `per_tuned`, by `baseline_of`'s rule (one per sweep, or one per budget)."""
    if baseline is None:
        return
    firsts = trials.drop_duplicates(["sweep", "key"]).reset_index(drop=True)
    for _, sweep in firsts.groupby("sweep"):
        if not (sweep["variant"] == baseline).any():
            continue
        base_of = baseline_of(sweep, baseline)  # ambiguous: the UserError `compare` raises too
        keys = {sweep.at[i, "key"]: sweep.at[int(b), "key"] for i, b in base_of.items() if b == b}
        rows = out.index[(out["sweep"] == sweep["sweep"].iloc[0]) & out["key"].isin(keys)]
        out.loc[rows, "baseline_key"] = out.loc[rows, "key"].map(keys)
        picks = {k: t for s, k, t in chosen if s == sweep["sweep"].iloc[0]}
        out.loc[rows, "baseline_tuned"] = out.loc[rows, "baseline_key"].map(picks).astype(object)


def _per_tuned_differences(out: pd.DataFrame, trials: pd.DataFrame, metric: str) -> None:
    """`per_tuned`'s paired differences, every row and side at once (`paired_rows`)."""
    seeds = seed_values(trials, metric).unstack("seed")  # (sweep, key, tuned) x seed, measure seeds
    matrix = np.vstack([seeds.to_numpy(float), np.full((1, seeds.shape[1]), np.nan)])  # last: no row
    mine = seeds.index.get_indexer(pd.MultiIndex.from_frame(out[CANDIDATE]))
    measured = (out["state"] == "measured").to_numpy()
    results = pd.MultiIndex.from_frame(out.loc[measured, CANDIDATE])  # a stopped value is no baseline
    for side, tuned in (("same", out["tuned"]), ("chosen", out["baseline_tuned"])):
        wanted = pd.MultiIndex.from_arrays([out["sweep"], out["baseline_key"], tuned])
        theirs = np.where(wanted.isin(results), seeds.index.get_indexer(wanted), -1)
        useful = measured & (theirs >= 0) & (mine >= 0) & (mine != theirs)
        diff = matrix[np.where(useful, mine, -1)] - matrix[np.where(useful, theirs, -1)]
        n, mean, _, low, high = paired_rows(diff)
        two = n >= 2
        verdicts = verdict_words(n, low, high, metric)
        out[f"delta_{side}"] = np.where(n > 0, mean, np.nan)
        out[f"ci_low_{side}"] = np.where(two, low, np.nan)
        out[f"ci_high_{side}"] = np.where(two, high, np.nan)
        out[f"n_{side}"] = n
        out[f"verdict_{side}"] = pd.Series(verdicts, index=out.index, dtype=object)
