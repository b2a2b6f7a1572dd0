"""Adaptive measure seeds' record: the looks a sweep's driver made and what they decided.

A sweep with `seeds: {min, max}` runs in rounds (`shapesweep.sweep.driver.rounds`); after each
round the driver looks at every comparison with the baseline (`shapesweep.results.sequential
.decide`) and keeps the look in the sweep's `looks.json` (through the results store), so
that `resume` continues with the next round and never decides a look again, and `status`
and the report say per candidate how many seeds it ran, at which look it was decided and
why it stopped. Readers here need no Ray.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from shapesweep.common import UserError, plain
from shapesweep.results.sequential import Decision, Design
from shapesweep.results.tuned import completed_measures

LOOKS_FILE = "looks.json"  # beside sweep.json: the adaptive design and every look it made
STOP_REASONS = {"resolved-better": "resolved", "resolved-worse": "resolved", "futile": "futile",
                "max": "max"}  # a decision's state -> why its candidate got no more seeds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Look(_Strict):
    """One look: after the round whose running candidates had `seeds` measure seeds (seeds
    0..seeds-1), the candidates that ran it (`ran`, the baseline's key included) and each
    comparison's decision (candidate key -> `Decision`)."""

    look: int  # 1-based
    seeds: int
    ran: list[str]
    decisions: dict[str, Decision]


class Looks(_Strict):
    """The sweep's design and its looks so far, in order."""

    min_seeds: int
    max_seeds: int
    min_effect: float
    alpha: float
    metric: str
    baseline: str  # the baseline candidate's key
    looks: list[Look] = []

    def design(self) -> Design:
        return Design(self.min_seeds, self.max_seeds, self.min_effect, self.alpha)

    def latest(self) -> dict[str, Decision]:
        return self.looks[-1].decisions if self.looks else {}


@dataclass(frozen=True)
class Outcome:
    """One candidate of an adaptive sweep as `status` reports it."""

    seeds_used: int  # measure seeds it was given (ran or running)
    decided_look: int | None  # the look that decided it (1-based); None while open
    stopped: str | None  # resolved / futile / max; None while open
    state: str  # the sequential decision's state (results.sequential.STATES)
    ci_low: float | None  # its repeated confidence interval at the last look
    ci_high: float | None

    def as_dict(self) -> dict[str, object]:
        return {"seeds_used": self.seeds_used, "decided_look": self.decided_look,
                "stopped": self.stopped, "sequential_state": self.state,
                "ci_low_sequential": plain(self.ci_low), "ci_high_sequential": plain(self.ci_high)}


def parse_looks(text: str | None, where: str, repair: str) -> Looks | None:
    """`looks.json`'s text read, or None when there is none; damaged, one line naming it."""
    if text is None:
        return None
    try:
        return Looks.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(f"damaged ({first['msg']} at {'.'.join(map(str, first['loc'])) or 'top'}); "
                        f"{repair}", file=where) from None


def looks_text(looks: Looks) -> str:
    return json.dumps(looks.model_dump(mode="json"), indent=1)


def paired_diffs(trials: pd.DataFrame, baseline: str, keys: list[str], metric: str) -> list[np.ndarray]:
    """Each candidate's completed measure trials minus the baseline's, over the seeds both
    have, in seed order (a candidate runs one tuned value: its choice seeds chose it)."""
    if trials.empty:
        return [np.zeros(0) for _ in keys]
    done = completed_measures(trials, metric)
    values = done.groupby(["key", "seed"])[metric].mean()
    base = values.get(baseline, pd.Series(dtype=float)) if baseline in values.index.get_level_values(0) else None
    out = []
    for key in keys:
        if base is None or key not in values.index.get_level_values(0):
            out.append(np.zeros(0))
            continue
        diff = (values.loc[key] - base).dropna().sort_index()
        out.append(diff.to_numpy(float))
    return out


def outcomes(looks: Looks) -> dict[str, Outcome]:
    """Each compared candidate's seeds, deciding look and reason to stop (the baseline too:
    its seeds, no decision)."""
    seeds: dict[str, int] = {}
    decided: dict[str, int] = {}
    for look in looks.looks:
        for key in look.ran:
            seeds[key] = max(seeds.get(key, 0), look.seeds)
        for key, decision in look.decisions.items():
            if decision.decided and key not in decided:
                decided[key] = look.look
    out = {}
    for key, decision in looks.latest().items():
        out[key] = Outcome(seeds.get(key, 0), decided.get(key), STOP_REASONS.get(decision.state),
                           decision.state, decision.low, decision.high)
    out[looks.baseline] = Outcome(seeds.get(looks.baseline, 0), None, None, "baseline", None, None)
    return out


def read_looks_at(read: Callable[[str], str | None], where: str, repair: str) -> Looks | None:
    """The `looks.json` `read` returns, parsed; None for a fixed-seed sweep."""
    return parse_looks(read(LOOKS_FILE), where, repair)


def design_record(looks: Looks) -> dict[str, object]:
    """`status`'s `seed_design` of an adaptive sweep."""
    return {"kind": "adaptive", "min": looks.min_seeds, "max": looks.max_seeds,
            "min_effect": looks.min_effect, "alpha": looks.alpha, "looks": len(looks.looks),
            "rule": "group-sequential: Lan-DeMets O'Brien-Fleming alpha spending per comparison, "
                    "Holm over the comparisons (docs/statistics.md)"}


def outcome_line(name: str, outcome: dict[str, object]) -> str:
    """`  deep: 2 seeds, resolved at look 1 [+0.101, +0.204]` (a candidate's record's fields)."""
    seeds = f"{outcome['seeds_used']} seed{'s' * (outcome['seeds_used'] != 1)}"
    if outcome["sequential_state"] == "baseline":
        return f"  {name}: {seeds} (the baseline: every seed an open comparison needed)"
    low, high = outcome["ci_low_sequential"], outcome["ci_high_sequential"]
    interval = (f" [{low:+.3f}, {high:+.3f}]" if isinstance(low, float) and isinstance(high, float)
                and low == low and high == high else "")
    if outcome["stopped"] is None:
        return f"  {name}: {seeds}, open{interval}"
    state = str(outcome["sequential_state"]).removeprefix("resolved-")
    why = f"resolved ({state})" if outcome["stopped"] == "resolved" else str(outcome["stopped"])
    return f"  {name}: {seeds}, stopped at look {outcome['decided_look']}: {why}{interval}"
