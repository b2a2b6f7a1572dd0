"""The checks a resolved variant passes before the solver sees it: its family, every
dimension it names, what it solves for, its rounding, constraints and reference config.
Each failure is one `UserError` at the key where the user wrote the setting."""

from __future__ import annotations

from shapesweep.common import UserError, did_you_mean
from shapesweep.families import base
from shapesweep.families.base import INTEGER, NUMERIC
from shapesweep.families.base import SOLVABLE_FIELDS as SOLVABLE
from shapesweep.search_spaces.configs import FAMILIES, MOE_FIELDS, moe_problem, parse_count
from shapesweep.search_spaces.expressions import ExpressionError, compile_expression
from shapesweep.search_spaces.family_fields import (
    DERIVED,
    constraint_names,
    family_fields,
    moe_families,
    reference_config,
)
from shapesweep.search_spaces.locations import constraint_key, written_at
from shapesweep.search_spaces.ranges import Range
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.value_checks import check_value
from shapesweep.search_spaces.variants import Resolved


def check_variant(space: SearchSpace, v: Resolved, file: str) -> None:
    if v.family not in FAMILIES:
        raise UserError(f"unknown family {v.family!r} ({did_you_mean(v.family, FAMILIES)}"
                        f"allowed: {', '.join(FAMILIES)})", file=file, key=written_at(space, v, "family"))
    allowed = family_fields(v.family) | set(DERIVED)
    if v.train.lr_base_d_model is not None and "d_model" not in allowed:
        raise UserError(f"lr_base_d_model scales lr by d_model, which the {v.family} family does "
                        "not have", file=file, key=written_at(space, v, "train", "lr_base_d_model"))
    _check_dimensions(space, v, allowed, file)
    check_experts(space, v, file)
    both = set(v.fixed) & set(v.search)
    if both and not space.variants:
        dim = sorted(both)[0]
        raise UserError(f"{dim!r} is both fixed and searched", file=file, key=f"search.{dim}")
    _check_solve(space, v, allowed, file)
    # A missing value belongs to the variant that lacks it, wherever its other values come from.
    check_complete(v, f"variants[{v.origin}].fixed" if space.variants else "fixed", file)
    _check_round_and_constraints(space, v, file)
    if v.budget.match is not None:
        reference_config(space, v, file)


def _check_dimensions(space: SearchSpace, v: Resolved, allowed: set[str], file: str) -> None:
    """Every fixed and searched dimension is the family's, and each value is valid for it."""
    for section in ("fixed", "search"):
        values = getattr(v, section)
        for dim, value in values.items():
            key = written_at(space, v, section, dim)
            if dim in MOE_FIELDS and v.family not in moe_families():
                raise UserError(f"a mixture of experts is for the {' and '.join(moe_families())} "
                                f"families, not {v.family}", file=file, key=key)
            if dim not in allowed:
                raise UserError(f"unknown dimension {dim!r} for family {v.family} "
                                f"({did_you_mean(dim, allowed)}allowed: {', '.join(sorted(allowed))})",
                                file=file, key=key)
            options = value.values(dim in INTEGER) if isinstance(value, Range) else (
                value if section == "search" else [value])
            if section == "search" and not options:
                raise UserError("empty list of values", file=file, key=key)
            bounds = base.bounds(dim) if dim in NUMERIC else (None, None)  # once per list
            for option in options:
                check_value(dim, option, file, key, bounds)


def _check_solve(space: SearchSpace, v: Resolved, allowed: set[str], file: str) -> None:
    """The free dimensions: solvable in this family, not also given, one or a known pair."""
    solve = written_at(space, v, "solve")
    for dim in v.solve:
        if dim not in SOLVABLE or dim not in allowed:
            ok = [d for d in SOLVABLE if d in allowed]
            raise UserError(f"cannot solve for {dim!r} in family {v.family} ({did_you_mean(dim, ok)}"
                            f"solvable: {', '.join(ok)})", file=file, key=solve)
        if dim in v.fixed or dim in v.search:
            raise UserError(f"{dim!r} is solved, so it cannot also be fixed or searched",
                            file=file, key=solve)
    if base.get(v.family).vector_totals is None and v.solve:
        raise UserError(f"{v.family} solves its own shape; leave solve empty",
                        file=file, key=solve)
    wide = base.get(v.family).width
    pairs = {frozenset({wide, "n_layers"}): "width_depth_ratio", frozenset({wide, "d_h"}): "ffn_ratio"}
    if len(v.solve) == 2 and frozenset(v.solve) not in pairs:
        raise UserError(f"two free dimensions must be [{wide}, n_layers] (with width_depth_ratio) "
                        f"or [{wide}, d_h] (with ffn_ratio)", file=file, key=solve)
    if len(v.solve) == 2 and "d_h" in v.solve and "ffn_ratio" not in {*v.fixed, *v.search}:
        raise UserError(f"solve {v.solve} needs ffn_ratio, fixed or searched", file=file, key=solve)
    if len(v.solve) > 2:
        raise UserError("at most two free dimensions", file=file, key=solve)


def _check_round_and_constraints(space: SearchSpace, v: Resolved, file: str) -> None:
    for dim, multiple in v.round.items():
        if multiple <= 0:
            raise UserError("a rounding multiple must be positive", file=file,
                            key=written_at(space, v, "round", dim))
    names = constraint_names(v.family)
    for i, expr in enumerate(v.constraints):
        try:
            compile_expression(expr, names)
        except ExpressionError as error:
            raise UserError(str(error), file=file, key=constraint_key(space, v, i)) from None


def check_complete(v: Resolved, key: str, file: str) -> None:
    """Every field the family requires has a value: fixed, searched, solved, or derived from a
    ratio as the solver derives it (an hourglass solving [d_model, n_layers] with no d_h
    and no ffn_ratio would otherwise fail inside the accounting)."""
    given = set(v.fixed) | set(v.search) | set(v.solve)
    wide = base.get(v.family).width
    if "width_depth_ratio" in given and given & {wide, "n_layers"}:
        given |= {wide, "n_layers"}
    if "ffn_ratio" in given and wide in given:
        given.add("d_h")
    required = [name for name, info in FAMILIES[v.family].model_fields.items() if info.is_required()]
    missing = [name for name in required if name not in given]
    if missing:
        dim = missing[0]
        solvable = dim in SOLVABLE and base.get(v.family).vector_totals is not None
        ways = "fix it, search it or solve for it" if solvable else "fix it or search it"
        ratio = {"d_h": f"ffn_ratio (with {wide})", wide: "width_depth_ratio (with n_layers)",
                 "n_layers": f"width_depth_ratio (with {wide})"}.get(dim)
        raise UserError(f"{v.family} needs a value for {dim}: {ways}"
                        + (f", or give {ratio}" if ratio else ""), file=file, key=key)


def check_experts(space: SearchSpace, v: Resolved, file: str) -> None:
    """Fixed MoE settings that no candidate could have are refused here, not dropped one by one."""
    names = ("n_experts", "n_active_experts", "activation")
    if v.family not in moe_families() or any(name in v.search for name in names):
        return
    n_experts, n_active, activation = (v.fixed.get(name, FAMILIES[v.family].model_fields[name].default)
                                       for name in names)
    problem = moe_problem(parse_count(n_experts), parse_count(n_active), activation)
    if problem:
        raise UserError(problem[1], file=file, key=written_at(space, v, "fixed", problem[0]))
