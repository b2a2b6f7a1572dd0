"""The iso-budget solver: a space's raw grid -> candidates that each meet the budget.

Everything up to the survivors is vectorised with numpy over the raw grid. For the
free dimension(s) the budget metric is a polynomial (degree <= 3) in one unknown t
(d_h = t; d_model = t; n_layers = t; or n_layers = t, d_model = ratio * t), so we
evaluate the exact accounting (each family spec's `vector_totals` on arrays)
at t = 0..3, fit that polynomial exactly and bisect it. Each free dimension is then
rounded to its multiple (floor or ceil, whichever misses the budget less; for a pair,
also its coarse dim fixed at floor/ceil with the other solved alone, keeping the shape
nearest the target ratio within the tolerance: (d_model, L) from width_depth_ratio with L
coarse, or (d_model, d_h) from ffn_ratio with d_model coarse, so d_h absorbs d_model's
rounding and the budget is met to a parameter or so), checked against validity, the
space's constraints and the tolerance, deduplicated, and only the survivors become
typed configs, verified once more by `account()`. Every dropped point keeps its reason.

Why one module of this length: the vectorised grid, the polynomial solve, rounding
and the budget filter are one pipeline over the same arrays; the accounting itself is
the families' (`shapesweep.families.counts`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from pydantic import ValidationError

from shapesweep.common import UserError, human
from shapesweep.families import base
from shapesweep.families.base import MAX_DEPTH, STORED
from shapesweep.search_spaces.accounting import Accounting, account
from shapesweep.search_spaces.configs import (
    FAMILIES,
    TrainConfig,
    config_key,
    make_config,
    parse_count,
    train_document,
)
from shapesweep.search_spaces.expressions import compile_expression
from shapesweep.search_spaces.limits import MAX_CANDIDATES
from shapesweep.search_spaces.space import (
    BASELINE_VARIANT,
    INTEGER,
    NUMERIC,
    POSITIVE,
    Resolved,
    SearchSpace,
    constraint_key,
    constraint_names,
    is_categorical,
    reference_config,
)

METRIC_COLUMN = {"non_embedding_params": "params_non_embedding", "total_params": "params_total",
                 "flops_per_token": "flops_per_token", "active_params": "params_active"}
UPPER = {"d_h": 2.0**20, "d_model": 2.0**17, "n_layers": float(MAX_DEPTH), "d_z": 2.0**17}
SHAPE_COLUMNS = STORED  # every family's fields marked Stored (live: a family registered later too)
RATIO_SLACK = float(np.log(np.sqrt(2)))  # a solved d_model/L may miss its target by up to √2x
MAX_DROPPED = 20  # dropped grid points kept (with reasons) for the user to see
ACCOUNTING_COLUMNS = tuple(f.name for f in dataclasses.fields(Accounting) if f.name != "widths")


@dataclass
class Candidate:
    """One solved shape: its typed config, exact accounting and relative budget error."""

    config: Any
    accounting: Accounting
    budget_error: float
    variant: str = ""
    key: str = field(init=False)

    def __post_init__(self):
        self.key = config_key(self.config)

    def to_row(self) -> dict[str, Any]:
        """Flat result-store row: key, family, shape columns, accounting columns, budget_error."""
        dump = self.config.model_dump(mode="json")
        row: dict[str, Any] = {"key": self.key, "family": self.config.family,
                               "variant": self.variant}
        row |= {name: dump[name] for name in SHAPE_COLUMNS if name in dump}
        row["ffn_ratio"] = float(self.config.ffn_ratio)
        row["width_depth_ratio"] = float(self.config.width_depth_ratio)
        row["widths"] = list(self.accounting.widths)
        row |= {name: getattr(self.accounting, name) for name in ACCOUNTING_COLUMNS}
        row["budget_error"] = float(self.budget_error)
        return row


@dataclass
class Dropped:
    """A grid point that did not become a candidate, and why (invalid, or off budget)."""

    variant: str
    point: dict[str, Any]
    reason: str

    def __str__(self) -> str:
        point = " ".join(f"{k}={_short_value(v)}" for k, v in self.point.items()) or "(fixed point)"
        return f"{self.variant}: {point}: {self.reason}"


@dataclass
class Plan:
    """The solver's answer: candidates sorted by |budget_error|, the pruning counts, and
    the first MAX_DROPPED grid points that were dropped, with their reasons."""

    space: SearchSpace
    metric: str
    targets: dict[str, float]
    candidates: list[Candidate]
    counts: dict[str, int]
    dropped: list[Dropped] = field(default_factory=list)

    def counts_line(self) -> str:
        c = self.counts
        return (f"{c['raw']} raw points -> {c['feasible']} feasible -> "
                f"{c['within_tolerance']} within tolerance -> {c['unique']} unique candidates")

    def dropped_lines(self, limit: int = 10) -> list[str]:
        """'dropped N of M grid points' and one line per dropped point (up to `limit`)."""
        total = self.counts["raw"] - self.counts["within_tolerance"]
        if total <= 0:
            return []
        lines = [f"dropped {total} of {self.counts['raw']} grid points:"]
        lines += [f"  {d}" for d in self.dropped[:limit]]
        if total > min(limit, len(self.dropped)):
            lines.append(f"  ... and {total - min(limit, len(self.dropped))} more")
        return lines + self.baseline_warning()

    def baseline_warning(self) -> list[str]:
        """A warning line when the space has a baseline variant and none of its points became a
        candidate: every comparison with it (`status`, the report) would be missing."""
        names = {v.name for v in self.space.resolved()}
        if BASELINE_VARIANT not in names or any(c.variant == BASELINE_VARIANT for c in self.candidates):
            return []
        why = next((d.reason for d in self.dropped if d.variant == BASELINE_VARIANT),
                   f"none within the tolerance {self.space.budget.tolerance:g}")
        return [f"warning: variant {BASELINE_VARIANT!r} has no candidate ({why}): no other "
                "candidate will be compared with it; widen budget.tolerance or put the baseline on budget"]


def candidate_document(candidate: Candidate, train: TrainConfig) -> dict[str, Any]:
    """The YAML/JSON document `shapesweep train CONFIG` accepts for this candidate."""
    model, family = candidate.config.model_dump(mode="json", exclude={"family"}), candidate.config.family
    return {"family": family, "model": model,
            "train": train_document(train.model_dump(mode="json", exclude_none=True), family)}


def plan(space: SearchSpace, seq_len: int | None = None) -> Plan:
    """Solve every point of every variant; raise UserError when nothing meets the budget.
    FLOPs count attention over `seq_len`, by default each variant's own train.seq_len."""
    counts = dict.fromkeys(("raw", "feasible", "within_tolerance", "unique"), 0)
    found: dict[str, Candidate] = {}
    targets, closest, reach, dropped, built = {}, None, [np.inf, -np.inf], [], 0
    for variant in space.resolved():
        length = seq_len or variant.train.seq_len
        target = _target(space, variant, length)
        targets[variant.name] = target
        outcome = _solve_variant(space, variant, variant.grid_values(), target, length, built)
        built = outcome["built"]
        for name in ("raw", "feasible"):
            counts[name] += outcome["counts"][name]
        for candidate in outcome["candidates"]:
            counts["within_tolerance"] += 1
            found.setdefault(candidate.key, candidate)
        if outcome["closest"] is not None and (closest is None or abs(outcome["closest"][1]) < abs(closest[1])):
            closest = outcome["closest"]
        reach = [min(reach[0], outcome["reach"][0]), max(reach[1], outcome["reach"][1])]
        dropped += outcome["dropped"][:MAX_DROPPED - len(dropped)]
    candidates = sorted(found.values(), key=lambda c: (abs(c.budget_error), c.key))
    counts["unique"] = len(candidates)
    if not candidates:
        _explain_empty(space, counts, targets, closest, reach)
    metric = space.resolved()[0].budget.target_metric
    return Plan(space=space, metric=metric, targets=targets, candidates=candidates, counts=counts,
                dropped=dropped)


def solve_point(space: SearchSpace, point: dict[str, Any], seq_len: int | None = None) -> Candidate | None:
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
    return outcome["candidates"][0] if outcome["candidates"] else None


def _target(space: SearchSpace, variant: Resolved, seq_len: int) -> float:
    metric = variant.budget.target_metric
    if variant.budget.match is None:
        return float(getattr(variant.budget, metric))
    accounting = account(reference_config(space, variant), seq_len)
    return float(getattr(accounting, METRIC_COLUMN[metric]))


def _explain_empty(space, counts, targets, closest, reach) -> None:
    file, target = space.source_file, max(targets.values())
    if counts["feasible"] == 0:
        raise UserError(f"none of the {counts['raw']} raw points is valid (check constraints, "
                        "divisibility and even head_dim)", file=file, key="constraints")
    budget = space.resolved()[0].budget
    metric = budget.target_metric
    if not reach[0] <= target <= reach[1]:
        raise UserError(f"{metric} {human(target, 4)} is out of reach: this space spans "
                        f"[{human(reach[0], 4)}, {human(reach[1], 4)}]", file=file, key="budget")
    config, error = closest
    raise UserError(f"no candidate within tolerance {budget.tolerance:g}; the closest is "
                    f"{_describe(config)} with budget error {error:+.4f}", file=file, key="budget.tolerance")




def _describe(fields: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items() if k != "family")


def _short_value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------- vectorised core


def _wide(v: Resolved) -> str:
    """The width that d_model/L ratios and ffn_ratio refer to: d_z for image MLPs."""
    return base.get(v.family).width


def _solve_variant(space: SearchSpace, v: Resolved, values: dict[str, list], target: float,
                   seq_len: int, built: int = 0) -> dict[str, Any]:
    """Raw grid of one variant -> survivors; also the closest miss and the reachable range.
    `built`: typed configs the space's earlier variants built (MAX_CANDIDATES in all)."""
    categorical = {d: vals for d, vals in values.items() if is_categorical(d, vals)}
    numeric = {d: np.asarray([_as_number(d, x) for x in vals], dtype=float)
               for d, vals in values.items() if d not in categorical}
    mesh = np.meshgrid(*numeric.values(), indexing="ij") if numeric else []
    numeric_cols = {d: m.ravel() for d, m in zip(numeric, mesh, strict=True)}
    n = int(np.prod([len(x) for x in numeric.values()])) if numeric else 1
    column = METRIC_COLUMN[v.budget.target_metric]
    if not base.get(v.family).task.reads_tokens and column == "params_non_embedding":
        column = "params_total"  # no embeddings: the two are one
    out = {"counts": {"raw": 0, "feasible": 0}, "candidates": [], "closest": None,
           "reach": [np.inf, -np.inf], "dropped": [], "built": built}
    tol = v.budget.tolerance
    for combo in itertools.product(*categorical.values()):
        cols = {d: _as_number(d, x) for d, x in v.fixed.items()}
        cols |= {d: _as_number(d, x) for d, x in zip(categorical, combo, strict=True)} | numeric_cols
        out["counts"]["raw"] += n
        configs = None
        if base.get(v.family).vector_totals is None:  # the config solves its own shape
            cols, totals, ok, configs = _scalar_rows(v, cols, n, seq_len)
        else:
            cols, totals = _solve_free(v, cols, n, target, column, seq_len)
            ok = _valid(v.family, cols, n)
        metric = _column(totals, column, n)
        drop = _Dropper(v, dict(zip(categorical, combo, strict=True)), numeric_cols, out["dropped"])
        drop(np.flatnonzero(~ok), "invalid shape (a non-positive or fractional size, heads "
                                  "not dividing d_model, an odd head_dim, or more active "
                                  "experts than experts)")
        for expr, meets in _constraints(space, v, {**cols, **totals}, n):
            drop(np.flatnonzero(ok & ~meets), f"breaks the constraint {expr!r}")
            ok &= meets
        out["counts"]["feasible"] += int(ok.sum())
        if not ok.any():
            continue
        out["reach"][0] = min(out["reach"][0], float(metric[ok].min()))
        out["reach"][1] = max(out["reach"][1], float(metric[ok].max()))
        error = (metric - target) / target
        off = np.flatnonzero(ok & (np.abs(error) > tol))
        drop(off, lambda i, e=error: f"closest budget error {e[i]:+.1%} is outside the tolerance {tol:g}")
        best = int(np.argmin(np.where(ok, np.abs(error), np.inf)))
        if out["closest"] is None or abs(error[best]) < abs(out["closest"][1]):
            out["closest"] = (_row_fields(v, cols, best), float(error[best]))
        met = ok & (np.abs(error) <= tol)
        ratio_off = _ratio_off(v, cols)
        if ratio_off is not None:
            far = np.flatnonzero(met & (ratio_off > RATIO_SLACK))
            coarse, fine, _ = _pair(v)
            name, achieved = f"{fine}/{coarse}", _achieved(v, cols)
            drop(far, lambda i, n=name, r=achieved: f"within budget only at {n} = {r[i]:.3g}, "
                                                    "more than a factor √2 from the target")
            met &= ratio_off <= RATIO_SLACK
        rows = _dedupe(cols, np.flatnonzero(met))
        # Rows with one config (searched ratios that round to one shape) share one build.
        first = rows[_first_of_config(v, cols, rows)] if configs is None else rows
        out["built"] += len(np.unique(first))
        if out["built"] > MAX_CANDIDATES:
            raise UserError(f"more than {MAX_CANDIDATES:,} distinct shapes meet the budget (each "
                            "a trial or more): narrow the search or tighten budget.tolerance",
                            file=space.source_file, key="search")
        by_config: dict[int, Candidate | None] = {}
        for i, same in zip(rows, first, strict=True):
            if same not in by_config:
                config = configs[i] if configs is not None else None
                by_config[same] = _build(v, _row_fields(v, cols, i), target, column, seq_len, config)
            candidate = by_config[same]
            if candidate is not None and abs(candidate.budget_error) <= tol * (1 + 1e-9):
                out["candidates"].append(candidate)
            else:
                drop(np.array([i]), "rejected when its typed config was verified")
    return out


class _Dropper:
    """Records dropped rows of one categorical combination, up to MAX_DROPPED in all."""

    def __init__(self, v: Resolved, searched: dict, numeric_cols: dict, into: list[Dropped]):
        self.v, self.searched, self.numeric, self.into = v, searched, numeric_cols, into

    def __call__(self, rows: np.ndarray, reason: str | Callable[[int], str]) -> None:
        """`reason`: one text for all rows, or a function of the row index."""
        for i in rows[:MAX_DROPPED - len(self.into)]:
            point = {d: x for d, x in self.searched.items() if d in self.v.search}
            point |= {d: self.numeric[d][i].item() for d in self.numeric}
            self.into.append(Dropped(self.v.name, point, reason if isinstance(reason, str) else reason(i)))


def _as_number(dim: str, value: Any) -> Any:
    """A numeric dimension's count ('1.5K', checked when the space was loaded) as a number."""
    if isinstance(value, str) and dim in NUMERIC:
        return parse_count(value)
    return value


def _default(family: str, dim: str) -> Any:
    info = FAMILIES[family].model_fields.get(dim)
    return None if info is None else info.default


def _get(family: str, cols: dict, dim: str) -> Any:
    return cols[dim] if dim in cols else _default(family, dim)


def _multiple(v: Resolved, cols: dict, dim: str) -> Any:
    if dim in v.round:
        return v.round[dim]
    if dim == "d_model":
        return 2 * np.asarray(_get(v.family, cols, "n_heads"))
    return 1


def _round_to(x, multiple, how: str):
    m = np.asarray(multiple, dtype=float)
    q = {"floor": np.floor, "ceil": np.ceil, "nearest": np.rint}[how](np.asarray(x, float) / m)
    return np.maximum(q, 1) * m


def _with_free(v: Resolved, cols: dict, t, rounding: tuple[str, ...] | None) -> dict:
    """`cols` with the free dims set from t (continuous when `rounding` is None, else floor/ceil
    per free dim) and the dependent dims derived (rounded to nearest)."""
    cols = dict(cols)
    wide = _wide(v)
    if len(v.solve) == 2 and "d_h" in v.solve:
        values = {wide: t, "d_h": cols.get("ffn_ratio", 1.0) * t}
    elif len(v.solve) == 2:
        values = {"n_layers": t, wide: cols.get("width_depth_ratio", 1.0) * t}
    else:
        values = {dim: t for dim in v.solve}
    for i, dim in enumerate(v.solve):
        x = values[dim]
        cols[dim] = x if rounding is None else _round_to(x, _multiple(v, cols, dim), rounding[i])
    how = None if rounding is None else "nearest"
    ratio = cols.get("width_depth_ratio")
    if ratio is not None and wide not in cols and "n_layers" in cols:
        x = ratio * cols["n_layers"]
        cols[wide] = x if how is None else _round_to(x, _multiple(v, cols, wide), how)
    if ratio is not None and "n_layers" not in cols and wide in cols:
        x = cols[wide] / ratio
        cols["n_layers"] = x if how is None else _round_to(x, 1, how)
    if "ffn_ratio" in cols and "d_h" not in cols and wide in cols:
        x = cols["ffn_ratio"] * cols[wide]
        cols["d_h"] = x if how is None else _round_to(x, _multiple(v, cols, "d_h"), how)
    return cols


def _totals(family: str, cols: dict, seq_len: int) -> dict:
    """Exact accounting on arrays: the family's `vector_totals`, the closed forms `account()`
    uses, over a namespace of columns (unset fields at their defaults)."""
    fields = SimpleNamespace(**{d: _get(family, cols, d) for d in FAMILIES[family].model_fields})
    return base.get(family).vector_totals(fields, seq_len)


def _column(totals: dict, column: str, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(totals[column], dtype=float), (n,))


def _solve_free(v: Resolved, cols: dict, n: int, target: float, column: str, seq_len: int):
    """Set the free dims: exact cubic fit in t, bisection, then the better of floor/ceil."""
    if not v.solve:
        cols = _with_free(v, cols, None, ())
        return cols, _totals(v.family, cols, seq_len)
    samples = np.stack([_column(_totals(v.family, _with_free(v, cols, float(t), None), seq_len),
                                column, n) for t in range(4)])
    t = _root(np.linalg.solve(np.vander(np.arange(4.0), 4), samples), target, UPPER[v.solve[0]])
    options = []
    for rounding in itertools.product(("floor", "ceil"), repeat=len(v.solve)):
        trial = _with_free(v, cols, t, rounding)
        options.append((trial, _totals(v.family, trial, seq_len)))
    if len(v.solve) == 2:
        options += _whole_depth_options(v, cols, t, n, target, column, seq_len)
    return _best_option(v, options, target, column, n)


def _pair(v: Resolved) -> tuple[str, str, str]:
    """A solved pair's (coarse dim, fine dim, the ratio fine / coarse it targets):
    (n_layers, width, width_depth_ratio), or (width, d_h, ffn_ratio)."""
    wide = _wide(v)
    return (wide, "d_h", "ffn_ratio") if "d_h" in v.solve else ("n_layers", wide, "width_depth_ratio")


def _whole_depth_options(v: Resolved, cols: dict, t, n: int, target: float, column: str,
                         seq_len: int) -> list[tuple[dict, dict]]:
    """For a pair: fix the coarse dim (the depth; or the width, which moves in steps of
    2 x n_heads) at its floor and ceil and solve the fine one alone, so the budget is met even
    where rounding both dims together misses it."""
    coarse, fine, _ = _pair(v)
    alone = v.model_copy(update={"solve": [fine]})
    options = []
    for how in ("floor", "ceil"):
        whole = _round_to(t, _multiple(v, cols, coarse), how)
        fixed = {d: x for d, x in cols.items() if d != fine} | {coarse: whole}
        options.append(_solve_free(alone, fixed, n, target, column, seq_len))
    return options


def _achieved(v: Resolved, cols: dict) -> np.ndarray:
    """A solved pair's achieved ratio: d_model/L, or d_h/d_model."""
    coarse, fine, _ = _pair(v)
    with np.errstate(all="ignore"):
        return np.asarray(cols[fine], float) / cols[coarse]


def _ratio_off(v: Resolved, cols: dict) -> np.ndarray | None:
    """|log(achieved ratio ÷ target ratio)| when a pair is solved from a ratio."""
    if len(v.solve) != 2 or cols.get(_pair(v)[2]) is None:
        return None
    with np.errstate(all="ignore"):
        off = np.abs(np.log(_achieved(v, cols) / cols[_pair(v)[2]]))
    return np.nan_to_num(off, nan=np.inf)


def _best_option(v: Resolved, options: list[tuple[dict, dict]], target: float, column: str,
                 n: int) -> tuple[dict, dict]:
    """Per row, the option closest to the budget; but when a width/depth ratio is searched,
    the one closest to that ratio among the options within the budget tolerance (then
    those within budget but far from the ratio, then the rest by budget error)."""
    best_score = None
    for trial, totals in options:
        score = np.abs(_column(totals, column, n) - target) / target
        off = _ratio_off(v, trial)
        if off is not None:
            near = np.where(off <= RATIO_SLACK, off, 1e3 + np.minimum(off, 1e3))
            score = np.where(score <= v.budget.tolerance, near, 1e6 + score)
        if best_score is None:
            best, best_score = (trial, totals), score
            continue
        better = score < best_score
        best = ({d: _pick(better, trial[d], best[0][d]) for d in trial},
                {d: _pick(better, totals[d], best[1][d]) for d in totals})
        best_score = np.minimum(score, best_score)
    return best


def _root(coeffs: np.ndarray, target: float, upper: float) -> np.ndarray:
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
    return (lo + hi) / 2


def _pick(better: np.ndarray, new, old):
    return np.where(better, new, old) if _is_array(new) or _is_array(old) else new


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) and x.ndim > 0


def _valid(family: str, cols: dict, n: int) -> np.ndarray:
    """Built-in validity: positive whole dims, divisible heads, even head_dim (RoPE), no more
    active experts than experts."""
    ok = np.ones(n, dtype=bool)
    for dim in POSITIVE:
        x = cols.get(dim)
        if x is None or isinstance(x, str | bool):
            continue
        x = np.asarray(x, dtype=float)
        ok &= np.isfinite(x) & (x > 0)
        if dim in INTEGER:
            ok &= x == np.round(x)
    if "n_heads" not in FAMILIES[family].model_fields:
        return ok  # no attention heads to divide the width
    d_model, n_heads = np.asarray(_get(family, cols, "d_model")), np.asarray(cols.get("n_heads", 1))
    head_dim = cols.get("head_dim")
    if head_dim is None:
        ok &= np.mod(d_model, n_heads) == 0
        head_dim = np.floor_divide(d_model, n_heads)
    ok &= np.mod(head_dim, 2) == 0
    if cols.get("n_kv_heads") is not None:
        ok &= np.mod(n_heads, cols["n_kv_heads"]) == 0
    if cols.get("n_experts") is not None and cols.get("n_active_experts") is not None:
        ok &= np.asarray(cols["n_active_experts"]) <= np.asarray(cols["n_experts"])
    return ok


def _constraints(space: SearchSpace, v: Resolved, cols: dict, n: int) -> list[tuple[str, np.ndarray]]:
    """Evaluate the space's expressions (`shapesweep.search_spaces.expressions`, checked when the space
    was loaded) over the candidate columns: one (expression, mask of rows meeting it) each."""
    masks: list[tuple[str, np.ndarray]] = []
    if not v.constraints:
        return masks
    names = dict(cols)
    wide = _wide(v)
    names.setdefault("ffn_ratio", np.asarray(cols["d_h"]) / np.asarray(cols[wide]))
    names.setdefault("width_depth_ratio", np.asarray(cols[wide]) / np.asarray(cols["n_layers"]))
    names.setdefault("avg_layer_width", cols[wide])  # one width in every layer
    names.setdefault("params_frozen", 0)
    if "n_heads" in FAMILIES[v.family].model_fields:
        for dim in ("head_dim", "n_kv_heads"):
            if names.get(dim) is None:
                names[dim] = (np.floor_divide(cols["d_model"], cols["n_heads"]) if dim == "head_dim"
                              else cols["n_heads"])
    for dim in FAMILIES[v.family].model_fields:
        names.setdefault(dim, _default(v.family, dim))
    allowed = constraint_names(v.family)
    for i, text in enumerate(v.constraints):
        try:
            masks.append((text, compile_expression(text, allowed).evaluate(names, n)))
        except Exception as error:  # noqa: BLE001 - any evaluation failure is the user's expression
            raise UserError(f"cannot evaluate {text!r}: {error}", file=space.source_file,
                            key=constraint_key(space, v, i)) from None
    return masks


def _row_fields(v: Resolved, cols: dict, i: int) -> dict[str, Any]:
    """Config fields of row i (derived-only columns like ffn_ratio are left out)."""
    fields: dict[str, Any] = {"family": v.family}
    for dim in FAMILIES[v.family].model_fields:
        if dim == "family" or dim not in cols:
            continue
        x = cols[dim]
        if _is_array(x):
            x = x[i]
        if isinstance(x, np.generic):
            x = x.item()
        if dim in INTEGER and isinstance(x, float):
            x = int(round(x))
        fields[dim] = x
    return fields


def _first_of_config(v: Resolved, cols: dict, rows: np.ndarray) -> np.ndarray:
    """For each of `rows`, the position in `rows` of the first row with the same config fields."""
    fields = FAMILIES[v.family].model_fields
    arrays = [np.asarray(x, dtype=float)[rows] for d, x in cols.items() if d in fields and _is_array(x)]
    if not arrays or len(rows) < 2:
        return np.arange(len(rows))
    _, first, inverse = np.unique(np.stack(arrays, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    return first[inverse.ravel()]


def _dedupe(cols: dict, rows: np.ndarray) -> np.ndarray:
    """Drop rows whose searched and solved values repeat (rounding often merges neighbours)."""
    arrays = [np.asarray(x, dtype=float)[rows] for x in cols.values() if _is_array(x)]
    if not arrays or len(rows) < 2:
        return rows
    _, first = np.unique(np.stack(arrays, axis=1), axis=0, return_index=True)
    return rows[np.sort(first)]


def _build(v: Resolved, fields: dict, target: float, column: str, seq_len: int,
           config=None) -> Candidate | None:
    """Typed config for a survivor, verified with `account()` (the single source of truth)."""
    if config is None:
        try:
            config = make_config(fields)
        except (ValidationError, ValueError):
            return None
    accounting = account(config, seq_len)
    error = (getattr(accounting, column) - target) / target
    return Candidate(config=config, accounting=accounting, budget_error=error, variant=v.name)


def _scalar_rows(v: Resolved, cols: dict, n: int, seq_len: int):
    """A family that solves its own shape inside each config (variable_width's widths):
    build configs point by point."""
    rows = {d: x for d, x in cols.items()}
    if v.budget.target_metric == "active_params":  # a MoE's widths then match active params
        rows.setdefault("width_match", "active_params")
    derived = _with_free(v, rows, None, ())
    configs, records = [], []
    for i in range(n):
        try:
            config = make_config(_row_fields(v, derived, i))
            configs.append(config)
            records.append(account(config, seq_len).to_dict())
        except (ValidationError, ValueError):
            configs.append(None)
            records.append(None)
    ok = np.array([c is not None for c in configs], dtype=bool)
    filler = next((r for r in records if r is not None), None)
    totals = {}
    if filler is not None:
        for name in ACCOUNTING_COLUMNS:
            totals[name] = np.array([(r or filler)[name] for r in records], dtype=float)
    else:
        totals = {name: np.zeros(n) for name in ACCOUNTING_COLUMNS}
    return derived, totals, ok, configs
