"""A sweep's candidates at their tuned values: seed roles, the chosen value, per-value means.

(`shapesweep.results.stats` describes the whole inference.)
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

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


def canonical_tuned(text: object) -> str:
    """A trial's `tuned_json` as one canonical JSON text ("{}" when it tuned nothing)."""
    if not isinstance(text, str) or not text.strip():
        return "{}"
    return json.dumps(json.loads(text), sort_keys=True)


def canonical_tuned_column(texts: pd.Series) -> pd.Series:
    """`canonical_tuned` of every row, parsing each distinct text once. Always text (object)
    dtype: an empty column (a sweep whose trials all still run) then merges with a full one."""
    return texts.map({text: canonical_tuned(text) for text in texts.unique()}).astype(object)


def loss_sign(metric: str) -> int:
    """+1 when lower is better, -1 when higher is: `sign * value` is always a loss."""
    return -1 if metric in HIGHER_IS_BETTER else 1


def is_choice(trials: pd.DataFrame) -> pd.Series:
    """Whether each trial is of a choice seed (False where the frame has no roles)."""
    if ROLE_COLUMN not in trials:
        return pd.Series(False, index=trials.index)
    return trials[ROLE_COLUMN].fillna(False).astype(bool)


def is_ok(trials: pd.DataFrame, metric: str) -> pd.Series:
    return (trials["status"] == "completed") & trials[metric].notna()


def completed_measures(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Completed measure trials (a choice seed's never count), with `tuned`."""
    done = trials[is_ok(trials, metric) & ~is_choice(trials)]
    return done.assign(tuned=canonical_tuned_column(done["tuned_json"]))


def choose_tuned(choice: pd.DataFrame, metric: str = CHOICE_METRIC) -> pd.Series:
    """(sweep, key) -> the tuned text chosen from the choice trials `choice`: among the
    values whose every choice trial completed, the best mean `metric` (ties: the first
    text). Candidates with no such value are absent. The runner (shapesweep.sweep.search.choice)
    decides with this too, once all of a candidate's choice trials have ended."""
    if choice.empty:
        return pd.Series(dtype=object)
    table = _choice_scores(choice, metric).sort_values(["score", "tuned"], kind="stable")
    return table.groupby(["sweep", "key"], sort=False)["tuned"].first()


def _choice_scores(choice: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (sweep, key, tuned) of the choice trials whose every trial completed: `score`, the
    mean of the metric signed so that lower is better (what a choice is made by)."""
    rows = choice.assign(tuned=canonical_tuned_column(choice["tuned_json"]), ok=is_ok(choice, metric),
                         score=loss_sign(metric) * choice[metric].astype(float))
    grouped = rows.groupby(CANDIDATE, sort=False)
    table = pd.DataFrame({"ok": grouped["ok"].all(), "score": grouped["score"].mean()}).reset_index()
    return table[table["ok"]].drop(columns="ok")


def choice_margins(choice: pd.DataFrame, chosen: pd.Series, metric: str) -> np.ndarray:
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
    role = pd.Series(np.where(is_choice(trials), "choice", "measure"), index=trials.index)
    keys = [*CANDIDATE, "role"]
    stopped = (trials["status"] == "stopped_early").groupby(
        [trials["sweep"], trials["key"], tuned, role], sort=False).any().rename_axis(keys)
    ok = is_ok(trials, metric)
    done = trials[ok].assign(tuned=tuned[ok], role=role[ok])  # one copy of the completed rows
    if done.empty:  # typed, though empty
        return done.assign(mean=np.nan, std=np.nan, n=0, stopped=False, chosen=False)
    grouped = done.groupby(keys, sort=False)
    out = first_rows(done, grouped, keys)
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
    score = loss_sign(metric) * out.loc[eligible, "mean"]
    best = score.groupby([out.loc[eligible, "sweep"], out.loc[eligible, "key"]]).idxmin()
    out["chosen"] = out.index.isin(best.to_numpy())
    return out


def first_rows(done: pd.DataFrame, grouped, keys: list[str]) -> pd.DataFrame:
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


def seed_values(trials: pd.DataFrame, metric: str, column: str | None = None) -> pd.Series:
    """Final metric (or another `column` of the same trials) per (sweep, key, tuned, seed) of
    completed measure trials."""
    return completed_measures(trials, metric).groupby([*CANDIDATE, "seed"])[column or metric].mean()
