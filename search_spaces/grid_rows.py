"""From solved grid rows to typed candidates: each row's config fields, rows that repeat a
shape merged, and every survivor verified once more by `account()`, the single source of
truth. A family that solves its own shape (the ><former's widths) is built row by row."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from shapesweep.families.base import INTEGER
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.candidates import ACCOUNTING_COLUMNS, Candidate
from shapesweep.search_spaces.configs import FAMILIES, make_config
from shapesweep.search_spaces.free_dims import Columns, Totals, is_array, with_free
from shapesweep.search_spaces.variants import Resolved

ConfigFields = dict[str, Any]  # a family config's fields by name, as make_config takes them


def row_fields(v: Resolved, cols: Columns, i: int) -> ConfigFields:
    """Config fields of row i (derived-only columns like ffn_ratio are left out)."""
    fields: ConfigFields = {"family": v.family}
    for dim in FAMILIES[v.family].model_fields:
        if dim == "family" or dim not in cols:
            continue
        x = cols[dim]
        if is_array(x):
            x = x[i]
        if isinstance(x, np.generic):
            x = x.item()
        if dim in INTEGER and isinstance(x, float):
            x = int(round(x))
        fields[dim] = x
    return fields


def first_of_config(v: Resolved, cols: Columns, rows: np.ndarray) -> np.ndarray:
    """For each of `rows`, the position in `rows` of the first row with the same config fields."""
    fields = FAMILIES[v.family].model_fields
    arrays = [np.asarray(x, dtype=float)[rows] for d, x in cols.items() if d in fields and is_array(x)]
    if not arrays or len(rows) < 2:
        return np.arange(len(rows))
    _, first, inverse = np.unique(np.stack(arrays, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    result: np.ndarray = first[inverse.ravel()]
    return result


def dedupe(cols: Columns, rows: np.ndarray) -> np.ndarray:
    """Drop rows whose searched and solved values repeat (rounding often merges neighbours)."""
    arrays = [np.asarray(x, dtype=float)[rows] for x in cols.values() if is_array(x)]
    if not arrays or len(rows) < 2:
        return rows
    _, first = np.unique(np.stack(arrays, axis=1), axis=0, return_index=True)
    result: np.ndarray = rows[np.sort(first)]
    return result


def build(v: Resolved, fields: ConfigFields, target: float, column: str, seq_len: int,
          config: BaseModel | None = None) -> Candidate | None:
    """Typed config for a survivor, verified with `account()` (the single source of truth)."""
    if config is None:
        try:
            config = make_config(fields)
        except (ValidationError, ValueError):
            return None
    accounting = account(config, seq_len)
    error = (getattr(accounting, column) - target) / target
    return Candidate(config=config, accounting=accounting, budget_error=error, variant=v.name)


def scalar_rows(v: Resolved, cols: Columns, n: int,
                seq_len: int) -> tuple[Columns, Totals, np.ndarray, list[BaseModel | None]]:
    """A family that solves its own shape inside each config (variable_width's widths):
    build configs point by point."""
    rows = {d: x for d, x in cols.items()}
    if v.budget.target_metric == "active_params":  # a MoE's widths then match active params
        rows.setdefault("width_match", "active_params")
    derived = with_free(v, rows, None, ())
    configs: list[BaseModel | None] = []
    records: list[dict[str, Any] | None] = []
    for i in range(n):
        try:
            config = make_config(row_fields(v, derived, i))
            configs.append(config)
            records.append(account(config, seq_len).to_dict())
        except (ValidationError, ValueError):
            configs.append(None)
            records.append(None)
    ok = np.array([c is not None for c in configs], dtype=bool)
    filler = next((r for r in records if r is not None), None)
    totals: Totals = {}
    if filler is not None:
        for name in ACCOUNTING_COLUMNS:
            totals[name] = np.array([(r or filler)[name] for r in records], dtype=float)
    else:
        totals = {name: np.zeros(n) for name in ACCOUNTING_COLUMNS}
    return derived, totals, ok, configs
