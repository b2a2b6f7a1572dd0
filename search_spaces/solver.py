"""The iso-budget solver: a space's raw grid -> candidates that each meet the budget.

Everything up to the survivors is vectorised with numpy over the raw grid: the free
dimension(s) are solved for the whole grid at once (`free_dims`), the rows checked against
validity, the space's constraints and the tolerance (`grid_filters`), deduplicated, and only
the survivors become typed configs, verified once more by `account()` (`grid_rows`). Every
dropped point keeps its reason. The accounting itself is the families'
(`shapesweep.families.counts`). The names callers import from here are re-exported below.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from shapesweep.common import UserError, human
from shapesweep.families import base
from shapesweep.families.base import NUMERIC
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.candidates import (
    ACCOUNTING_COLUMNS,
    MAX_DROPPED,
    METRIC_COLUMN,
    SHAPE_COLUMNS,
    Candidate,
    Dropped,
    Plan,
    candidate_document,
)
from shapesweep.search_spaces.configs import parse_count
from shapesweep.search_spaces.family_fields import reference_config
from shapesweep.search_spaces.free_dims import (
    RATIO_SLACK,
    UPPER,
    Columns,
    achieved,
    column,
    pair,
    ratio_off,
    solve_free,
)
from shapesweep.search_spaces.grid_filters import constraints, valid
from shapesweep.search_spaces.grid_rows import (
    ConfigFields,
    build,
    dedupe,
    first_of_config,
    row_fields,
    scalar_rows,
)
from shapesweep.search_spaces.limits import MAX_CANDIDATES
from shapesweep.search_spaces.ranges import is_categorical
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.variants import Resolved

__all__ = ["ACCOUNTING_COLUMNS", "MAX_DROPPED", "METRIC_COLUMN", "RATIO_SLACK", "SHAPE_COLUMNS",
           "UPPER", "Candidate", "Dropped", "Plan", "candidate_document", "plan", "solve_point"]

GridValues = dict[str, list[Any]]  # each searched dimension's values, ranges expanded
Closest = tuple[ConfigFields, float]  # the config fields nearest the budget, and its error


@dataclass
class _Outcome:
    """One variant's solve: its counts, survivors, closest miss, reachable range, drops."""

    built: int = 0  # typed configs built so far, the space's earlier variants' included
    raw: int = 0
    feasible: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    closest: Closest | None = None
    reach: list[float] = field(default_factory=lambda: [np.inf, -np.inf])
    dropped: list[Dropped] = field(default_factory=list)


def plan(space: SearchSpace, seq_len: int | None = None) -> Plan:
    """Solve every point of every variant; raise UserError when nothing meets the budget.
    FLOPs count attention over `seq_len`, by default each variant's own train.seq_len."""
    counts = dict.fromkeys(("raw", "feasible", "within_tolerance", "unique"), 0)
    found: dict[str, Candidate] = {}
    targets: dict[str, float] = {}
    closest: Closest | None = None
    dropped: list[Dropped] = []
    reach, built = [np.inf, -np.inf], 0
    for variant in space.resolved():
        length = seq_len or variant.train.seq_len
        target = _target(space, variant, length)
        targets[variant.name] = target
        outcome = _solve_variant(space, variant, variant.grid_values(), target, length, built)
        built = outcome.built
        counts["raw"] += outcome.raw
        counts["feasible"] += outcome.feasible
        for candidate in outcome.candidates:
            counts["within_tolerance"] += 1
            found.setdefault(candidate.key, candidate)
        if outcome.closest is not None and (closest is None or abs(outcome.closest[1]) < abs(closest[1])):
            closest = outcome.closest
        reach = [min(reach[0], outcome.reach[0]), max(reach[1], outcome.reach[1])]
        dropped += outcome.dropped[:MAX_DROPPED - len(dropped)]
    candidates = sorted(found.values(), key=lambda c: (abs(c.budget_error), c.key))
    counts["unique"] = len(candidates)
    if not candidates:
        _explain_empty(space, counts, targets, closest, reach)
    metric = space.resolved()[0].budget.target_metric
    return Plan(space=space, metric=metric, targets=targets, candidates=candidates, counts=counts,
                dropped=dropped)


def solve_point(space: SearchSpace, point: dict[str, object],
                seq_len: int | None = None) -> Candidate | None:
    """Solve one point (values for the searched dims; `variant` picks a variant by index or
    name, default the first). None when it cannot meet the budget or is invalid."""
    variants = space.resolved()
    choice = point.get("variant", 0)
    matches = [v for v in variants if choice in (v.index, v.name)]
    if not matches:
        raise UserError(f"no variant {choice!r} (have {[v.name for v in variants]})",
                        file=space.source_file, key="variants")
    variant = matches[0]
    missing = [d for d in variant.search if d not in point]
    if missing:
        raise ValueError(f"point lacks searched dimension(s) {missing}")
    values = {dim: [point[dim]] for dim in variant.search}
    seq_len = seq_len or variant.train.seq_len
    outcome = _solve_variant(space, variant, values, _target(space, variant, seq_len), seq_len)
    return outcome.candidates[0] if outcome.candidates else None


def _target(space: SearchSpace, variant: Resolved, seq_len: int) -> float:
    metric = variant.budget.target_metric
    if variant.budget.match is None:
        return float(getattr(variant.budget, metric))
    accounting = account(reference_config(space, variant), seq_len)
    return float(getattr(accounting, METRIC_COLUMN[metric]))


def _explain_empty(space: SearchSpace, counts: dict[str, int], targets: dict[str, float],
                   closest: Closest | None, reach: list[float]) -> None:
    file, target = space.source_file, max(targets.values())
    if counts["feasible"] == 0:
        raise UserError(f"none of the {counts['raw']} raw points is valid (check constraints, "
                        "divisibility and even head_dim)", file=file, key="constraints")
    budget = space.resolved()[0].budget
    metric = budget.target_metric
    if not reach[0] <= target <= reach[1]:
        raise UserError(f"{metric} {human(target, 4)} is out of reach: this space spans "
                        f"[{human(reach[0], 4)}, {human(reach[1], 4)}]", file=file, key="budget")
    assert closest is not None  # some row was feasible, so one was closest
    config, error = closest
    raise UserError(f"no candidate within tolerance {budget.tolerance:g}; the closest is "
                    f"{_describe(config)} with budget error {error:+.4f}", file=file, key="budget.tolerance")


def _describe(fields: ConfigFields) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items() if k != "family")


class _Dropper:
    """Records dropped rows of one categorical combination, up to MAX_DROPPED in all."""

    def __init__(self, v: Resolved, searched: dict[str, object], numeric_cols: Columns,
                 into: list[Dropped]):
        self.v, self.searched, self.numeric, self.into = v, searched, numeric_cols, into

    def __call__(self, rows: np.ndarray, reason: str | Callable[[int], str]) -> None:
        """`reason`: one text for all rows, or a function of the row index."""
        for i in rows[:MAX_DROPPED - len(self.into)]:
            point = {d: x for d, x in self.searched.items() if d in self.v.search}
            point |= {d: self.numeric[d][i].item() for d in self.numeric}
            self.into.append(Dropped(self.v.name, point, reason if isinstance(reason, str) else reason(i)))


def _as_number(dim: str, value: object) -> object:
    """A numeric dimension's count ('1.5K', checked when the space was loaded) as a number."""
    if isinstance(value, str) and dim in NUMERIC:
        return parse_count(value)
    return value


def _budget_column(v: Resolved) -> str:
    """The accounting column the budget is met on (a model without embeddings: the total)."""
    name = METRIC_COLUMN[v.budget.target_metric]
    if not base.get(v.family).task.reads_tokens and name == "params_non_embedding":
        name = "params_total"  # no embeddings: the two are one
    return name


def _solve_variant(space: SearchSpace, v: Resolved, values: GridValues, target: float,
                   seq_len: int, built: int = 0) -> _Outcome:
    """Raw grid of one variant -> survivors; also the closest miss and the reachable range.
    `built`: typed configs the space's earlier variants built (MAX_CANDIDATES in all)."""
    categorical = {d: vals for d, vals in values.items() if is_categorical(d, vals)}
    numeric = {d: np.asarray([_as_number(d, x) for x in vals], dtype=float)
               for d, vals in values.items() if d not in categorical}
    mesh = np.meshgrid(*numeric.values(), indexing="ij") if numeric else []
    numeric_cols = {d: m.ravel() for d, m in zip(numeric, mesh, strict=True)}
    n = int(np.prod([len(x) for x in numeric.values()])) if numeric else 1
    name = _budget_column(v)
    out = _Outcome(built=built)
    for combo in itertools.product(*categorical.values()):
        cols = {d: _as_number(d, x) for d, x in v.fixed.items()}
        cols |= {d: _as_number(d, x) for d, x in zip(categorical, combo, strict=True)} | numeric_cols
        out.raw += n
        drop = _Dropper(v, dict(zip(categorical, combo, strict=True)), numeric_cols, out.dropped)
        _solve_combo(space, v, cols, n, target, name, seq_len, drop, out)
    return out


def _solve_combo(space: SearchSpace, v: Resolved, cols: Columns, n: int, target: float,
                 name: str, seq_len: int, drop: _Dropper, out: _Outcome) -> None:
    """One combination of categorical values: solve its numeric rows, drop the invalid and
    those off budget, and build the rest into `out`."""
    configs = None
    if base.get(v.family).vector_totals is None:  # the config solves its own shape
        cols, totals, ok, configs = scalar_rows(v, cols, n, seq_len)
    else:
        cols, totals = solve_free(v, cols, n, target, name, seq_len)
        ok = valid(v.family, cols, n)
    metric = column(totals, name, n)
    drop(np.flatnonzero(~ok), "invalid shape (a non-positive or fractional size, heads "
                              "not dividing d_model, an odd head_dim, or more active "
                              "experts than experts)")
    for expr, meets in constraints(space, v, {**cols, **totals}, n):
        drop(np.flatnonzero(ok & ~meets), f"breaks the constraint {expr!r}")
        ok &= meets
    out.feasible += int(ok.sum())
    if not ok.any():
        return
    out.reach[0] = min(out.reach[0], float(metric[ok].min()))
    out.reach[1] = max(out.reach[1], float(metric[ok].max()))
    error = (metric - target) / target
    tol = v.budget.tolerance

    def off_budget(i: int) -> str:
        return f"closest budget error {error[i]:+.1%} is outside the tolerance {tol:g}"

    drop(np.flatnonzero(ok & (np.abs(error) > tol)), off_budget)
    best = int(np.argmin(np.where(ok, np.abs(error), np.inf)))
    if out.closest is None or abs(error[best]) < abs(out.closest[1]):
        out.closest = (row_fields(v, cols, best), float(error[best]))
    met = ok & (np.abs(error) <= tol)
    off = ratio_off(v, cols)
    if off is not None:
        coarse, fine, _ = pair(v)
        ratio, reached = f"{fine}/{coarse}", achieved(v, cols)

        def far_from_ratio(i: int) -> str:
            return (f"within budget only at {ratio} = {reached[i]:.3g}, "
                    "more than a factor √2 from the target")

        drop(np.flatnonzero(met & (off > RATIO_SLACK)), far_from_ratio)
        met &= off <= RATIO_SLACK
    _build_survivors(space, v, cols, np.flatnonzero(met), configs, target, name, seq_len, drop, out)


def _build_survivors(space: SearchSpace, v: Resolved, cols: Columns, met: np.ndarray,
                     configs: list[BaseModel | None] | None, target: float, name: str, seq_len: int,
                     drop: _Dropper, out: _Outcome) -> None:
    """The rows within budget (`met`, their indices) as verified candidates, one build a shape."""
    rows = dedupe(cols, met)
    # Rows with one config (searched ratios that round to one shape) share one build.
    first = rows[first_of_config(v, cols, rows)] if configs is None else rows
    out.built += len(np.unique(first))
    if out.built > MAX_CANDIDATES:
        raise UserError(f"more than {MAX_CANDIDATES:,} distinct shapes meet the budget (each "
                        "a trial or more): narrow the search or tighten budget.tolerance",
                        file=space.source_file, key="search")
    tol = v.budget.tolerance
    by_config: dict[int, Candidate | None] = {}
    for i, same in zip(rows, first, strict=True):
        if same not in by_config:
            config = configs[i] if configs is not None else None
            by_config[same] = build(v, row_fields(v, cols, i), target, name, seq_len, config)
        candidate = by_config[same]
        if candidate is not None and abs(candidate.budget_error) <= tol * (1 + 1e-9):
            out.candidates.append(candidate)
        else:
            drop(np.array([i]), "rejected when its typed config was verified")
