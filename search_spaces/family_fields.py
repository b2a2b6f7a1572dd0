"""What a family lets a space name: its fields, the derived ratios, the columns a constraint
may read, and the reference config a `match:` budget points at."""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ValidationError

from shapesweep.common import UserError
from shapesweep.families import base
from shapesweep.families.lm import has_experts
from shapesweep.search_spaces.accounting import Accounting
from shapesweep.search_spaces.configs import FAMILIES, make_config
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.variants import Resolved

DERIVED = ("ffn_ratio", "width_depth_ratio")  # d_h = ffn_ratio*d_model, d_model = ratio*n_layers


def family_fields(family: str) -> set[str]:
    return set(FAMILIES[family].model_fields) - {"family"}


def constraint_names(family: str) -> frozenset[str]:
    """The columns a constraint may name: the family's fields, the derived ratios and the
    accounting columns (the solver provides each of them)."""
    accounting = {f.name for f in dataclasses.fields(Accounting)} - {"widths"}
    return frozenset(family_fields(family) - {"widths"} | set(DERIVED) | accounting)


def moe_families() -> list[str]:
    """The families whose FFN may be a mixture of experts."""
    return [name for name in base.names() if has_experts(base.get(name).config)]


def reference_config(space: SearchSpace, v: Resolved, file: str | None = None) -> BaseModel:
    """The config a `match:` budget refers to: the variant's fixed dims overridden by match."""
    fields = {**v.fixed, "family": v.family, **(v.budget.match or {})}
    family = fields["family"]
    if family not in FAMILIES:
        raise UserError(f"unknown family {family!r}", file=file or space.source_file,
                        key="budget.match.family")
    own = family_fields(family) | {"family"}
    fields = {k: val for k, val in fields.items() if k in own}
    try:
        return make_config(fields)
    except (ValidationError, ValueError) as error:
        problem = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
        raise UserError(f"reference config is invalid: {problem}", file=file or space.source_file,
                        key="budget.match") from None
