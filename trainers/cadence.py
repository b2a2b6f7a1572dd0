"""How long a trial trains, and after which of its steps it evaluates.

A trial evaluates every `eval_every` steps (by default a tenth of the run), after its last
step, and after the first step that reaches each of `at_tokens`: ASHA's rungs, so the
scheduler decides on a loss measured there rather than one left from an earlier interval.
When the interval is 10 steps or more it also takes one early look, a fifth of the way to
the first interval: a sweep shows its first loss within seconds rather than a minute, and
the rank-fidelity curve starts where short trials would stop.
Torch-free, so the sweep driver counts a sweep's evaluations (and states their cost)
before it starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from shapesweep.common import UserError


def total_steps(train: Any, units_per_step: int) -> int:
    """Optimizer steps of the recipe `train` (a TrainConfig), each of `units_per_step` tokens
    (images for vision)."""
    if train.steps is not None:
        return train.steps
    if train.tokens is not None:
        return max(1, math.ceil(train.tokens / units_per_step))
    raise UserError("no training budget: set train.tokens or train.steps (or --tokens/--steps)",
                    key="train.tokens")


def eval_steps(train: Any, steps: int, units_per_step: int,
               at_tokens: Iterable[float] = ()) -> list[int]:
    """The steps (1-based counts done) after which a run of `steps` steps evaluates, ascending."""
    every = train.eval_every or max(1, steps // 10)
    points = {*range(every, steps + 1, every), steps}
    if every >= 10:
        points.add(min(steps, every // 5))
    points |= {min(steps, max(1, math.ceil(t / units_per_step))) for t in at_tokens}
    return sorted(points)
