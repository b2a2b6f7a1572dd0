"""Seed-level statistics of a sweep: every comparison with its uncertainty.

Seeds of one model differ by more than most effects the papers report, so a verdict
from one run is noise. Here:

- Seed roles: a space may name `tune.choice_seeds`, the seeds that *choose* each
  candidate's tuned value, apart from the seeds that *measure* it. A trial of a choice seed
  carries `chooses` True (`shapesweep.results.roles.with_seed_roles`); its loss picks the
  value and never enters a mean, interval or verdict. Without choice seeds every trial
  measures, and the value is chosen on the seeds that then measure it (selection bias:
  the best of several noisy means is optimistic).
- `choose_tuned`: from choice trials, per candidate the tuned value whose choice trials
  all completed with the best mean CHOICE_METRIC (the sweep's objective: what the runner
  chose the measure trials by, whatever metric a reader compares).
- `tuned_stats`: per (sweep, key, tuned value) the mean, std (ddof=1) and n over seeds of
  the final metric of completed trials, and `stopped` when a seed of it was stopped early.
  `chosen` marks the candidate's result: the chosen value's measure seeds, none stopped.
  Without choice seeds it is the best mean among the values no seed of which was stopped.
- `candidate_results`: one row per candidate, its result or its `state` saying why it has
  none (stopped, failed, its value still being chosen, trials not run), the seeds missing.
- `compare`: each candidate with a result against the baseline variant: the paired
  difference over the seeds both completed (same seed = same data order), its mean and
  95% t-interval, its p-value, and with the sweep's other comparisons as one family
  (shapesweep.results.multiplicity; Holm by default) the adjusted p-value and interval and
  the verdict: `better` / `worse` when the adjusted p-value is at most 0.05, else `within
  noise` (`verdict_raw`: the raw interval's), with `seeds_for_80pct_power` (paired seeds a
  test at the adjusted level needs at the observed effect, 80% power). Fewer than 2 paired
  seeds, or no result on either side: no verdict, and `no_verdict` says why.
- `exploratory_pairs`: every pair of a sweep's candidates with a result, a second family
  adjusted on its own (exploratory: not the planned comparisons).
  For val_loss, `eval_se` bounds the evaluation's own noise in that difference: over the
  paired seeds, the mean of sqrt(se_c^2 + se_b^2) from each trial's `val_loss_se` (both models
  read the same held-out sequences, so their losses correlate and the difference's standard
  error is smaller; and a fixed set's error is shared by the seeds, so it does not shrink
  with them), and `eval_noise` flags a `better`/`worse` within EVAL_Z x `eval_se` of zero:
  a difference the evaluation set alone could make (evaluate more tokens to settle it).
- `rank_fidelity`: how well a short trial ranks candidates, over the *resolved* pairs
  (pairs whose final paired interval excludes zero; the others cannot be swapped, since
  their order is noise). At each evaluation point that >= 3 candidates share, Kendall's tau
  over those pairs, the pairs, the swapped ones, and the unresolved pairs counted apart;
  `stable_fraction` is the budget fraction from which tau stays >= 0.8 to the end.
- `asha_confirmation`: of ASHA's stop decisions, the fraction a full run confirms. A stopped
  trial is *checkable* when its candidate has a completed trial at the same tuned value (any
  seed); the decision is *confirmed* when that completed mean is outside the top
  ceil(N / reduction_factor) of the sweep's N completed (key, tuned value) means, i.e. ASHA's
  own promotion rule applied to the finals.

Why one module of this length: every statistic a verdict rests on (paired
differences, power, rank fidelity, seed roles' effects) is here, so one reading
shows the whole inference and the tests hold it to one convention.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from shapesweep.common import UserError, plain
from shapesweep.results.multiplicity import (
    ALPHA,
    DEFAULT_ADJUST,
    adjusted_p,
    check_method,
    interval_confidence,
    paired_p,
)

HIGHER_IS_BETTER = frozenset({"psnr", "ssim", "accuracy", "tokens_per_s"})  # the rest: losses
CONFIDENCE = 0.95
POWER = 0.8  # `seeds_for_80pct_power`'s
EVAL_Z = 1.96  # a normal's 95% two-sided quantile, for the evaluation-noise flag
MAX_POWER_SEEDS = 100_000  # above this the effect is as good as zero: None
FIDELITY_THRESHOLD = 0.8
MIN_RANKED = 3  # fewer candidates give no meaningful rank correlation
BUDGET_GAP = 1.15  # iso-budget candidates sit within a few percent: a wider gap is a new budget
CANDIDATE = ["sweep", "key", "tuned"]
CHOICE_METRIC = "val_loss"  # what a sweep with choice seeds chooses by (ASHA's and Optuna's too)
ROLE_COLUMN = "chooses"  # True on a trial of a choice seed (shapesweep.results.roles)
ENDED = ("completed", "stopped_early", "failed")


def canonical_tuned(text: Any) -> str:
    """A trial's `tuned_json` as one canonical JSON text ("{}" when it tuned nothing)."""
    if not isinstance(text, str) or not text.strip():
        return "{}"
    return json.dumps(json.loads(text), sort_keys=True)


def canonical_tuned_column(texts: pd.Series) -> pd.Series:
    """`canonical_tuned` of every row, parsing each distinct text once. Always text (object)
    dtype: an empty column (a sweep whose trials all still run) then merges with a full one."""
    return texts.map({text: canonical_tuned(text) for text in texts.unique()}).astype(object)


def _sign(metric: str) -> int:
    """+1 when lower is better, -1 when higher is: `sign * value` is always a loss."""
    return -1 if metric in HIGHER_IS_BETTER else 1


def _chooses(trials: pd.DataFrame) -> pd.Series:
    """Whether each trial is of a choice seed (False where the frame has no roles)."""
    if ROLE_COLUMN not in trials:
        return pd.Series(False, index=trials.index)
    return trials[ROLE_COLUMN].fillna(False).astype(bool)


def _ok(trials: pd.DataFrame, metric: str) -> pd.Series:
    return (trials["status"] == "completed") & trials[metric].notna()


def _completed(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Completed measure trials (a choice seed's never count), with `tuned`."""
    done = trials[_ok(trials, metric) & ~_chooses(trials)]
    return done.assign(tuned=canonical_tuned_column(done["tuned_json"]))


def choose_tuned(choice: pd.DataFrame, metric: str = CHOICE_METRIC) -> pd.Series:
    """(sweep, key) -> the tuned text chosen from the choice trials `choice`: among the
    values whose every choice trial completed, the best mean `metric` (ties: the first
    text). Candidates with no such value are absent. The runner (shapesweep.sweep.choice)
    decides with this too, once all of a candidate's choice trials have ended."""
    if choice.empty:
        return pd.Series(dtype=object)
    table = _choice_scores(choice, metric).sort_values(["score", "tuned"], kind="stable")
    return table.groupby(["sweep", "key"], sort=False)["tuned"].first()


def _choice_scores(choice: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (sweep, key, tuned) of the choice trials whose every trial completed: `score`, the
    mean of the metric signed so that lower is better (what a choice is made by)."""
    rows = choice.assign(tuned=canonical_tuned_column(choice["tuned_json"]), ok=_ok(choice, metric),
                         score=_sign(metric) * choice[metric].astype(float))
    grouped = rows.groupby(CANDIDATE, sort=False)
    table = pd.DataFrame({"ok": grouped["ok"].all(), "score": grouped["score"].mean()}).reset_index()
    return table[table["ok"]].drop(columns="ok")


def _choice_margins(choice: pd.DataFrame, chosen: pd.Series, metric: str) -> np.ndarray:
    """For each (sweep, key) -> chosen tuned text of `chosen`: the next best value's signed
    choice mean minus the chosen one's (positive: the chosen value is ahead), NaN where no
    other value completed every choice seed."""
    if choice.empty:
        return np.full(len(chosen), np.nan)
    scores = _choice_scores(choice, metric).merge(
        pd.DataFrame({"sweep": chosen.index.get_level_values(0), "key": chosen.index.get_level_values(1),
                      "chosen": chosen.to_numpy()}), on=["sweep", "key"])
    mine = scores[scores["tuned"] == scores["chosen"]].groupby(["sweep", "key"])["score"].first()
    rest = scores[scores["tuned"] != scores["chosen"]].groupby(["sweep", "key"])["score"].min()
    return (rest - mine).reindex(chosen.index).to_numpy(float)


def tuned_stats(trials: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """One row per (sweep, key, tuned) with a completed trial: the first trial's columns
    plus `mean`, `std`, `n` over its seeds, `role` (`measure`; `choice` for a value only
    choice seeds ran), `stopped` (a seed of it was stopped early: its mean is of the seeds
    that survived) and `chosen` (the candidate's result; the module docstring says which)."""
    tuned = canonical_tuned_column(trials["tuned_json"])
    role = pd.Series(np.where(_chooses(trials), "choice", "measure"), index=trials.index)
    keys = [*CANDIDATE, "role"]
    stopped = (trials["status"] == "stopped_early").groupby(
        [trials["sweep"], trials["key"], tuned, role], sort=False).any().rename_axis(keys)
    ok = _ok(trials, metric)
    done = trials[ok].assign(tuned=tuned[ok], role=role[ok])  # one copy of the completed rows
    if done.empty:  # typed, though empty
        return done.assign(mean=np.nan, std=np.nan, n=0, stopped=False, chosen=False)
    grouped = done.groupby(keys, sort=False)
    out = _first_rows(done, grouped, keys)
    out["mean"] = grouped[metric].mean()
    out["std"] = grouped[metric].std(ddof=1)  # NaN for one seed: no spread to speak of
    out["n"] = grouped[metric].size()
    out["stopped"] = stopped.reindex(out.index).to_numpy()
    out = out.reset_index()
    # a value the measure seeds ran is described by them; its choice trials only chose it
    out = out[~(out.duplicated(CANDIDATE, keep=False) & (out["role"] == "choice"))].reset_index(drop=True)
    eligible = (out["role"] == "measure") & ~out["stopped"]
    if (role == "choice").any():  # a candidate with choice trials: only the value they chose
        choice = trials[role == "choice"]
        owners = pd.MultiIndex.from_frame(out[["sweep", "key"]])
        choosing = owners.isin(pd.MultiIndex.from_frame(choice[["sweep", "key"]]))
        wanted = choose_tuned(choice).reindex(owners).to_numpy()
        eligible &= np.where(choosing, out["tuned"] == wanted, True)
    score = _sign(metric) * out.loc[eligible, "mean"]
    best = score.groupby([out.loc[eligible, "sweep"], out.loc[eligible, "key"]]).idxmin()
    out["chosen"] = out.index.isin(best.to_numpy())
    return out


def _first_rows(done: pd.DataFrame, grouped, keys: list[str]) -> pd.DataFrame:
    """`grouped.first()` from one take of each group's first row: a per-column first over
    some 70 columns costs a tenth of a second per call at 50,000 trials. Only a column where
    a first row lacks its value takes the first value its group has, as `first` does."""
    numbers, first = np.unique(grouped.ngroup().to_numpy(), return_index=True)
    out = done.iloc[first[numbers >= 0]].drop(columns=keys)  # -1: a key with NaN, dropped
    out.index = grouped.size().index
    gaps = [c for c in out.columns if out[c].isna().any()]
    if gaps:  # joined in one step: a column set at a time fragments the frame
        out = pd.concat([out.drop(columns=gaps), grouped[gaps].first()], axis=1)[list(out.columns)]
    return out


def _seed_values(trials: pd.DataFrame, metric: str, column: str | None = None) -> pd.Series:
    """Final metric (or another `column` of the same trials) per (sweep, key, tuned, seed) of
    completed measure trials."""
    return _completed(trials, metric).groupby([*CANDIDATE, "seed"])[column or metric].mean()


RESULT_COLUMNS = ("state", "seeds", "missing_seeds", "failed_seeds", "stopped_tokens", "error",
                  "choice_mean", "choice_n", "tuned_edge")


def candidate_results(trials: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """One row per candidate (sweep, key): its chosen `tuned_stats` row where it has a result
    (`state` measured), else its first trial's columns, no mean (`n` 0) and the `state` that
    says why: `stopped` (ASHA stopped a seed; `stopped_tokens`, the furthest), `failed`
    (`error`, a failed trial's last line), `choosing` (its choice trials have not all
    ended) or `pending` (its trials have not run). Also `tuned` (the chosen value's text,
    None where none is), `seeds` (completed measure seeds), `missing_seeds` (the sweep's
    measure seeds without one), `failed_seeds`, `choice_mean` (the chosen value's mean over
    the choice seeds, `choice_n` of them), `choice_margin` (how far, on the choice seeds, the
    chosen value's mean is ahead of the next value's, in `metric`'s better direction),
    `close_choice` (that margin is below the seed noise of a mean over the choice seeds,
    std / sqrt(choice_n) from the measure seeds' std: other seeds may choose otherwise) and
    `tuned_edge` (tune keys whose chosen value is the lowest or highest of the sweep's grid:
    the optimum may lie beyond it)."""
    stats = tuned_stats(trials, metric)
    chosen = stats[stats["chosen"]].set_index(["sweep", "key"])
    if trials.empty:
        return stats.assign(**{c: None for c in RESULT_COLUMNS})
    owners = pd.MultiIndex.from_frame(trials[["sweep", "key"]])
    rest = trials[~owners.isin(chosen.index)]  # candidates without a result: their first rows
    parts = [chosen.drop(columns="tuned")]
    if len(rest):
        first = _first_rows(rest, rest.groupby(["sweep", "key"], sort=False), ["sweep", "key"])
        parts.append(first.assign(mean=np.nan, std=np.nan, n=0, stopped=False, chosen=False, role=None))
    out = pd.concat([part for part in parts if len(part)]).copy()  # consolidated: pandas warns as columns are added
    picked = choose_tuned(trials[_chooses(trials)])
    info = _result_info(trials, dict(zip(chosen.index, chosen["tuned"], strict=True)),
                        dict(zip(picked.index, picked, strict=True)), metric)
    for column in (*RESULT_COLUMNS, "tuned"):
        out[column] = [info[owner][column] for owner in out.index]
    out["n"] = out["n"].astype(int)
    out["choice_margin"] = _choice_margins(trials[_chooses(trials)], out["tuned"], metric)
    noise = out["std"] / np.sqrt(out["choice_n"].astype(float))
    out["close_choice"] = (out["choice_margin"] < noise).to_numpy()  # NaN on either side: False
    return out.reset_index()


def _result_info(trials: pd.DataFrame, measured: dict[tuple, str], picked: dict[tuple, str],
                 metric: str) -> dict[tuple, dict]:
    """`candidate_results`' per-candidate columns, from each candidate's trials (a few
    columns of every trial, as plain lists: pandas per row costs seconds at 10,000s)."""
    columns = {"sweep": trials["sweep"], "key": trials["key"], "seed": trials["seed"],
               "tuned": canonical_tuned_column(trials["tuned_json"]), "status": trials["status"],
               "tokens": trials["tokens"] if "tokens" in trials else pd.Series(None, index=trials.index),
               "error": trials["error"] if "error" in trials else pd.Series(None, index=trials.index),
               "_choice": _chooses(trials), "_ok": _ok(trials, metric), "value": trials[metric]}
    rows = [dict(zip(columns, row, strict=True)) for row in zip(*(c.tolist() for c in columns.values()),
                                                                 strict=True)]
    by_key: dict[tuple, list[dict]] = {}
    expected: dict[str, set] = {}  # the sweep's measure seeds
    choice_grid: dict[str, set] = {}  # the sweep's (tuned, choice seed) pairs
    for row in rows:
        by_key.setdefault((row["sweep"], row["key"]), []).append(row)
        if row["_choice"]:
            choice_grid.setdefault(row["sweep"], set()).add((row["tuned"], row["seed"]))
        else:
            expected.setdefault(row["sweep"], set()).add(row["seed"])
    grids = _tune_grids(trials)
    info = {}
    for owner, own in by_key.items():
        sweep = owner[0]
        choice = [r for r in own if r["_choice"]]
        tuned = measured.get(owner, picked.get(owner) if choice else None)
        at = [r for r in own if not r["_choice"] and (tuned is None or r["tuned"] == tuned)]
        seeds = sorted({int(r["seed"]) for r in at if r["_ok"]})
        failed = sorted({int(r["seed"]) for r in at if r["status"] == "failed"} - set(seeds))
        if owner in measured:
            state, looked = "measured", at
        elif choice and choice_grid[sweep] - {(r["tuned"], r["seed"]) for r in choice if r["status"] in ENDED}:
            state, looked, tuned = "choosing", choice, None  # a value ahead now may not be chosen
        else:
            looked = at if tuned is not None else own  # no value chosen: why, from every trial
            statuses = {r["status"] for r in looked}
            state = ("stopped" if "stopped_early" in statuses else
                     "failed" if "failed" in statuses and not seeds else "pending")
        stopped = [r["tokens"] for r in looked if r["status"] == "stopped_early"]
        errors = [r["error"] for r in looked if r["status"] == "failed" and isinstance(r["error"], str)
                  and r["error"].strip()]
        chose = [r["value"] for r in choice if r["tuned"] == tuned and r["_ok"]]
        info[owner] = {
            "state": state, "tuned": tuned, "seeds": seeds, "failed_seeds": failed,
            "missing_seeds": sorted(int(s) for s in expected.get(sweep, set()) - set(seeds)),
            "stopped_tokens": max((t for t in stopped if t is not None and t == t), default=None),
            "error": errors[-1].strip().splitlines()[-1] if errors else None,
            "choice_mean": float(np.mean(chose)) if chose else None, "choice_n": len(chose),
            "tuned_edge": _edge(tuned, grids.get(sweep, {})),
        }
    return info


def _tune_grids(trials: pd.DataFrame) -> dict[str, dict[str, tuple[float, float]]]:
    """Per sweep, each numeric tuned key's lowest and highest value (keys with two or more)."""
    grids: dict[str, dict[str, set]] = {}
    for sweep, text in trials[["sweep", "tuned_json"]].drop_duplicates().itertuples(index=False):
        text = canonical_tuned(text)
        for name, value in json.loads(text).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                grids.setdefault(sweep, {}).setdefault(name, set()).add(value)
    return {sweep: {name: (min(values), max(values)) for name, values in keys.items() if len(values) > 1}
            for sweep, keys in grids.items()}


def _edge(tuned: str | None, grid: dict[str, tuple[float, float]]) -> list[str]:
    """The tuned keys whose value in `tuned` is its grid's lowest or highest."""
    if tuned is None:
        return []
    return [name for name, value in json.loads(tuned).items() if name in grid and value in grid[name]]


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


def _verdicts(n: np.ndarray, low: np.ndarray, high: np.ndarray, metric: str) -> list[str | None]:
    """better / worse when the interval is on one side of zero, else within noise; None
    with fewer than 2 pairs (no interval)."""
    improves, hurts = (high < 0, low > 0) if _sign(metric) > 0 else (low > 0, high < 0)
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
            "verdict": _verdicts(np.array([n]), np.array([low]), np.array([high]), metric)[0]}


def seeds_for_power(delta: Any, sd: Any, power: float = POWER,
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
        base_of = _baseline_of(sweep, baseline)
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
    order = np.argsort(_sign(metric) * results["mean"].to_numpy(float), kind="stable")  # NaN last
    return results.iloc[order].reset_index(drop=True)


def _fill_verdicts(results: pd.DataFrame, pairs: list[tuple[int, int]], trials: pd.DataFrame,
                   metric: str, adjust: str) -> None:
    """`compare`'s columns for each (candidate row, baseline row) of `results`, at once."""
    seeds = _seed_values(trials, metric).unstack("seed")  # (sweep, key, tuned) x seed
    where = pd.MultiIndex.from_frame(results[CANDIDATE])
    rows, bases = (np.array(side) for side in zip(*pairs, strict=True))
    matrix = seeds.to_numpy(float)
    diff = matrix[seeds.index.get_indexer(where[rows])] - matrix[seeds.index.get_indexer(where[bases])]
    n, mean, sd, low, high = paired_rows(diff)
    raw = _verdicts(n, low, high, metric)
    adjusted = _adjusted(results["sweep"].to_numpy()[rows], rows != bases, diff, n, mean, sd, adjust)
    verdicts = raw if adjust == "none" else _verdicts_of_p(n, mean, adjusted["p_adjusted"], metric)
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


def _verdicts_of_p(n: np.ndarray, mean: np.ndarray, p: np.ndarray, metric: str) -> list[str | None]:
    """better / worse where the (adjusted) p-value is at most ALPHA, by the sign of the mean
    difference; else within noise; None with fewer than 2 pairs."""
    improves = (mean < 0) if _sign(metric) > 0 else (mean > 0)
    return [None if k < 2 else "within noise" if not q <= ALPHA else "better" if up else "worse"
            for k, q, up in zip(n.tolist(), p.tolist(), improves.tolist(), strict=True)]


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
    seeds = _seed_values(trials, metric).unstack("seed")
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
        flip = _sign(metric) * mean[i] > 0  # the first is behind: name the second first
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
    se = _seed_values(trials, metric, "val_loss_se").unstack("seed").reindex(index=index, columns=seeds)
    matrix = se.to_numpy(float)
    both = np.sqrt(matrix[index.get_indexer(candidates)] ** 2 + matrix[index.get_indexer(bases)] ** 2)
    both[np.isnan(diff)] = np.nan  # only the seeds the difference pairs
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row of NaNs: no SE
        return np.nanmean(both, axis=1)


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
    done = _completed(trials, metric).merge(chosen, on=CANDIDATE)
    points = curves[curves[column].notna()].merge(done[["sweep", "trial_id", "key"]], on=["sweep", "trial_id"])
    if points.empty:
        return pd.DataFrame(columns=columns)
    finals = done.pivot_table(index=["sweep", "key"], columns="seed", values=metric, aggfunc="mean")
    at = points.pivot_table(index=["sweep", "tokens"], columns="key", values=column, aggfunc="mean")
    rows = []
    for sweep, at_points in at.groupby(level="sweep"):
        keys = at_points.columns[at_points.notna().any()]
        seeds = finals.loc[sweep].reindex(keys).to_numpy(float)
        first, second, order = _resolved_pairs(seeds)
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


PAIR_BLOCK = 4_000_000  # differences computed at once (memory: 8 bytes each)


def _resolved_pairs(seeds: np.ndarray, confidence: float = CONFIDENCE):
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
    baseline (by `_baseline_of`'s rule) is a pending one."""
    for _, sweep in rows.groupby("sweep"):
        if not (sweep["variant"] == baseline).any():
            continue
        try:
            base_of = _baseline_of(sweep, baseline)
        except UserError:  # ambiguous baselines: `compare` said so already
            continue
        for index in sweep.index[sweep["no_verdict"] == "no baseline"]:
            base = base_of.get(index)
            if base is not None and base == base and rows.at[int(base), "state"] == "pending":
                rows.loc[index, ["baseline_key", "no_verdict"]] = [rows.at[int(base), "key"], "baseline"]


PER_TUNED_SIDES = ("same", "chosen")  # the baseline at the row's tuned value; at its own chosen one


def per_tuned(trials: pd.DataFrame, metric: str = "val_loss", baseline: str | None = "baseline") -> pd.DataFrame:
    """One row per (sweep, key, tuned value) that trials ran, every value, not only the chosen
    one: `variant`, `state` (`measured`; `stopped`, a seed stopped early: no mean of the
    survivors; `failed`; `pending`, none ended; `choice only`, only choice seeds ran it),
    `mean`, `std`, `n`, `seeds` over its completed measure seeds (a choice seed's trial never
    counts: `choice_mean` and `choice_n` say what the choice seeds measured, apart), `chosen`
    (`tuned_stats`' result value), and for each side of PER_TUNED_SIDES the paired difference
    to the candidate's baseline (`_baseline_of`'s) over the seeds both completed:
    `delta_SIDE`, `ci_low_SIDE`, `ci_high_SIDE`, `n_SIDE`, `verdict_SIDE` (the baseline at
    the row's own tuned value, and at the baseline's chosen value), with `baseline_key`
    and `baseline_tuned`."""
    columns = ["sweep", "key", "variant", "tuned", "state", "mean", "std", "n", "seeds", "chosen",
               "choice_mean", "choice_n", "baseline_key", "baseline_tuned",
               *(f"{c}_{side}" for side in PER_TUNED_SIDES
                 for c in ("delta", "ci_low", "ci_high", "n", "verdict"))]
    if trials.empty:
        return pd.DataFrame(columns=columns)
    rows = trials.assign(tuned=canonical_tuned_column(trials["tuned_json"]), _ok=_ok(trials, metric),
                         _choice=_chooses(trials))
    chosen = tuned_stats(trials, metric)
    chosen = set(map(tuple, chosen.loc[chosen["chosen"], CANDIDATE].itertuples(index=False, name=None)))
    table = []
    for (sweep, key, tuned), group in rows.groupby(CANDIDATE, sort=False):
        measure, choice = group[~group["_choice"]], group[group["_choice"]]
        done = measure[measure["_ok"]]
        statuses = set(measure["status"])
        state = ("choice only" if measure.empty else "stopped" if "stopped_early" in statuses
                 else "measured" if len(done) else "failed" if "failed" in statuses else "pending")
        values = done.groupby("seed")[metric].mean()
        picked = choice.loc[choice["_ok"], metric].astype(float)
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
    row of `per_tuned`, by `_baseline_of`'s rule (one per sweep, or one per budget)."""
    if baseline is None:
        return
    firsts = trials.drop_duplicates(["sweep", "key"]).reset_index(drop=True)
    for _, sweep in firsts.groupby("sweep"):
        if not (sweep["variant"] == baseline).any():
            continue
        base_of = _baseline_of(sweep, baseline)  # ambiguous: the UserError `compare` raises too
        keys = {sweep.at[i, "key"]: sweep.at[int(b), "key"] for i, b in base_of.items() if b == b}
        rows = out.index[(out["sweep"] == sweep["sweep"].iloc[0]) & out["key"].isin(keys)]
        out.loc[rows, "baseline_key"] = out.loc[rows, "key"].map(keys)
        picks = {k: t for s, k, t in chosen if s == sweep["sweep"].iloc[0]}
        out.loc[rows, "baseline_tuned"] = out.loc[rows, "baseline_key"].map(picks).astype(object)


def _per_tuned_differences(out: pd.DataFrame, trials: pd.DataFrame, metric: str) -> None:
    """`per_tuned`'s paired differences, every row and side at once (`paired_rows`)."""
    seeds = _seed_values(trials, metric).unstack("seed")  # (sweep, key, tuned) x seed, measure seeds
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
        verdicts = _verdicts(n, low, high, metric)
        out[f"delta_{side}"] = np.where(n > 0, mean, np.nan)
        out[f"ci_low_{side}"] = np.where(two, low, np.nan)
        out[f"ci_high_{side}"] = np.where(two, high, np.nan)
        out[f"n_{side}"] = n
        out[f"verdict_{side}"] = pd.Series(verdicts, index=out.index, dtype=object)
