"""A space's `variants:` and what each becomes once the space's settings are inherited:
one `Resolved` per family, the unit the checks and the solver work on."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from shapesweep.families import base
from shapesweep.families.base import INTEGER, MAX_DEPTH
from shapesweep.search_spaces.budget import Budget
from shapesweep.search_spaces.configs import TrainConfig, parse_count
from shapesweep.search_spaces.ranges import Range, SearchValues, is_categorical
from shapesweep.search_spaces.recipe_merge import TrainKeys, merge_train
from shapesweep.search_spaces.strict import StrictModel

if TYPE_CHECKING:
    from shapesweep.search_spaces.schema import SearchSpace


class Variant(StrictModel):
    """One family's slice of a space; unset parts inherit from the space."""

    name: str | None = None
    family: str | list[str] | None = None
    budget: Budget | None = None
    fixed: dict[str, Any] | None = None
    search: dict[str, SearchValues] | None = None
    solve: str | list[str] | None = None
    round: dict[str, int] | None = None
    constraints: list[str] | None = None
    train: TrainKeys | None = None  # merged key by key over the space's train:


class Resolved(BaseModel):
    """A variant with everything inherited filled in: what the solver works on."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    index: int
    origin: int  # the entry of the space's `variants:` it comes from (0 without variants)
    name: str
    family: str
    budget: Budget
    fixed: dict[str, Any]
    search: dict[str, SearchValues]
    solve: list[str]
    round: dict[str, int]
    constraints: list[str]
    train: TrainConfig  # the space's train: with the variant's own keys over it

    def grid_values(self) -> dict[str, list[Any]]:
        """Each searched dimension's values (ranges expanded)."""
        out = {}
        for dim, values in self.search.items():
            out[dim] = values.values(dim in INTEGER) if isinstance(values, Range) else list(values)
        return out

    @property
    def raw_size(self) -> int:
        return math.prod(len(v) for v in self.grid_values().values())

    @property
    def raw_bound(self) -> float:
        """At least `raw_size`, from list lengths and range parameters, building nothing."""
        return math.prod(v.count() if isinstance(v, Range) else len(v) for v in self.search.values())

    @property
    def combo_bound(self) -> float:
        """How many combinations of categorical values the solver loops over (building nothing)."""
        return math.prod(v.count() if isinstance(v, Range) else len(v)
                         for dim, v in self.search.items() if is_categorical(dim, v))

    @property
    def layer_solves(self) -> float:
        """Raw points x depth where the family solves each config's shape itself (its cost),
        else 0; the depth at most MAX_DEPTH (a deeper value is refused on its own)."""
        spec = base.find(self.family)  # an unknown family is refused on its own
        if spec is None or spec.vector_totals is not None:
            return 0
        depths = self._numbers("n_layers")
        if not depths:  # derived: the widest width over the smallest width/depth ratio
            widths, ratios = self._numbers(spec.width), self._numbers("width_depth_ratio")
            depths = [max(widths) / min(ratios)] if widths and ratios else [MAX_DEPTH]
        return self.raw_bound * min(max(depths), MAX_DEPTH)

    def _numbers(self, dim: str) -> list[float]:
        """The positive numbers among `dim`'s fixed value, searched list or range ends."""
        values = self.search.get(dim, self.fixed.get(dim))
        if isinstance(values, Range):
            return [values.min, values.max]
        numbers = []
        for value in values if isinstance(values, list) else [values]:
            try:
                number = parse_count(value)
            except ValueError:
                continue
            if isinstance(number, int | float) and not isinstance(number, bool) and 0 < number < math.inf:
                numbers.append(number)
        return numbers


def resolve_variants(space: SearchSpace) -> list[Resolved]:
    """The space as a list of single-family variants (a family list expands to one each)."""
    out: list[Resolved] = []
    for origin, variant in enumerate(space.variants or [Variant()]):
        family = variant.family or space.family
        families = family if isinstance(family, list) else [family]
        for fam in families:
            assert fam is not None  # SearchSpace._fill_family names one for every variant
            out.append(_resolve_one(space, variant, origin, fam, len(out), len(families) > 1))
    return out


def _resolve_one(space: SearchSpace, variant: Variant, origin: int, family: str, index: int,
                 several: bool) -> Resolved:
    """One family of one variant, the space's settings under the variant's own."""
    solve = variant.solve if variant.solve is not None else space.solve
    name = variant.name or family
    if several and variant.name:
        name = f"{variant.name}-{family}"
    own_fixed, own_search = variant.fixed or {}, variant.search or {}
    fixed = {k: x for k, x in space.fixed.items() if k not in own_search} | own_fixed
    search = {k: x for k, x in space.search.items() if k not in own_fixed} | own_search
    return Resolved(
        index=index, origin=origin, name=name, family=family, budget=variant.budget or space.budget,
        fixed=fixed, search=search,
        solve=[solve] if isinstance(solve, str) else list(solve),
        round={**space.round, **(variant.round or {})},
        constraints=[*space.constraints, *(variant.constraints or [])],
        train=merge_train(space.train, variant.train),
    )
