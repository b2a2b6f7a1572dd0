"""The candidates a sweep plans, from the space its folder keeps (`space.yaml`): what
`status` and the report list for a candidate no trial of which has landed yet (`pending`),
so an interrupted or young sweep shows everything it still lacks, not only what ran.

A grid sweep runs every planned candidate; an Optuna sweep proposes candidates as it runs,
so it plans none up front (its pending candidates are only those running now).
"""

from __future__ import annotations

import functools
import json

import pandas as pd

from shapesweep.common import UserError

SPACE_FILE, OPTIONS_FILE = "space.yaml", "sweep.json"  # as shapesweep.sweep.runner writes them


def planned_candidates(root: str, sweep: str) -> pd.DataFrame:
    """One store row (key, family, variant, shape and accounting columns, `sweep`) per
    candidate the sweep's grid plans; empty when its folder keeps no space, it searched
    with Optuna, or its space no longer parses or plans (what `status` then lists is what
    the store holds, as before)."""
    from shapesweep.results.store import read_sweep_file

    try:
        text = read_sweep_file(root, sweep, SPACE_FILE)
        options = json.loads(read_sweep_file(root, sweep, OPTIONS_FILE) or "{}")
    except (OSError, ValueError):  # unreadable: other readers of the folder say so
        return pd.DataFrame()
    if not text or (isinstance(options, dict) and options.get("search", "grid") != "grid"):
        return pd.DataFrame()
    rows = _planned_rows(text)
    return pd.DataFrame([{**row, "sweep": sweep} for row in rows])


@functools.lru_cache(maxsize=16)  # the live server asks again at every refresh
def _planned_rows(text: str) -> tuple[dict, ...]:
    from shapesweep.search_spaces.safe_yaml import parse_yaml
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import parse_space

    try:
        space = parse_space(parse_yaml(text, SPACE_FILE), text, SPACE_FILE)
        return tuple(c.to_row() for c in plan(space).candidates)
    except (UserError, ValueError):
        return ()
