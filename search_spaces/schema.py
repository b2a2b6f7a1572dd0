"""`SearchSpace`: the validated model of one space file, and what a sweep reads off it
(its variants resolved, its tuned combinations, each trial's recipe)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from shapesweep.families import base
from shapesweep.search_spaces.budget import Budget
from shapesweep.search_spaces.configs import TrainConfig
from shapesweep.search_spaces.ranges import SearchValues
from shapesweep.search_spaces.recipe_merge import TrainKeys, overlay
from shapesweep.search_spaces.seeds import (
    NOT_YET_RUN,
    AdaptiveSeeds,
    MeasureSeeds,
    check_seeds,
    fixed_seed_list,
    seed_budget,
)
from shapesweep.search_spaces.strict import StrictModel
from shapesweep.search_spaces.tuning import CHOICE_SEEDS
from shapesweep.search_spaces.variants import Resolved, Variant, resolve_variants

if TYPE_CHECKING:
    from shapesweep.search_spaces.candidates import Candidate

BASELINE_VARIANT = "baseline"  # the variant `status` and the report compare the others with

# The fields `SearchSpace.resolved` reads.
RESOLVED_FROM = ("family", "budget", "fixed", "search", "solve", "round", "constraints",
                 "variants", "train")


class SearchSpace(StrictModel):
    name: str
    family: str | list[str] | None = None
    description: str = ""
    budget: Budget
    fixed: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, SearchValues] = Field(default_factory=dict)
    solve: str | list[str] = Field(default_factory=list)
    round: dict[str, int] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)
    variants: list[Variant] | None = None
    train: TrainConfig = Field(default_factory=TrainConfig)
    tune: dict[str, list[Any]] = Field(default_factory=dict)  # train key -> values, each tried
    # a list: every candidate runs each seed; {min, max}: adaptive (parsed, not yet run)
    seeds: list[int] | AdaptiveSeeds = Field(default_factory=lambda: [0])

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: MeasureSeeds) -> MeasureSeeds:
        if isinstance(seeds, list):
            check_seeds(seeds)
        return seeds

    @model_validator(mode="after")
    def _fill_family(self) -> SearchSpace:
        """`family` always says what the space holds, even when only the variants name it."""
        if self.family is None:
            named = [v.family for v in self.variants or [] if v.family is not None]
            if not named or len(named) < len(self.variants or [None]):
                raise ValueError(f"give family ({' | '.join(base.names())}), here or in every variant")
            flat = list(dict.fromkeys(f for x in named for f in (x if isinstance(x, list) else [x])))
            object.__setattr__(self, "family", flat[0] if len(flat) == 1 else flat)
        return self

    _source_text: str = PrivateAttr(default="")
    _source_file: str = PrivateAttr(default="")
    # ids of RESOLVED_FROM, resolved(), name -> variant: made by _resolved_once()
    _resolved: tuple[tuple[int, ...], list[Resolved], dict[str, Resolved]] | None = PrivateAttr(default=None)
    _choice_seeds: list[int] = PrivateAttr(default_factory=list)  # `tune.choice_seeds`

    @property
    def choice_seeds(self) -> list[int]:
        """The seeds that choose each candidate's tuned values (`tune.choice_seeds`), apart
        from the `seeds` that measure them; empty when both are the same seeds."""
        return self._choice_seeds

    def fixed_seeds(self, use: str = NOT_YET_RUN) -> list[int]:
        """The measure seeds as a list; an adaptive range is refused in one line (`use`:
        what cannot take one yet, e.g. "run by the driver")."""
        return fixed_seed_list(self.seeds, file=self.source_file, key="seeds", use=use)

    @property
    def source_text(self) -> str:
        return self._source_text

    @property
    def source_file(self) -> str:
        return self._source_file

    @property
    def space_hash(self) -> str:
        """A 12-hex hash of the parsed space (YAML formatting and comments do not change it)."""
        dumped = self.model_dump(mode="json")
        if self.choice_seeds:  # kept out of `tune` once parsed (`check_tune`)
            dumped["tune"] = {**dumped["tune"], CHOICE_SEEDS: self.choice_seeds}
        payload = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(v.family for v in self.resolved()))

    @property
    def tuned_count(self) -> int:
        """How many `tune:` combinations there are (1 when nothing is tuned), building none."""
        return math.prod(len(values) for name, values in self.tune.items() if name != CHOICE_SEEDS)

    def trials_per_candidate(self, seeds: list[int] | None = None) -> int:
        """Trials one candidate costs: every tuned combination on each choice seed, then the
        chosen one on each measure seed (`seeds`, default the space's; a range counts its
        max); without choice seeds every combination on every seed."""
        measure, tuned = len(seeds) if seeds else seed_budget(self.seeds), self.tuned_count
        return tuned * len(self.choice_seeds) + measure if self.choice_seeds else tuned * measure

    def tuned_settings(self) -> list[TrainKeys]:
        """Every combination of the `tune:` values (one empty one when nothing is tuned)."""
        return [dict(zip(self.tune, combo, strict=True))
                for combo in itertools.product(*self.tune.values())]

    def train_for(self, tuned: TrainKeys | None = None, seed: int | None = None,
                  candidate: Candidate | None = None) -> TrainConfig:
        """The recipe a trial runs: the candidate's variant's `train:` (else the space's), one
        tuned combination and a seed applied, and tokens_per_param and lr_base_d_model
        resolved for the candidate (`TrainConfig.for_model`; validated)."""
        recipe = self.train
        if candidate is not None:
            recipe = self._resolved_once()[1][candidate.variant].train
        fields = overlay(recipe, tuned) | ({} if seed is None else {"seed": seed})
        train = TrainConfig.model_validate(fields)
        if candidate is None:
            return train
        return train.for_model(candidate.config, candidate.accounting.params_total)

    def resolved(self) -> list[Resolved]:
        """The space as a list of single-family variants (a family list expands to one each),
        made once: every trial's recipe is read from it (`train_for`)."""
        return list(self._resolved_once()[0])

    def _resolved_once(self) -> tuple[list[Resolved], dict[str, Resolved]]:
        """(resolved(), name -> variant), made on first use (and again for a model_copy)."""
        fields = tuple(id(getattr(self, name)) for name in RESOLVED_FROM)
        if self._resolved is None or self._resolved[0] != fields:
            variants = resolve_variants(self)
            self._resolved = (fields, variants, {v.name: v for v in variants})
        return self._resolved[1], self._resolved[2]
