"""A space's `tune:` (training settings tried for every candidate) and its choice seeds,
checked, and the sweep's trial count refused above the limit before any trial is built."""

from __future__ import annotations

import itertools

from pydantic import ValidationError

from shapesweep.common import UserError, did_you_mean
from shapesweep.search_spaces.configs import TrainConfig
from shapesweep.search_spaces.limits import check_trials
from shapesweep.search_spaces.recipe_merge import overlay
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.seeds import (
    check_disjoint_seeds,
    check_seeds,
    seed_budget,
    seed_pool,
)
from shapesweep.search_spaces.tuning import CHOICE_SEEDS, UNTUNABLE, tuned_json


def check_sweep_trials(space: SearchSpace, candidates: int | None = None,
                       seeds: list[int] | None = None) -> None:
    """Refuse a sweep of more than MAX_TRIALS trials: its candidates (before solving, one per
    variant) x `tune:` combinations x seeds (`--seeds` when given; a range counts its max),
    counted, not built."""
    n_candidates = len(space.resolved()) if candidates is None else candidates
    if seeds is not None:
        file, key = None, "--seeds"
    else:
        file, key = space.source_file, "tune" if space.tuned_count > 1 else "seeds"
    # choice seeds run every combination, the measure seeds one: counted as if all ran all
    choice = space.choice_seeds or space.tune.get(CHOICE_SEEDS) or []
    check_trials(n_candidates, space.tuned_count,
                 (seed_budget(space.seeds) if seeds is None else len(seeds)) + len(choice),
                 file, key, solved=candidates is not None)


def check_tune(space: SearchSpace, file: str) -> None:
    """Every `tune:` value must be a valid train setting; store them as TrainConfig reads them.
    The trials the combinations make are counted before any is built;
    `tune.choice_seeds` is taken out of the train keys (`SearchSpace.choice_seeds`)."""
    check_sweep_trials(space)
    choice = space.tune.get(CHOICE_SEEDS)
    normal = {name: _tuned_values(space, name, values, file)
              for name, values in space.tune.items() if name != CHOICE_SEEDS}
    object.__setattr__(space, "tune", normal)
    if choice is not None:
        space._choice_seeds = _check_choice_seeds(space, choice, file)
    for tuned, v in itertools.product(space.tuned_settings(), space.resolved()):
        try:
            TrainConfig.model_validate(overlay(v.train, tuned))
        except ValidationError as error:
            problem = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise UserError(f"{tuned_json(tuned)}: {problem}", file=file, key="tune") from None


def _tuned_values(space: SearchSpace, name: str, values: list[object], file: str) -> list[object]:
    """One tuned key's values, each as TrainConfig reads it, none twice."""
    if name in UNTUNABLE:
        raise UserError(f"{name!r} cannot be tuned ({UNTUNABLE[name]})", file=file,
                        key=f"tune.{name}")
    if name not in TrainConfig.model_fields:
        allowed = [n for n in TrainConfig.model_fields if n not in UNTUNABLE]
        raise UserError(f"unknown train key {name!r} ({did_you_mean(name, allowed)}allowed: "
                        f"{', '.join(allowed)})", file=file, key=f"tune.{name}")
    if not values:
        raise UserError("empty list of values", file=file, key=f"tune.{name}")
    normal: list[object] = []
    for i, value in enumerate(values):
        try:
            train = space.train_for({name: value}, 0)
        except ValidationError as error:
            problem = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise UserError(problem, file=file, key=f"tune.{name}[{i}]") from None
        value = train.model_dump(mode="json")[name]
        if value in normal:
            raise UserError(f"{value!r} is listed twice", file=file, key=f"tune.{name}[{i}]")
        normal.append(value)
    return normal


def _check_choice_seeds(space: SearchSpace, written: list[object], file: str) -> list[int]:
    """Choice seeds choose among two or more tuned values and are never measure seeds (a
    seed that chose a value would measure it favourably: selection bias)."""
    key = f"tune.{CHOICE_SEEDS}"
    seeds = [s for s in written if isinstance(s, int) and not isinstance(s, bool)]
    if len(seeds) < len(written):
        raise UserError(f"seeds are whole numbers, got {written!r}", file=file, key=key)
    try:
        check_seeds(seeds)
    except ValueError as error:
        raise UserError(str(error), file=file, key=key) from None
    if not space.tune:
        raise UserError("choice seeds choose tuned values, and tune: names none (add a key "
                        "such as lr: [...])", file=file, key=key)
    for name, values in space.tune.items():
        if len(values) < 2:
            raise UserError(f"one value: nothing to choose (a fixed {name} belongs in train:)",
                            file=file, key=f"tune.{name}")
    check_disjoint_seeds(seeds, seed_pool(space.seeds), file=file, key=key)
    return list(seeds)
