"""Which seeds of a sweep chose its tuned values and which measured them.

A space's `tune.choice_seeds` (`shapesweep.search_spaces.space.SearchSpace.choice_seeds`)
run every tuned value to choose one per candidate; its `seeds` (or `run --seeds`) then
measure the chosen value. The sweep folder keeps both (`space.yaml`, `sweep.json`), so a
reader of the store alone knows each trial's role: `with_seed_roles` marks the trials of
choice seeds, which `shapesweep.results.stats` keeps out of every mean, interval and verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from shapesweep.common import UserError
from shapesweep.results.stats import ROLE_COLUMN

SPACE_FILE, OPTIONS_FILE = "space.yaml", "sweep.json"  # as shapesweep.sweep.driver.runner writes them


@dataclass(frozen=True)
class SeedRoles:
    choice: tuple[int, ...]  # empty: the measure seeds chose the tuned values too
    measure: tuple[int, ...]  # empty where the sweep folder does not say
    tuned: bool  # whether the space's `tune:` has more than one combination to choose from
    # the space's `train.lr_base_d_model`: its tuned lr values are read at this d_model (a
    # candidate of width d trains them x this / d); None where it has none
    lr_base_d_model: int | None = None


def seed_roles(root: str, sweep: str) -> SeedRoles:
    """The roles the sweep's folder records; none where it keeps no space (a store written
    by hand, a sweep of an older version)."""
    from shapesweep.results.store import (
        read_sweep_file,
        read_sweep_json,
        sweep_dir,
        sweep_file_repair,
    )
    from shapesweep.search_spaces.safe_yaml import parse_yaml
    from shapesweep.search_spaces.space import CHOICE_SEEDS

    text = read_sweep_file(root, sweep, SPACE_FILE)
    try:
        document = parse_yaml(text, f"{sweep_dir(root, sweep)}/{SPACE_FILE}") if text else None
    except UserError as error:
        raise UserError(f"{error.problem}; {sweep_file_repair(root, sweep, SPACE_FILE)}",
                        file=error.file, key=error.key) from None
    if not isinstance(document, dict):
        return SeedRoles((), (), False)
    tune = document.get("tune") if isinstance(document.get("tune"), dict) else {}
    options = read_sweep_json(root, sweep, OPTIONS_FILE, dict) or {}
    measure = options.get("seeds") or document.get("seeds") or [0]
    if isinstance(measure, dict):  # adaptive {min, max}: every candidate measures seeds 0..min-1
        measure = range(measure["min"]) if isinstance(measure.get("min"), int) else measure
    choice = tune.get(CHOICE_SEEDS) or []
    train = document.get("train") if isinstance(document.get("train"), dict) else {}
    base = train.get("lr_base_d_model")  # the saved space parsed when it ran: a whole number
    base = base if isinstance(base, int) and not isinstance(base, bool) else None
    try:
        combinations = math.prod(len(v) for k, v in tune.items() if k != CHOICE_SEEDS and isinstance(v, list))
        return SeedRoles(tuple(int(s) for s in choice), tuple(int(s) for s in measure),
                         combinations > 1, base)
    except (TypeError, ValueError):  # seeds that are no numbers: a file edited by hand
        raise UserError(f"damaged (its seeds are not whole numbers); "
                        f"{sweep_file_repair(root, sweep, OPTIONS_FILE)}",
                        file=f"{sweep_dir(root, sweep)}/{OPTIONS_FILE}") from None


def with_seed_roles(trials: pd.DataFrame, root: str,
                    roles: dict[str, SeedRoles] | None = None) -> pd.DataFrame:
    """`trials` with ROLE_COLUMN: True on a trial of its sweep's choice seeds."""
    roles = roles if roles is not None else {s: seed_roles(root, s) for s in trials["sweep"].unique()}
    choice = {(sweep, seed) for sweep, r in roles.items() for seed in r.choice}
    marks = [(sweep, seed) in choice for sweep, seed in zip(trials["sweep"], trials["seed"], strict=True)]
    return trials.assign(**{ROLE_COLUMN: pd.Series(marks, index=trials.index, dtype=bool)})
