"""The solver's numeric core: the free dimension(s) set over a whole grid at once.

For the free dimension(s) the budget metric is a polynomial (degree <= 3) in one unknown t
(d_h = t; d_model = t; n_layers = t; or n_layers = t, d_model = ratio * t), so the exact
accounting (each family spec's `vector_totals` on arrays) is evaluated at t = 0..3, the
polynomial fitted exactly and solved. Each free dimension is then rounded to its multiple
(floor or ceil, whichever misses the budget less; for a pair, also its coarse dim fixed at
floor/ceil with the other solved alone, keeping the shape nearest the target ratio within
the tolerance: (d_model, L) from width_depth_ratio with L coarse, or (d_model, d_h) from
ffn_ratio with d_model coarse, so d_h absorbs d_model's rounding and the budget is met to a
parameter or so).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from shapesweep.families import base
from shapesweep.families.base import MAX_DEPTH
from shapesweep.search_spaces.configs import FAMILIES
from shapesweep.search_spaces.variants import Resolved

UPPER = {"d_h": 2.0**20, "d_model": 2.0**17, "n_layers": float(MAX_DEPTH), "d_z": 2.0**17}
RATIO_SLACK = float(np.log(np.sqrt(2)))  # a solved d_model/L may miss its target by up to √2x

# dimension -> one value or a column over the grid's rows (numbers; text and flags as given)
Columns = dict[str, Any]
Totals = dict[str, Any]  # accounting column -> a number or a column over the rows
Option = tuple[Columns, Totals]


def wide(v: Resolved) -> str:
    """The width that d_model/L ratios and ffn_ratio refer to: d_z for image MLPs."""
    return base.get(v.family).width


def default(family: str, dim: str) -> Any:
    info = FAMILIES[family].model_fields.get(dim)
    return None if info is None else info.default


def get(family: str, cols: Columns, dim: str) -> Any:
    return cols[dim] if dim in cols else default(family, dim)


def multiple(v: Resolved, cols: Columns, dim: str) -> Any:
    if dim in v.round:
        return v.round[dim]
    if dim == "d_model":
        return 2 * np.asarray(get(v.family, cols, "n_heads"))
    return 1


def round_to(x: ArrayLike, step: ArrayLike, how: str) -> np.ndarray:
    m = np.asarray(step, dtype=float)
    q = {"floor": np.floor, "ceil": np.ceil, "nearest": np.rint}[how](np.asarray(x, float) / m)
    return np.maximum(q, 1) * m


def with_free(v: Resolved, cols: Columns, t: np.ndarray | float | None,
              rounding: tuple[str, ...] | None) -> Columns:
    """`cols` with the free dims set from t (continuous when `rounding` is None, else floor/ceil
    per free dim) and the dependent dims derived (rounded to nearest)."""
    cols = dict(cols)
    width = wide(v)
    if len(v.solve) == 2 and "d_h" in v.solve:
        values = {width: t, "d_h": cols.get("ffn_ratio", 1.0) * t}
    elif len(v.solve) == 2:
        values = {"n_layers": t, width: cols.get("width_depth_ratio", 1.0) * t}
    else:
        values = {dim: t for dim in v.solve}
    for i, dim in enumerate(v.solve):
        x = values[dim]
        cols[dim] = x if rounding is None else round_to(x, multiple(v, cols, dim), rounding[i])
    how = None if rounding is None else "nearest"
    ratio = cols.get("width_depth_ratio")
    if ratio is not None and width not in cols and "n_layers" in cols:
        x = ratio * cols["n_layers"]
        cols[width] = x if how is None else round_to(x, multiple(v, cols, width), how)
    if ratio is not None and "n_layers" not in cols and width in cols:
        x = cols[width] / ratio
        cols["n_layers"] = x if how is None else round_to(x, 1, how)
    if "ffn_ratio" in cols and "d_h" not in cols and width in cols:
        x = cols["ffn_ratio"] * cols[width]
        cols["d_h"] = x if how is None else round_to(x, multiple(v, cols, "d_h"), how)
    return cols


def totals(family: str, cols: Columns, seq_len: int) -> Totals:
    """Exact accounting on arrays: the family's `vector_totals`, the closed forms `account()`
    uses, over a namespace of columns (unset fields at their defaults)."""
    fields = SimpleNamespace(**{d: get(family, cols, d) for d in FAMILIES[family].model_fields})
    vector_totals = base.get(family).vector_totals
    assert vector_totals is not None  # a family without them solves its own shape (grid_rows)
    result: Totals = vector_totals(fields, seq_len)
    return result


def column(values: Totals, name: str, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(values[name], dtype=float), (n,))


def solve_free(v: Resolved, cols: Columns, n: int, target: float, name: str,
               seq_len: int) -> Option:
    """Set the free dims: exact cubic fit in t, bisection, then the better of floor/ceil."""
    if not v.solve:
        cols = with_free(v, cols, None, ())
        return cols, totals(v.family, cols, seq_len)
    samples = np.stack([column(totals(v.family, with_free(v, cols, float(t), None), seq_len),
                               name, n) for t in range(4)])
    t = root(np.linalg.solve(np.vander(np.arange(4.0), 4), samples), target, UPPER[v.solve[0]])
    options = []
    for rounding in itertools.product(("floor", "ceil"), repeat=len(v.solve)):
        trial = with_free(v, cols, t, rounding)
        options.append((trial, totals(v.family, trial, seq_len)))
    if len(v.solve) == 2:
        options += _whole_depth_options(v, cols, t, n, target, name, seq_len)
    return _best_option(v, options, target, name, n)


def pair(v: Resolved) -> tuple[str, str, str]:
    """A solved pair's (coarse dim, fine dim, the ratio fine / coarse it targets):
    (n_layers, width, width_depth_ratio), or (width, d_h, ffn_ratio)."""
    width = wide(v)
    return (width, "d_h", "ffn_ratio") if "d_h" in v.solve else ("n_layers", width, "width_depth_ratio")


def _whole_depth_options(v: Resolved, cols: Columns, t: np.ndarray, n: int, target: float,
                         name: str, seq_len: int) -> list[Option]:
    """For a pair: fix the coarse dim (the depth; or the width, which moves in steps of
    2 x n_heads) at its floor and ceil and solve the fine one alone, so the budget is met even
    where rounding both dims together misses it."""
    coarse, fine, _ = pair(v)
    alone = v.model_copy(update={"solve": [fine]})
    options = []
    for how in ("floor", "ceil"):
        whole = round_to(t, multiple(v, cols, coarse), how)
        fixed = {d: x for d, x in cols.items() if d != fine} | {coarse: whole}
        options.append(solve_free(alone, fixed, n, target, name, seq_len))
    return options


def achieved(v: Resolved, cols: Columns) -> np.ndarray:
    """A solved pair's achieved ratio: d_model/L, or d_h/d_model."""
    coarse, fine, _ = pair(v)
    with np.errstate(all="ignore"):
        return np.asarray(cols[fine], float) / cols[coarse]


def ratio_off(v: Resolved, cols: Columns) -> np.ndarray | None:
    """|log(achieved ratio ÷ target ratio)| when a pair is solved from a ratio."""
    if len(v.solve) != 2 or cols.get(pair(v)[2]) is None:
        return None
    with np.errstate(all="ignore"):
        off = np.abs(np.log(achieved(v, cols) / cols[pair(v)[2]]))
    return np.nan_to_num(off, nan=np.inf)


def _best_option(v: Resolved, options: list[Option], target: float, name: str, n: int) -> Option:
    """Per row, the option closest to the budget; but when a width/depth ratio is searched,
    the one closest to that ratio among the options within the budget tolerance (then
    those within budget but far from the ratio, then the rest by budget error)."""
    best_score: np.ndarray | None = None
    best = options[0]
    for trial, values in options:
        score = np.abs(column(values, name, n) - target) / target
        off = ratio_off(v, trial)
        if off is not None:
            near = np.where(off <= RATIO_SLACK, off, 1e3 + np.minimum(off, 1e3))
            score = np.where(score <= v.budget.tolerance, near, 1e6 + score)
        if best_score is None:
            best, best_score = (trial, values), score
            continue
        better = score < best_score
        best = ({d: _pick(better, trial[d], best[0][d]) for d in trial},
                {d: _pick(better, values[d], best[1][d]) for d in values})
        best_score = np.minimum(score, best_score)
    return best


def root(coeffs: np.ndarray, target: float, upper: float) -> np.ndarray:
    """Where the increasing polynomial sum(coeffs[i] t^(3-i)) meets target, within [0.5, upper].
    Closed form up to degree 2 (every single free dim); bisection for the cubic (d_model, L) pair."""
    a3, a2, a1, a0 = coeffs
    scale = np.maximum(np.abs(coeffs).max(axis=0), 1.0)
    if np.all(np.abs(a3) <= 1e-9 * scale):
        c = a0 - target
        with np.errstate(all="ignore"):
            disc = np.sqrt(np.maximum(a1 * a1 - 4 * a2 * c, 0))
            quadratic = 2 * -c / (a1 + disc)  # the positive root, stable when a2 -> 0
        t = np.where(np.abs(a1) + np.abs(a2) > 0, quadratic, 0.5)
        return np.clip(np.nan_to_num(t, nan=0.5, posinf=upper), 0.5, upper)
    lo, hi = np.full(a0.shape, 0.5), np.full(a0.shape, float(upper))
    for _ in range(48):
        mid = (lo + hi) / 2
        below = ((a3 * mid + a2) * mid + a1) * mid + a0 < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    result: np.ndarray = (lo + hi) / 2
    return result


def _pick(better: np.ndarray, new: ArrayLike, old: ArrayLike) -> ArrayLike:
    return np.where(better, new, old) if is_array(new) or is_array(old) else new


def is_array(x: object) -> bool:
    return isinstance(x, np.ndarray) and x.ndim > 0
