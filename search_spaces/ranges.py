"""A searched dimension's values: a YAML list, or a `Range` the space spells with its ends."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import Field, FiniteFloat, model_validator

from shapesweep.families.base import NUMERIC
from shapesweep.search_spaces.limits import MAX_VALUES
from shapesweep.search_spaces.strict import StrictModel


class Range(StrictModel):
    """`{min, max, num|step, log}`: `num` points (evenly or log-spaced) or every `step`
    (a factor when `log`), both ends included."""

    min: FiniteFloat
    max: FiniteFloat
    num: int | None = Field(default=None, gt=0)
    step: FiniteFloat | None = Field(default=None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> Range:
        if self.min > self.max:
            raise ValueError(f"min={self.min} is greater than max={self.max}")
        if (self.num is None) == (self.step is None):
            raise ValueError("give exactly one of num or step")
        if self.log and self.min <= 0:
            raise ValueError("a log range needs min > 0")
        if self.log and self.step is not None and self.step <= 1:
            raise ValueError("a log range's step is a factor and must be > 1")
        if self.count() > MAX_VALUES:
            raise ValueError(f"this range has {self.count():.4g} points; the limit is {MAX_VALUES:,}")
        return self

    def count(self) -> float:
        """How many points `values` builds (before integer rounding merges any), from the
        parameters alone: an absurd range is refused before any array exists."""
        if self.num is not None:
            return self.num
        step = self._step()
        with np.errstate(all="ignore"):
            span = (np.log(self.max / self.min) / np.log(step) if self.log
                    else (self.max - self.min) / step)
        return float(np.floor(span + 1e-9)) + 1 if np.isfinite(span) else math.inf

    def values(self, integer: bool = False) -> list[Any]:
        points: np.ndarray
        if self.num is not None:
            space = np.geomspace if self.log else np.linspace
            points = space(self.min, self.max, self.num)
        elif self.log:
            points = self.min * self._step() ** np.arange(int(self.count()))
        else:
            points = self.min + self._step() * np.arange(int(self.count()))
        if integer:
            return sorted({int(round(p)) for p in points})
        return [float(p) for p in points]

    def _step(self) -> float:
        """`step`, set whenever `num` is not (`_check`)."""
        assert self.step is not None
        return self.step


SearchValues = list[Any] | Range


def is_categorical(dim: str, values: SearchValues) -> bool:
    """Whether the solver takes this dimension's values one at a time instead of as a numpy
    column: k (the hourglass's sub-block count, a Python int in its accounting) and text or
    flag dimensions; a numeric one is a column even where it is written as a count ('1.5K')."""
    if isinstance(values, Range):
        return dim == "k"
    return dim == "k" or (dim not in NUMERIC
                          and any(isinstance(x, str | bool) or x is None for x in values))
