"""One row per candidate: its result, or the state that says why it has none.

(`shapesweep.results.stats` describes the whole inference.)
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from shapesweep.results.tuned import (
    ENDED,
    canonical_tuned,
    canonical_tuned_column,
    choice_margins,
    choose_tuned,
    first_rows,
    is_choice,
    is_ok,
    tuned_stats,
)

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
        first = first_rows(rest, rest.groupby(["sweep", "key"], sort=False), ["sweep", "key"])
        parts.append(first.assign(mean=np.nan, std=np.nan, n=0, stopped=False, chosen=False, role=None))
    out = pd.concat([part for part in parts if len(part)]).copy()  # consolidated: pandas warns as columns are added
    picked = choose_tuned(trials[is_choice(trials)])
    info = _result_info(trials, dict(zip(chosen.index, chosen["tuned"], strict=True)),
                        dict(zip(picked.index, picked, strict=True)), metric)
    for column in (*RESULT_COLUMNS, "tuned"):
        out[column] = [info[owner][column] for owner in out.index]
    out["n"] = out["n"].astype(int)
    out["choice_margin"] = choice_margins(trials[is_choice(trials)], out["tuned"], metric)
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
               "_choice": is_choice(trials), "is_ok": is_ok(trials, metric), "value": trials[metric]}
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
        seeds = sorted({int(r["seed"]) for r in at if r["is_ok"]})
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
        chose = [r["value"] for r in choice if r["tuned"] == tuned and r["is_ok"]]
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
