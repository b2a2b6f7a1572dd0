"""The names of `tune:` combinations: how a trial's tuned values are written and tagged."""

from __future__ import annotations

import hashlib
import json

from shapesweep.search_spaces.recipe_merge import TrainKeys

CHOICE_SEEDS = "choice_seeds"  # the `tune:` key naming the seeds that choose, not train key

# train keys no tuned value may change: the seeds list, and the budget ASHA and the
# "completed" status measure trials by (set per space or per variant).
_BUDGET = "a candidate's budget is its space's or variant's train:, the same for every trial"
UNTUNABLE = {"seed": "a space's seeds are its `seeds:`",
             "tokens": _BUDGET, "tokens_per_param": _BUDGET, "steps": _BUDGET}


def tuned_json(tuned: TrainKeys) -> str:
    """A trial's tuned values as its row's `tuned_json` ("{}" when nothing is tuned)."""
    return json.dumps(tuned, sort_keys=True)


def tuned_tag(tuned: TrainKeys) -> str:
    """6 hex naming a tuned combination in trial ids."""
    return hashlib.sha256(tuned_json(tuned).encode()).hexdigest()[:6]
