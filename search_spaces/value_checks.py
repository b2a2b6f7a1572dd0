"""One value of a numeric dimension (fixed, searched or matched), checked against its field."""

from __future__ import annotations

import math
import sys

from shapesweep.common import UserError
from shapesweep.families import base
from shapesweep.families.base import INTEGER, NUMERIC, POSITIVE
from shapesweep.search_spaces.configs import parse_count

Bounds = tuple[float | None, float | None]  # a field's (low, high), either open


def check_value(dim: str, value: object, file: str, key: str, bounds: Bounds | None = None) -> None:
    """A numeric dimension's value is a number (or a count like '1.5K') in its field's range
    (`bounds`: the field's, where the caller has them already)."""
    if dim not in NUMERIC:
        return  # text and flags: a value no family takes is a dropped (invalid) point
    try:
        number = parse_count(value)
    except ValueError as error:
        raise UserError(str(error), file=file, key=key) from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise UserError(f"expected a number, got {value!r}", file=file, key=key)
    if isinstance(number, int) and abs(number) > sys.float_info.max:  # no float holds it
        raise UserError(f"{dim} is too large (a number of {len(str(abs(number)))} digits)",
                        file=file, key=key)
    if not math.isfinite(number):
        raise UserError(f"{dim} must be a finite number, got {value!r}", file=file, key=key)
    if dim in POSITIVE and number <= 0:
        raise UserError(f"{dim} must be positive, got {value!r}", file=file, key=key)
    if dim in INTEGER and not float(number).is_integer():
        raise UserError(f"{dim} must be a whole number, got {value!r}", file=file, key=key)
    low, high = bounds or base.bounds(dim)
    if high is not None and number > high:
        raise UserError(f"{dim} must be at most {high:,}, got {value!r}", file=file, key=key)
    if low is not None and number < low:
        raise UserError(f"{dim} must be at least {low:,}, got {value!r}", file=file, key=key)
