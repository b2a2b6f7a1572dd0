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
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from shapesweep.common import UserError, human
from shapesweep.families import base as families
from shapesweep.search_spaces.configs import TrainConfig

if TYPE_CHECKING:  # annotations only: `--help` imports this module (CHECKPOINT_EVERY_S)
    from shapesweep.search_spaces.candidates import Candidate
    from shapesweep.search_spaces.schema import SearchSpace

Recipe = TrainConfig | Mapping[str, object]  # a recipe, or its JSON as a trial spec carries it


def total_steps(train: TrainConfig, units_per_step: int) -> int:
    """Optimizer steps of the recipe `train` (a TrainConfig), each of `units_per_step` tokens
    (images for vision)."""
    if train.steps is not None:
        return train.steps
    if train.tokens is not None:
        return max(1, math.ceil(train.tokens / units_per_step))
    raise UserError("no training budget: set train.tokens or train.steps (or --tokens/--steps)",
                    key="train.tokens")


def eval_steps(train: TrainConfig, steps: int, units_per_step: int,
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


def token_budget(train: Recipe, family: str) -> int:
    """What a trial that runs to the end has trained on (images for vision), under its
    resolved recipe `train` (a TrainConfig or its JSON)."""
    train = TrainConfig.model_validate(train)
    if train.steps:
        return int(train.steps * step_tokens(train, family))
    if train.tokens is None:
        raise UserError("no training budget: set train.tokens or train.steps (or --tokens/--steps)",
                        key="train.tokens")
    return int(train.tokens)


def sweep_budgets(space: SearchSpace, candidates: list[Candidate] | None) -> set[int] | None:
    """The token budgets the sweep's trials train: one per grid candidate's recipe; for an
    Optuna search each variant's, or None when tokens_per_param makes it per candidate."""
    if candidates is not None:
        return {token_budget(space.train_for(candidate=c), c.config.family) for c in candidates}
    variants = space.resolved()
    if any(v.train.tokens_per_param is not None and v.train.steps is None for v in variants):
        return None
    return {token_budget(v.train, v.family) for v in variants}


def step_tokens(train: Recipe, family: str) -> int:
    """Tokens (images for vision) one optimizer step trains on."""
    train = TrainConfig.model_validate(train)
    return getattr(train, families.get(family).task.batch_key)


def cooldown_steps(train: TrainConfig, steps: int) -> int:
    """Steps of the cooldown that ends a run of `steps` steps under `decay: wsd`, or of the
    cooldown branched after `steps` steps (`shapesweep.trainers.cooldown`): cooldown_frac
    of them, at least one."""
    return max(1, round(train.cooldown_frac * steps))


def cooldown_points(train: TrainConfig, evals: Iterable[int], rungs: Iterable[int], steps: int) -> set[int]:
    """The evaluations (steps done) that record `val_loss_cooled`: the rungs' or every one,
    and the last (its loss is cooled already)."""
    if train.cooldown_evals == "off":
        return set()
    chosen = rungs if train.cooldown_evals == "rungs" else evals
    return {*chosen, steps} & set(evals)


def cooldown_tokens(train: TrainConfig, cooled: Iterable[int], done: int, steps: int,
                    units_per_step: int) -> int:
    """Tokens (images) the branches at `cooled` points up to step `done` have trained: a
    count, not a tally, so a trial resumed from a checkpoint reports the same."""
    return sum(cooldown_steps(train, p) for p in cooled if p <= done and p < steps) * units_per_step



EVAL_SHARE_TARGET = 0.10  # evaluated / trained tokens a recipe should stay under


def evaluation_line(space: SearchSpace, candidates: list[Candidate] | None, rungs: list[float]) -> str | None:
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
        if not families.get(family).task.reads_tokens:
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


def cooldown_line(space: SearchSpace, candidates: list[Candidate] | None, rungs: list[float]) -> str | None:
    """What cooldown evaluations cost: the tokens their branches train, as a share of the
    tokens a trial trains, for the sweep's costliest recipe; None when no trial branches
    one (cooldowns off, or `rungs` with no scheduler rungs)."""
    recipes = ([(space.train_for(candidate=c), c.config.family) for c in candidates]
               if candidates is not None else [(v.train, v.family) for v in space.resolved()])
    costs = []
    for train, family in recipes:
        if train.cooldown_evals == "off" or (train.tokens is None and train.steps is None):
            continue
        per_step = step_tokens(train, family)
        steps = total_steps(train, per_step)
        evals = eval_steps(train, steps, per_step, rungs)
        points = cooldown_points(train, evals, at_steps(rungs, steps, per_step), steps) - {steps}
        if points:
            cost = cooldown_tokens(train, points, steps, steps, per_step)
            costs.append((cost / (steps * per_step), len(points), train.cooldown_evals))
    if not costs:
        return None
    share, n, where = max(costs)
    at = "at each of ASHA's rungs" if where == "rungs" else "at every evaluation"
    return (f"cooldown evaluations: {n} per trial ({at}), each cooldown_frac x the steps so far: "
            f"+{share:.1%} tokens on top of a trial's training")
