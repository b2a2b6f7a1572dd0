"""Measure seeds: a fixed list (every candidate runs each), or an adaptive range
`{min, max}` (issue 58: more seeds only where a comparison is still open).

The range is parsed and checked here; the driver runs it in rounds (shapesweep.sweep.driver.rounds),
and a reader that needs the seeds as a list asks `fixed_seed_list`, which refuses a range in
one line.
"""

from __future__ import annotations

import re

from pydantic import ValidationError, field_validator, model_validator

from shapesweep.common import UserError
from shapesweep.search_spaces.configs import MAX_SEED
from shapesweep.search_spaces.limits import MAX_SEEDS
from shapesweep.search_spaces.strict import StrictModel

MIN_ADAPTIVE = 2  # a comparison's interval needs two seeds of each side
NOT_YET_RUN = "run by the driver"


class AdaptiveSeeds(StrictModel):
    """`seeds: {min: 2, max: 8}`: every candidate starts on seeds 0..min-1 and may get more,
    up to seeds 0..max-1, while its comparison with the baseline is open."""

    min: int
    max: int

    @field_validator("min", "max", mode="before")
    @classmethod
    def _whole(cls, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number of seeds, got {value!r}")
        return value

    @field_validator("min")
    @classmethod
    def _at_least_two(cls, value: int) -> int:
        if value < MIN_ADAPTIVE:
            raise ValueError(f"adaptive seeds start at {MIN_ADAPTIVE} or more (an interval "
                             f"needs two seeds), got {value}")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveSeeds:
        if self.max < self.min:
            raise ValueError(f"max={self.max} is less than min={self.min}")
        if self.max > MAX_SEEDS:
            raise ValueError(f"max={self.max} is more than {MAX_SEEDS} seeds")
        return self

    def pool(self) -> list[int]:
        """Every seed the range may run, in the order it would add them."""
        return list(range(self.max))


MeasureSeeds = list[int] | AdaptiveSeeds
# `run --seeds` as sweep.json keeps it: a list, or an adaptive range as {"min": a, "max": b}
SeedsOption = list[int] | dict[str, int]


def options_seeds(given: SeedsOption | None) -> MeasureSeeds | None:
    """`run --seeds` (or a saved sweep.json's) as measure seeds; None when not given."""
    if isinstance(given, dict):
        try:
            return AdaptiveSeeds.model_validate(given)
        except ValidationError as error:
            raise UserError(error.errors()[0]["msg"].removeprefix("Value error, "), key="--seeds") from None
    return given


def option_value(seeds: MeasureSeeds) -> SeedsOption:
    """Measure seeds as `--seeds` keeps them (the inverse of `options_seeds`)."""
    return {"min": seeds.min, "max": seeds.max} if isinstance(seeds, AdaptiveSeeds) else seeds


def seed_pool(seeds: MeasureSeeds) -> list[int]:
    """The seeds a candidate may be measured on: the list, or every seed of the range."""
    return seeds.pool() if isinstance(seeds, AdaptiveSeeds) else list(seeds)


def seed_budget(seeds: MeasureSeeds) -> int:
    """The most measure seeds a candidate runs (a range's max): what trial limits count."""
    return seeds.max if isinstance(seeds, AdaptiveSeeds) else len(seeds)


def fixed_seed_list(seeds: MeasureSeeds, file: str | None = None, key: str = "seeds",
                    use: str = NOT_YET_RUN) -> list[int]:
    """The seeds as a list, for code that runs a fixed design; a range is refused in one line."""
    if isinstance(seeds, AdaptiveSeeds):
        raise UserError(f"adaptive seeds are parsed but not yet {use}", file=file, key=key)
    return seeds


def check_seeds(seeds: list[int]) -> None:
    """1 to MAX_SEEDS seeds, each in [0, 2**32), none twice (each seed is one more trial)."""
    if not seeds:
        raise ValueError("give at least one seed")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"more than {MAX_SEEDS} seeds")
    bad = [s for s in seeds if not 0 <= s < MAX_SEED]
    if bad:
        raise ValueError(f"seeds must be whole numbers in [0, 2**{MAX_SEED.bit_length() - 1}), "
                         f"got {bad[0]}")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ValueError(f"seed {twice[0]} is given twice")


def check_seeds_option(seeds: list[int], key: str = "--seeds") -> list[int]:
    """`check_seeds` for seeds given on the command line (or saved with a sweep): one line."""
    try:
        check_seeds(seeds)
    except ValueError as error:
        raise UserError(str(error), key=key) from None
    return seeds


def check_disjoint_seeds(choice: list[int], measure: list[int], file: str | None = None,
                         key: str = "tune.choice_seeds") -> None:
    """The seeds that choose a tuned value never measure it."""
    both = sorted(set(choice) & set(measure))
    if both:
        raise UserError(f"seed {both[0]} would both choose the tuned values and measure them: "
                        "choice seeds and seeds must be disjoint", file=file, key=key)


_RANGE_PART = re.compile(r"\s*(min|max)\s*=\s*(\S*)\s*")
_SEED_SPAN = re.compile(r"\s*([+-]?\d+)\s*(?:-\s*(\d+)\s*)?")  # a seed, or an inclusive a-b


def parse_measure_seeds(text: str, key: str = "--seeds") -> MeasureSeeds:
    """A command line's measure seeds: `N` (seeds 0..N-1), a list of seeds and inclusive
    ranges `0,3,7` / `0-2` / `0-2,5`, or an adaptive range `min=2,max=8`; each checked as a
    space's `seeds:` is, one line naming `key` when bad."""
    parts = text.split(",")
    if any(_RANGE_PART.fullmatch(part) for part in parts):
        return _parse_range(parts, text, key)
    if len(parts) == 1 and re.fullmatch(r"\s*[+-]?\d+\s*", text):  # a count
        count = int(text)
        if count < 1:
            raise UserError(f"{text.strip()} is a count of seeds (N means seeds 0..N-1): give at "
                            "least 1, or name seeds as 0,3,7 or 0-2 (seed 0 alone: 0-0)", key=key)
        return check_seeds_option(list(range(min(count, MAX_SEEDS + 1))), key)
    seeds: list[int] = []
    for part in parts:
        span = _SEED_SPAN.fullmatch(part)
        if span is None:
            raise UserError(f"cannot read {text!r} as a seed count N, a list like 0,3,7, a range "
                            "like 0-2 or min=A,max=B", key=key)
        low, high = int(span[1]), int(span[2] if span[2] is not None else span[1])
        if high < low:
            raise UserError(f"the range {part.strip()} ends before it starts", key=key)
        seeds.extend(range(low, min(high, low + MAX_SEEDS) + 1))
    return check_seeds_option(seeds, key)


def _parse_range(parts: list[str], text: str, key: str) -> AdaptiveSeeds:
    found: dict[str, str] = {}
    for part in parts:
        match = _RANGE_PART.fullmatch(part)
        if match is None or match[1] in found:
            raise UserError(f"cannot read {text!r} as an adaptive range: give min=A,max=B", key=key)
        found[match[1]] = match[2]
    if set(found) != {"min", "max"}:
        raise UserError(f"an adaptive range needs both min= and max=, got {text!r}", key=key)
    try:
        values = {name: int(value) for name, value in found.items()}
    except ValueError:
        bad = next(v for v in found.values() if not re.fullmatch(r"[+-]?\d+", v))
        raise UserError(f"expected a whole number of seeds, got {bad!r}", key=key) from None
    try:
        return AdaptiveSeeds.model_validate(values)
    except ValidationError as error:
        problem = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise UserError(problem, key=key) from None
