"""The candidates a sweep plans, from the space its folder keeps (`space.yaml`): what
`status` and the report list for a candidate no trial of which has landed yet (`pending`),
so an interrupted or young sweep shows everything it still lacks, not only what ran
(`complete_comparisons`: the comparisons document with them).

A grid sweep runs every planned candidate; an Optuna sweep proposes candidates as it runs,
so it plans none up front (its pending candidates are only those running now).
"""

from __future__ import annotations

import functools
import json

import pandas as pd

from shapesweep.common import UserError
from shapesweep.results.multiplicity import DEFAULT_ADJUST
from shapesweep.results.roles import seed_roles
from shapesweep.results.stats import ROLE_COLUMN, compare, with_planned
from shapesweep.results.store import read_sweep_file
from shapesweep.results.summary import comparisons, warnings
from shapesweep.search_spaces.safe_yaml import parse_yaml
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import parse_space

SPACE_FILE, OPTIONS_FILE = "space.yaml", "sweep.json"  # as shapesweep.sweep.driver.runner writes them


def planned_candidates(root: str, sweep: str) -> pd.DataFrame:
    """One store row (key, family, variant, shape and accounting columns, `sweep`) per
    candidate the sweep's grid plans; empty when its folder keeps no space, it searched
    with Optuna, or its space no longer parses or plans (what `status` then lists is what
    the store holds, as before)."""
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
    try:
        space = parse_space(parse_yaml(text, SPACE_FILE), text, SPACE_FILE)
        return tuple(c.to_row() for c in plan(space).candidates)
    except (UserError, ValueError):
        return ()


def complete_comparisons(trials, name: str, root: str, metric: str, baseline: str, planned,
                         running=None, compared=None, adjust: str | None = None) -> dict:
    """`shapesweep.results.summary.comparisons` of every candidate the sweep plans (`planned`,
    `shapesweep.results.planned.planned_candidates`): those without a landed trial listed
    `pending`, each candidate's `missing_seeds` counting the sweep's measure seeds (a seed in
    flight is missing until it lands), and `running_seeds`, its seeds training now
    (`running`: `shapesweep.results.live.load_live`'s rows). `compared`: `compare`'s, when made;
    `adjust`: the primary family's multiplicity adjustment (`shapesweep.results.multiplicity`;
    None: the one `compared` was made with, else Holm)."""
    compared = (compare(trials, metric, baseline, adjust=adjust or DEFAULT_ADJUST)
                if compared is None else compared)
    roles = seed_roles(root, name)
    measure = list(roles.measure) or sorted(  # a folder without its space: the seeds seen
        {int(s) for s in trials["seed"][~trials.get(ROLE_COLUMN, pd.Series(False, index=trials.index))
                                        .fillna(False).astype(bool)].dropna()}
        | ({int(s) for s in running["seed"].dropna()} - set(roles.choice) if running is not None else set()))
    if running is not None and len(running):  # a candidate only running now: pending too
        fresh = running[~running["key"].isin(set(compared["key"]))].drop_duplicates("key")
        planned = fresh if planned is None or planned.empty else pd.concat(
            [planned, fresh[~fresh["key"].isin(set(planned["key"]))]], ignore_index=True)
    if planned is not None and len(planned) or measure:
        compared = with_planned(compared, planned if planned is not None else pd.DataFrame(), measure, baseline)
    document = comparisons(trials, name, root, metric, baseline, compared=compared, adjust=adjust)
    if document["baseline"] is None and any(c["variant"] == baseline for c in document["candidates"]):
        document["baseline"] = baseline  # planned, not yet run
        document["warnings"] = warnings(document)
    flying: dict[str, list[int]] = {}
    if running is not None and len(running):
        for key, seed in zip(running["key"], running["seed"], strict=True):
            flying.setdefault(key, []).append(int(seed))
    for candidate in document["candidates"]:
        candidate["running_seeds"] = sorted(flying.get(candidate["key"], []))
        if candidate["state"] == "pending" and candidate["running_seeds"]:
            candidate["why"], candidate["to_run"] = "its first trials are running: none has landed yet", None
        idle = set(candidate["missing_seeds"]) - set(candidate["running_seeds"]) - set(candidate["failed_seeds"] or [])
        if candidate["missing"] and candidate["running_seeds"] and not idle:  # nothing to run: it runs
            candidate["missing"] = candidate["missing"].replace(" not run", " running now")
            candidate["to_run_missing"] = None if not candidate["failed_seeds"] else candidate["to_run_missing"]
    return document
