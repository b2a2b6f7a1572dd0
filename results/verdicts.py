"""Each candidate against its baseline (and every pair, exploratory), family-adjusted.

(`shapesweep.results.stats` describes the whole inference.)
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from shapesweep.common import UserError, plain
from shapesweep.results.candidates import candidate_results
from shapesweep.results.multiplicity import (
    ALPHA,
    DEFAULT_ADJUST,
    adjusted_p,
    check_method,
    interval_confidence,
    paired_p,
)
from shapesweep.results.paired import (
    paired_rows,
    seeds_for_power,
    verdict_words,
    verdict_words_of_p,
)
from shapesweep.results.tuned import BUDGET_GAP, CANDIDATE, EVAL_Z, loss_sign, seed_values


def budget_clusters(frame: pd.DataFrame) -> pd.Series:
    """A budget group number per row: sorted non-embedding (else total) parameter counts, a
    gap of more than BUDGET_GAP starting a new group; NaN without parameter counts."""
    params = frame["params_non_embedding"].astype(float).fillna(frame["params_total"].astype(float))
    order = params.dropna().sort_values()
    return (order / order.shift(1) > BUDGET_GAP).cumsum().reindex(frame.index)


def baseline_of(chosen: pd.DataFrame, baseline: str) -> pd.Series:
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


ADJUSTED_COLUMNS = ("p_value", "p_adjusted", "ci_low_adjusted", "ci_high_adjusted", "interval_confidence",
                    "family_size", "verdict_raw", "adjust")


VERDICT_COLUMNS = ("delta_vs_baseline", "ci_low", "ci_high", "n_paired", "verdict", "baseline_key",
                   "seeds_for_80pct_power", "no_verdict", "eval_se", "eval_noise", *ADJUSTED_COLUMNS)


def compare(trials: pd.DataFrame, metric: str = "val_loss",
            baseline: str | None = "baseline", adjust: str = DEFAULT_ADJUST) -> pd.DataFrame:
    """Every candidate (`candidate_results`), those with a result first, best first, with
    `delta_vs_baseline`, `ci_low`, `ci_high` (the raw 95% interval), `n_paired`, `verdict`,
    `baseline_key`, `seeds_for_80pct_power` (within noise only) and `no_verdict`: None with
    a verdict, else why not: the candidate's `state` (stopped, failed, choosing, pending),
    `n<2` (paired seeds), `no baseline` (none of variant `baseline` in its budget) or
    `baseline` (its baseline, `baseline_key`, has no result). The comparisons of one sweep
    are one family, adjusted by `adjust` (shapesweep.results.multiplicity): `p_value`,
    `p_adjusted`, `ci_low_adjusted`/`ci_high_adjusted` (at `interval_confidence`),
    `family_size`, `verdict_raw` (the raw interval's); `verdict` and the power column are
    the adjusted ones."""
    check_method(adjust)
    results = candidate_results(trials, metric)
    results = results.drop(columns=[c for c in VERDICT_COLUMNS if c in results]).join(
        pd.DataFrame({c: pd.Series([None] * len(results), index=results.index, dtype=object)
                      for c in VERDICT_COLUMNS}))
    measured = results["state"] == "measured"
    results.loc[~measured, "no_verdict"] = results.loc[~measured, "state"]
    pairs: list[tuple[int, int]] = []  # (candidate row, its baseline's row), both with results
    for _, sweep in results.groupby("sweep"):
        own = sweep.index[measured[sweep.index]]
        if baseline is None or not (sweep["variant"] == baseline).any():
            results.loc[own, "no_verdict"] = "no baseline"
            continue
        base_of = baseline_of(sweep, baseline)
        for index in own:
            base = base_of.get(index)
            if base is None or base != base:
                results.at[index, "no_verdict"] = "no baseline"
            elif not measured[int(base)]:
                results.loc[index, ["baseline_key", "no_verdict"]] = [results.at[int(base), "key"], "baseline"]
            else:
                pairs.append((index, int(base)))
    if pairs:
        _fill_verdicts(results, pairs, trials, metric, adjust)
    order = np.argsort(loss_sign(metric) * results["mean"].to_numpy(float), kind="stable")  # NaN last
    return results.iloc[order].reset_index(drop=True)


def _fill_verdicts(results: pd.DataFrame, pairs: list[tuple[int, int]], trials: pd.DataFrame,
                   metric: str, adjust: str) -> None:
    """`compare`'s columns for each (candidate row, baseline row) of `results`, at once."""
    seeds = seed_values(trials, metric).unstack("seed")  # (sweep, key, tuned) x seed
    where = pd.MultiIndex.from_frame(results[CANDIDATE])
    rows, bases = (np.array(side) for side in zip(*pairs, strict=True))
    matrix = seeds.to_numpy(float)
    diff = matrix[seeds.index.get_indexer(where[rows])] - matrix[seeds.index.get_indexer(where[bases])]
    n, mean, sd, low, high = paired_rows(diff)
    raw = verdict_words(n, low, high, metric)
    adjusted = _adjusted(results["sweep"].to_numpy()[rows], rows != bases, diff, n, mean, sd, adjust)
    verdicts = raw if adjust == "none" else verdict_words_of_p(n, mean, adjusted["p_adjusted"], metric)
    open_ = np.array([v == "within noise" for v in verdicts]) & (rows != bases)
    needed = np.full(len(rows), np.nan)
    if open_.any():  # at the adjusted intervals' level: what the adjusted verdict needs
        for level in np.unique(adjusted["interval_confidence"][open_]):
            at = open_ & (adjusted["interval_confidence"] == level)
            needed[at] = seeds_for_power(mean[at], sd[at], confidence=level)
    two = n >= 2
    noise = _eval_se(trials, metric, seeds.index, seeds.columns, where[rows], where[bases], diff)
    flagged = [None if e != e or v is None else bool(v != "within noise" and abs(d) <= EVAL_Z * e)
               for v, d, e in zip(verdicts, mean, noise, strict=True)]
    columns = {"delta_vs_baseline": np.where(n > 0, mean, np.nan), "ci_low": np.where(two, low, np.nan),
               "ci_high": np.where(two, high, np.nan), "n_paired": n, "verdict": verdicts,
               "baseline_key": results["key"].to_numpy()[bases], "seeds_for_80pct_power": needed,
               "no_verdict": [None if v else "n<2" for v in verdicts], "eval_se": noise,
               "eval_noise": flagged, "verdict_raw": raw, "adjust": [adjust] * len(rows), **adjusted}
    for column, values in columns.items():
        values = [v if not isinstance(v, float) or v == v else None for v in np.asarray(values, object).tolist()]
        if column in ("n_paired", "seeds_for_80pct_power", "family_size"):
            values = [None if v is None else int(v) for v in values]
        results.loc[rows, column] = pd.Series(values, index=rows, dtype=object)


def _adjusted(sweeps: np.ndarray, compared: np.ndarray, diff: np.ndarray, n: np.ndarray, mean: np.ndarray,
              sd: np.ndarray, adjust: str) -> dict[str, np.ndarray]:
    """Per (candidate, baseline) row: the raw p-value and, with the other comparisons of its
    sweep as the family (`compared` rows with two or more paired seeds; a baseline against
    itself is not one), the adjusted p-value and interval (shapesweep.results.multiplicity)."""
    p = np.where(compared, paired_p(n, mean, sd), np.nan)
    out = {"p_value": p, "p_adjusted": np.full(len(p), np.nan), "ci_low_adjusted": np.full(len(p), np.nan),
           "ci_high_adjusted": np.full(len(p), np.nan), "interval_confidence": np.full(len(p), np.nan),
           "family_size": np.full(len(p), np.nan)}
    for sweep in pd.unique(sweeps):
        own = (sweeps == sweep) & compared
        level = interval_confidence(p[own], adjust)
        out["p_adjusted"][own] = adjusted_p(p[own], adjust)
        _, _, _, low, high = paired_rows(diff[own], level)
        out["ci_low_adjusted"][own] = np.where(n[own] >= 2, low, np.nan)
        out["ci_high_adjusted"][own] = np.where(n[own] >= 2, high, np.nan)
        out["interval_confidence"][own] = level
        out["family_size"][own] = int((~np.isnan(p[own])).sum())
    return out


def exploratory_pairs(trials: pd.DataFrame, compared: pd.DataFrame, metric: str = "val_loss",
                      adjust: str = DEFAULT_ADJUST) -> dict[str, Any]:
    """Every pair of one sweep's candidates with a result (`compare`'s rows of state
    measured), paired over the seeds both completed: an exploratory family of its own,
    K(K-1)/2 comparisons adjusted by `adjust` apart from the primary one (each candidate vs
    its baseline). `family_size`, `interval_confidence`, `resolved_raw` and `resolved_adjusted`
    (counts) and `pairs`: the pairs whose raw 95% interval excludes zero, each oriented so that
    `better` is ahead (`delta`, better minus worse, in the metric's units), with its raw and
    adjusted p-value and interval and `verdict` (`better` where the adjusted p-value is at
    most ALPHA, else `within noise`), most resolved first, at most MAX_LISTED_PAIRS."""
    check_method(adjust)
    measured = compared[compared["state"] == "measured"]
    count = len(measured)
    if count > MAX_EXPLORATORY_CANDIDATES:  # millions of pairs: too many to be worth listing
        return {"adjust": adjust, "family_size": count * (count - 1) // 2, "interval_confidence": None,
                "resolved_raw": None, "resolved_adjusted": None, "pairs": [],
                "skipped": f"more than {MAX_EXPLORATORY_CANDIDATES} candidates with a result"}
    seeds = seed_values(trials, metric).unstack("seed")
    values = seeds.reindex(pd.MultiIndex.from_frame(measured[CANDIDATE])).to_numpy(float)
    first, second = np.triu_indices(count, 1)
    n, mean, sd, low, high = paired_rows(values[first] - values[second])
    p = paired_p(n, mean, sd)
    level = interval_confidence(p, adjust)
    p_adj = adjusted_p(p, adjust)
    raw = (n >= 2) & ((low > 0) | (high < 0))
    listed = np.flatnonzero(raw)[np.argsort(p[raw], kind="stable")][:MAX_LISTED_PAIRS]
    half = sps.t.ppf((1 + level) / 2, n[listed] - 1) * sd[listed] / np.sqrt(n[listed])  # the adjusted ends
    keys, variants = measured["key"].to_numpy(), measured["variant"].to_numpy()
    pairs = []
    for i, h in zip(listed.tolist(), half.tolist(), strict=True):
        flip = loss_sign(metric) * mean[i] > 0  # the first is behind: name the second first
        a, b = (second[i], first[i]) if flip else (first[i], second[i])
        delta = -mean[i] if flip else mean[i]
        ends = sorted([-high[i], -low[i]] if flip else [low[i], high[i]])
        pairs.append({"better": keys[a], "better_variant": plain(variants[a]), "worse": keys[b],
                      "worse_variant": plain(variants[b]), "n_paired": int(n[i]), "delta": float(delta),
                      "ci_low": float(ends[0]), "ci_high": float(ends[1]), "p_value": float(p[i]),
                      "p_adjusted": float(p_adj[i]), "ci_low_adjusted": float(delta - h),
                      "ci_high_adjusted": float(delta + h),
                      "verdict": "better" if p_adj[i] <= ALPHA else "within noise"})
    return {"adjust": adjust, "family_size": int((~np.isnan(p)).sum()), "interval_confidence": level,
            "resolved_raw": int(raw.sum()), "resolved_adjusted": int((p_adj <= ALPHA).sum()), "pairs": pairs}


MAX_EXPLORATORY_CANDIDATES = 2000  # 2M pairs; above, the exploratory family is counted, not computed


MAX_LISTED_PAIRS = 1000  # `exploratory_pairs` lists the most resolved; a sweep of K candidates has K(K-1)/2


def _eval_se(trials: pd.DataFrame, metric: str, index: pd.Index, seeds: pd.Index,
             candidates: pd.Index, bases: pd.Index, diff: np.ndarray) -> np.ndarray:
    """Per (candidate, baseline) pair, the mean over the seeds both completed of
    sqrt(se_c^2 + se_b^2) from each trial's `val_loss_se` (the module docstring says why); NaN
    for other metrics, or where a trial predates the column."""
    if metric != "val_loss" or "val_loss_se" not in trials or trials["val_loss_se"].isna().all():
        return np.full(len(candidates), np.nan)
    se = seed_values(trials, metric, "val_loss_se").unstack("seed").reindex(index=index, columns=seeds)
    matrix = se.to_numpy(float)
    both = np.sqrt(matrix[index.get_indexer(candidates)] ** 2 + matrix[index.get_indexer(bases)] ** 2)
    both[np.isnan(diff)] = np.nan  # only the seeds the difference pairs
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row of NaNs: no SE
        return np.nanmean(both, axis=1)


def with_planned(compared: pd.DataFrame, planned: pd.DataFrame, measure_seeds: list[int],
                 baseline: str | None = "baseline") -> pd.DataFrame:
    """`compare`'s rows plus, for each candidate of `planned` (store rows with `sweep`, one
    per key: `shapesweep.results.planned`) no trial of which has landed, a row with `state`
    and `no_verdict` `pending`, and on every row `missing_seeds` counting the sweep's
    `measure_seeds` too: a seed in flight, or not started, is missing until its trial lands.
    A candidate whose baseline is pending has `no_verdict` `baseline` (not `no baseline`)."""
    out = compared.copy()
    wanted = {int(s) for s in measure_seeds}
    out["missing_seeds"] = [sorted({*(missing or []), *(wanted - set(seeds or []))})
                            for missing, seeds in zip(out["missing_seeds"], out["seeds"], strict=True)]
    fresh = planned[~planned["key"].isin(set(compared["key"]))] if len(planned) else planned
    if fresh.empty:
        return out
    out = pd.concat([out, _pending_rows(out.columns, fresh, wanted)], ignore_index=True)
    out["n"] = out["n"].astype(int)
    if baseline is not None:
        _point_at_pending_baselines(out, baseline)
    return out


PENDING_VALUES = {"state": "pending", "no_verdict": "pending", "n": 0, "mean": np.nan, "std": np.nan,
                  "stopped": False, "chosen": False, "role": None, "tuned": None, "choice_n": 0,
                  "choice_mean": None, "close_choice": False, "stopped_tokens": None, "error": None}


def _pending_rows(columns: pd.Index, fresh: pd.DataFrame, wanted: set[int]) -> pd.DataFrame:
    """`with_planned`'s rows of the candidates in `fresh`, built in one step (a column at a
    time fragments the frame, and pandas warns at every later insert)."""
    count = len(fresh)
    lists = {"seeds": [[] for _ in range(count)], "failed_seeds": [[] for _ in range(count)],
             "tuned_edge": [[] for _ in range(count)], "missing_seeds": [sorted(wanted)] * count}
    names = dict.fromkeys([*(c for c in columns if c in fresh or c in ("sweep", "key")), *PENDING_VALUES, *lists])
    data = {name: lists[name] if name in lists else PENDING_VALUES[name] if name in PENDING_VALUES
            else fresh[name] if name in fresh else np.nan for name in names}
    return pd.DataFrame(data, index=fresh.index)


def _point_at_pending_baselines(rows: pd.DataFrame, baseline: str) -> None:
    """`no_verdict` `baseline` and its `baseline_key` for a measured candidate whose
    baseline (by `baseline_of`'s rule) is a pending one."""
    for _, sweep in rows.groupby("sweep"):
        if not (sweep["variant"] == baseline).any():
            continue
        try:
            base_of = baseline_of(sweep, baseline)
        except UserError:  # ambiguous baselines: `compare` said so already
            continue
        for index in sweep.index[sweep["no_verdict"] == "no baseline"]:
            base = base_of.get(index)
            if base is not None and base == base and rows.at[int(base), "state"] == "pending":
                rows.loc[index, ["baseline_key", "no_verdict"]] = [rows.at[int(base), "key"], "baseline"]
