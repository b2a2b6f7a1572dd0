"""How long a trial trains, after which of its steps it evaluates, and how often it checkpoints.

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

from shapesweep.common import UserError, human
from shapesweep.families import base as families


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
    return sorted(points | at_steps(at_tokens, steps, units_per_step))


def at_steps(at_tokens: Iterable[float], steps: int, units_per_step: int) -> set[int]:
    """The first step (a count done) that reaches each of `at_tokens`: where a scheduler's
    rung is evaluated."""
    return {min(steps, max(1, math.ceil(t / units_per_step))) for t in at_tokens}


def step_tokens(train: Any, family: str) -> int:
    """Tokens (images for vision) one optimizer step trains on."""
    from shapesweep.search_spaces.configs import TrainConfig

    train = TrainConfig.model_validate(train)
    return train.batch_tokens if families.get(family).lm else train.batch_size


# A sweep trial saves a checkpoint at its first evaluation this many seconds after its last
# (`run --checkpoint-every`): a lost worker costs this much training and an evaluation
# interval at most, and a trial shorter than this pays no saves (on 2 CPU cores, a save and
# its report cost a 16-step trial 0.2 s of its 0.4 s).
CHECKPOINT_EVERY_S = 60.0

EVAL_SHARE_TARGET = 0.10  # evaluated / trained tokens a recipe should stay under


def evaluation_line(space: Any, candidates: list | None, rungs: list[float]) -> str | None:
    """What evaluation costs: evaluations per trial x eval_tokens, as a share of the tokens
    a trial trains, for the sweep's costliest recipe; says so above EVAL_SHARE_TARGET.
    Language models only (a vision trial evaluates its dataset's whole validation split);
    None when there are none, or when budgets are per candidate and the trials are not known
    yet (Optuna)."""
    if candidates is not None:
        recipes = [(space.train_for(candidate=c), c.config.family) for c in candidates]
    else:
        recipes = [(v.train, v.family) for v in space.resolved()
                   if v.train.tokens is not None or v.train.steps is not None]
    costs = []
    for train, family in recipes:
        if not families.get(family).lm:
            continue
        per_step = step_tokens(train, family)
        steps = total_steps(train, per_step)
        n = len(eval_steps(train, steps, per_step, rungs))
        costs.append((n * train.eval_tokens / (steps * per_step), n, train.eval_tokens,
                      steps * per_step))
    if not costs:
        return None
    share, n, each, trained = max(costs)
    where = "the recipe's cadence" + (f" and ASHA's {len(rungs)} rungs" if rungs else "")
    line = (f"evaluation: {n} per trial ({where}) x {human(each)} tokens = {share:.1%} of the "
            f"{human(trained)} tokens a trial trains")
    if len(set(costs)) > 1:
        line += " (the costliest recipe)"
    if share > EVAL_SHARE_TARGET:
        line += (f"; above the {EVAL_SHARE_TARGET:.0%} target: lower train.eval_tokens or raise "
                 "train.eval_every")
    return line
