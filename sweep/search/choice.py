"""A grid sweep with choice seeds: each candidate's tuned values run on the choice seeds,
then only the value they chose runs on the measure seeds, in one `Tuner.fit`.

`ChoiceSearcher` (a Tune `Searcher`) hands Tune the choice trials; once all of a
candidate's choice trials have ended it chooses with `shapesweep.results.stats.choose_tuned`
(the rule `status` applies to the stored trials) and queues that value's measure trials
ahead of the remaining choice trials, so candidates finish while others still choose.
`resume` re-derives each decided choice from the stored choice trials and runs exactly
what is missing of either kind. Trial ids stay `KEY-tHASH-sSEED`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import pandas as pd
from ray.tune.search import Searcher

from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.stats import CHOICE_METRIC, choose_tuned
from shapesweep.search_spaces.cadence import token_budget
from shapesweep.search_spaces.recipe_merge import TrainKeys
from shapesweep.search_spaces.solver import Candidate
from shapesweep.search_spaces.space import SearchSpace, tuned_json
from shapesweep.sweep.search.trials import TrialSpec, reached_budget, trial_spec, trial_triple

if TYPE_CHECKING:
    from shapesweep.sweep.search.strategies import PlanContext


class MeasureSpecs:
    """candidate key + chosen tuned text -> its measure trials not yet held (picklable: Tune
    keeps the searcher with its experiment state)."""
    def __init__(self, space: SearchSpace, candidates: list[Candidate], seeds: list[int], data: str | None,
                 skip: set[tuple[str, str, int]]):
        self.space, self.seeds, self.data, self.skip = space, seeds, data, skip
        self.candidates = {c.key: c for c in candidates}
        self.settings = {_text(t): t for t in space.tuned_settings()}

    def __call__(self, key: str, tuned: str) -> list[TrialSpec]:
        specs = [trial_spec(self.candidates[key], self.space, seed, self.data, tuned=self.settings[tuned])
                 for seed in self.seeds]
        return [s for s in specs if trial_triple(s) not in self.skip]


def _text(tuned: TrainKeys) -> str:
    """The canonical text `choose_tuned` names a tuned combination by (a trial's tuned_json)."""
    return tuned_json(tuned)


def _row(spec: TrialSpec, status: str, value: object) -> dict:
    """A choice trial as `choose_tuned` reads it (the columns of a stored trial row)."""
    return {"sweep": "", "key": spec["key"], "tuned_json": spec["tuned_json"], "seed": spec["seed"],
            "status": status, CHOICE_METRIC: value}


def chosen(rows: list[dict]) -> str | None:
    """The tuned text one candidate's ended choice trials choose, or None (no value completed
    on every choice seed)."""
    picked = choose_tuned(pd.DataFrame(rows))
    return picked.iloc[0] if len(picked) else None


class ChoiceSearcher(Searcher):
    """Choice trials first; a candidate's measure trials as soon as its choice is made."""
    def __init__(self, queue: list[TrialSpec], waiting: dict[str, set[str]], rows: dict[str, list[dict]],
                 measure: MeasureSpecs, choice_seeds: list[int]):
        super().__init__(metric=CHOICE_METRIC, mode="min")
        self.queue = deque(queue)  # specs to hand Tune, in order
        self.waiting = waiting  # candidate key -> its choice trial ids not yet ended
        self.rows = rows  # candidate key -> its ended choice trials (`_row`)
        self.measure, self.choice_seeds = measure, set(choice_seeds)
        self.live: dict[str, TrialSpec] = {}  # Tune trial id -> spec

    def suggest(self, trial_id: str) -> dict | str | None:  # type: ignore[override]  # Ray's Searcher.suggest returns Searcher.FINISHED (a str), its annotation says Optional[Dict]
        if self.queue:
            spec = self.queue.popleft()
            self.live[trial_id] = spec
            return {"spec": spec}
        return None if self.live or self.waiting else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        spec = self.live.pop(trial_id, None)
        if spec is None or spec["seed"] not in self.choice_seeds:
            return
        key, result = spec["key"], result or {}
        budget = token_budget(spec["document"]["train"], spec["row"]["family"])
        status = "failed" if error else "completed" if reached_budget(result, budget) else "stopped_early"
        self.rows.setdefault(key, []).append(_row(spec, status, result.get(CHOICE_METRIC)))
        self.waiting[key].discard(spec["trial_id"])
        if not self.waiting[key]:
            del self.waiting[key]
            self._decide(key)

    def _decide(self, key: str) -> None:
        tuned = chosen(self.rows.pop(key))
        if tuned is not None:
            self.queue.extendleft(reversed(self.measure(key, tuned)))


def choice_plan(space: SearchSpace, candidates: list[Candidate],
                context: PlanContext) -> tuple[Searcher, int, int]:
    """What `shapesweep.sweep.search.strategies` makes the `TrialPlan` of a grid with choice seeds
    from (searcher, trials of the sweep, trials this run starts at most), from the trials the
    store holds: choice trials missing, and measure trials of every candidate
    whose choice is already made; the searcher adds the rest as choices are made."""
    measure = MeasureSpecs(space, candidates, context.seeds, context.data, context.skip)
    stored = _stored_choices(ParquetStore(context.root).load_trials([context.name]), space.choice_seeds, context.skip)
    queue, waiting, rows, undecided = [], {}, {}, 0
    for candidate in candidates:
        specs = [trial_spec(candidate, space, seed, context.data, tuned=tuned)
                 for tuned in space.tuned_settings() for seed in space.choice_seeds]
        missing = [s for s in specs if trial_triple(s) not in context.skip]
        rows[candidate.key] = stored.get(candidate.key, [])
        if missing:
            queue += missing
            waiting[candidate.key] = {s["trial_id"] for s in missing}
            undecided += 1
            continue
        tuned = chosen(rows.pop(candidate.key))
        queue += measure(candidate.key, tuned) if tuned is not None else []
    rows = {key: own for key, own in rows.items() if key in waiting}
    searcher = ChoiceSearcher(queue, waiting, rows, measure, space.choice_seeds)
    launches = len(queue) + undecided * len(context.seeds)  # at most: the choices decide
    total = len(candidates) * space.trials_per_candidate(context.seeds)
    return searcher, total, launches


def _stored_choices(trials: pd.DataFrame, choice_seeds: list[int],
                    skip: set[tuple[str, str, int]]) -> dict[str, list[dict]]:
    """Each candidate's stored choice trials that this run does not run again."""
    if trials.empty:
        return {}
    rows = trials[trials["seed"].isin(choice_seeds)]
    out: dict[str, list[dict]] = {}
    for row in rows[["key", "tuned_json", "seed", "status", CHOICE_METRIC]].to_dict("records"):
        if (row["key"], row["tuned_json"] or "{}", row["seed"]) in skip:
            out.setdefault(row["key"], []).append({"sweep": "", **row})
    return out
