"""Which scheduler a sweep runs, and why; where ASHA's rungs fall; the noise-aware rule.

`--scheduler auto` (the default) runs FIFO, every trial to its whole budget. It would run the
noise-aware ASHA (`shapesweep.sweep.search.paired_asha`, which judges each candidate on its seed
mean and stops it only when it is worse than the rung's cut with 95% confidence, `decide`)
where early stopping can pay, once shown to be trusted: a grid of at least
ASHA_MIN_CANDIDATES candidates, 2 or more seeds, one token budget, and cooldown evaluations
at the rungs (`decay: wsd`). No committed study shows it (the early-ranking checks' stores
were lost: docs/scheduling.md), so `auto` runs it for no grid (AUTO_RUNS_ASHA), the
conservative choice.
`--scheduler fifo` and `--scheduler asha` choose directly. An Optuna search runs one seed
per point, so there `asha` is Ray's own ASHA, trial by trial.

Ray-free, so `plan` says the same line `run` does without importing Ray.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from shapesweep.common import UserError, human
from shapesweep.search_spaces.cadence import step_tokens, sweep_budgets
from shapesweep.sweep.search.flag_values import SCHEDULERS  # --scheduler's choices

if TYPE_CHECKING:  # types only: this module is imported for --help, the space's YAML reader is not
    from shapesweep.search_spaces.solver import Candidate
    from shapesweep.search_spaces.space import SearchSpace

# Below this many candidates (key x tuned values) `auto` runs FIFO: ASHA keeps the top third
# at each rung, so with 9 candidates its two rungs can go 9 -> 3 -> 1; with fewer it has a
# handful to stop at best, while every trial pays its rung cooldowns (~10% more tokens) and
# waits at each rung for its seeds.
ASHA_MIN_CANDIDATES = 9
ASHA_MIN_STEPS, ASHA_MIN_FRACTION = 100, 1 / 8  # a loss after a few steps ranks nothing
# Whether `auto` runs the noise-aware ASHA where the rules above allow it. Off: FIFO stops no
# trial, so no verdict rests on a stop, and no committed study shows ASHA safe
# (docs/scheduling.md: the early-ranking checks' outcome is withdrawn, their stores lost).
AUTO_RUNS_ASHA = False
EVIDENCE = ("the conservative default: no committed study shows the noise-aware ASHA safe, "
            "docs/scheduling.md")
CONFIDENCE = 0.95
C = TypeVar("C", bound=Hashable)  # how a scheduler names a candidate (paired_asha: (key, tuned_json))


@dataclass
class Choice:
    """The scheduler a sweep runs: `fifo` or `asha` (noise-aware per candidate, or Ray's
    per trial when `per_trial`), the rungs where ASHA decides (tokens) and the line that
    says which and why."""
    kind: str
    line: str
    per_trial: bool = False
    rungs: list[float] = field(default_factory=list)
    budget: int | None = None


def asha_grace(budget: int, per_step: int) -> int:
    """ASHA's default grace period: at least ASHA_MIN_STEPS optimizer steps (of `per_step`
    tokens) and ASHA_MIN_FRACTION of the budget, at most half of it (a rung to stop at)."""
    return max(1, min(max(int(budget * ASHA_MIN_FRACTION), ASHA_MIN_STEPS * per_step), budget // 2))


def rung_tokens(grace: float, reduction_factor: float, max_t: float) -> list[float]:
    """The token counts at which a one-bracket ASHA compares trials, so a trial evaluates
    exactly where a decision is made: grace_period x reduction_factor^i, as many as Ray's
    ASHAScheduler fits below max_t (its rule, rounding included)."""
    import numpy as np

    count = int(np.log(max_t / grace) / np.log(reduction_factor) + 1)
    return [grace * reduction_factor**i for i in range(count)]


def cooled_rungs(space: SearchSpace, candidates: list[Candidate] | None) -> bool:
    """Whether every trial of the sweep branches a cooldown at its rungs (`decay: wsd` with
    cooldown_evals `rungs` or `all`)."""
    recipes = ([space.train_for(candidate=c) for c in candidates] if candidates is not None
               else [v.train for v in space.resolved()])
    return bool(recipes) and all(train.cooldown_evals != "off" for train in recipes)


def choose(requested: str, space: SearchSpace, candidates: list[Candidate] | None, seeds: list[int],
           grace_tokens: int | None = None, reduction_factor: float = 3.0,
           workers_per_trial: int = 1, max_concurrent: int | None = None) -> Choice:
    """The scheduler `--scheduler requested` means for this sweep (`candidates`: the grid's,
    None for an Optuna search); raises UserError for an ASHA that cannot run."""
    if requested not in SCHEDULERS:
        raise UserError(f"unknown scheduler {requested!r} ({', '.join(SCHEDULERS)})", key="--scheduler")
    if requested == "fifo":
        return Choice("fifo", "scheduler: FIFO (--scheduler fifo): every trial trains its whole budget")
    budgets = sweep_budgets(space, candidates)
    n = None if candidates is None else len(candidates) * len(space.tuned_settings())
    cooled = cooled_rungs(space, candidates)
    if not reduction_factor > 1:  # ASHA's settings are checked whichever `auto` picks
        raise UserError("must be more than 1", key="--reduction-factor")
    if grace_tokens and budgets and grace_tokens >= max(budgets):
        raise UserError(f"grace period {grace_tokens} tokens is not below the trial budget "
                        f"{max(budgets)}", key="--grace-tokens")
    if candidates is not None and space.choice_seeds:  # measure trials are planned as choices end
        if requested == "auto":
            return Choice("fifo", "scheduler: FIFO, every trial to its whole budget (tune.choice_seeds: "
                                  "a candidate's measure trials start once its choice is made; "
                                  "the noise-aware ASHA needs every trial up front)")
        raise UserError("the noise-aware ASHA needs every candidate's trials up front; with "
                        "tune.choice_seeds a candidate's measure trials start once its choice is "
                        "made: use --scheduler fifo", key="--scheduler")
    if requested == "auto":
        why = _fifo_reason(budgets, n, len(seeds), cooled, workers_per_trial, max_concurrent)
        if why:
            return Choice("fifo", f"scheduler: FIFO, every trial to its whole budget ({why}; "
                                  "--scheduler asha overrides)")
    if budgets is None or len(budgets) != 1:
        many = "per-candidate" if budgets is None else f"{len(budgets)} different"
        raise UserError(f"ASHA compares trials at one token budget; this space's trials train "
                        f"{many} budgets (per-variant recipes or tokens_per_param): use "
                        "--scheduler fifo", key="--scheduler")
    (budget,) = budgets
    per_step = min((step_tokens(v.train, v.family) for v in space.resolved()), default=1)
    grace = grace_tokens or asha_grace(budget, per_step)  # below the budget (checked above)
    rungs = rung_tokens(grace, reduction_factor, budget)
    if candidates is not None:  # a rung at the budget is the trial's end: nothing to save
        rungs = [r for r in rungs if r < budget]
    at = ", ".join(f"{human(r)} tokens ({r / budget:.0%})" for r in rungs)
    if candidates is None:
        return Choice("asha", f"scheduler: ASHA per trial (an Optuna search runs one seed per "
                      f"point), deciding at {at} of the {human(budget)}-token budget "
                      "(--grace-tokens sets the first)", True, rungs, budget)
    if len(seeds) < 2:
        raise UserError("the noise-aware ASHA judges each candidate on its seed mean, paired by "
                        "seed, so it needs 2 or more seeds: give --seeds 2 or more, or "
                        "--scheduler fifo", key="--scheduler")
    if max_concurrent and max_concurrent < len(seeds):
        raise UserError(f"the noise-aware ASHA pauses a trial at each rung until its {len(seeds)} "
                        f"seeds arrive, and a paused trial holds one of the {max_concurrent} "
                        "concurrent places: give --max-concurrent at least the seeds, or "
                        "--scheduler fifo", key="--max-concurrent")
    if workers_per_trial > 1:
        raise UserError("the noise-aware ASHA pauses a trial at each rung until its seeds "
                        "arrive, which a data-parallel trial (--workers-per-trial > 1) cannot "
                        "do: use --scheduler fifo", key="--scheduler")
    why = "--scheduler asha" if requested == "asha" else \
        f"{n} candidates x {len(seeds)} seeds, cooldown rungs"
    loss = "cooled loss" if cooled else "loss (no cooldown rungs: train.decay wsd adds them)"
    return Choice("asha", f"scheduler: noise-aware ASHA ({why}): each candidate's {len(seeds)}-"
                  f"seed mean {loss} at {at} of the {human(budget)}-token budget; stopped, all "
                  f"seeds, only when worse than the top 1/{reduction_factor:g} with "
                  f"{CONFIDENCE:.0%} confidence; the baseline never", False, rungs, budget)


def _fifo_reason(budgets: set[int] | None, n: int | None, n_seeds: int, cooled: bool,
                 workers_per_trial: int, max_concurrent: int | None = None) -> str | None:
    """Why `auto` runs FIFO, or None when the noise-aware ASHA can pay and is trusted
    (AUTO_RUNS_ASHA)."""
    if n is None:
        return "an Optuna search runs one seed per point: no seed mean to judge on"
    if n_seeds < 2:
        return "one seed: no seed mean to judge on"
    if budgets is None or len(budgets) != 1:
        return "the trials train different budgets"
    if workers_per_trial > 1:
        return "data-parallel trials cannot pause at a rung"
    if max_concurrent and max_concurrent < n_seeds:
        return (f"--max-concurrent {max_concurrent} is below the {n_seeds} seeds a candidate's "
                "rung waits for")
    if not cooled:
        return "no cooldown rungs: set train.decay wsd, else a rung's loss, taken at a high lr, " \
               "says little about the final one"
    if n < ASHA_MIN_CANDIDATES:
        return (f"{n} candidates, fewer than {ASHA_MIN_CANDIDATES}: ASHA's cuts would save too "
                "little to pay for the rung cooldowns and the waits for seeds")
    return None if AUTO_RUNS_ASHA else EVIDENCE


@dataclass
class Verdict(Generic[C]):
    """The noise-aware decision on one candidate at one rung."""
    stop: bool
    cut: C | None = None  # the candidate at ASHA's cut it was compared with, if any
    delta: float | None = None  # its mean paired difference to the cut (loss)
    ci_low: float | None = None
    ci_high: float | None = None


def rung_cut(means: Mapping[C, float], reduction_factor: float) -> tuple[C, list[C]]:
    """The rung's cut (by seed mean, the candidate at rank ceil(n / reduction_factor): the
    last one ASHA would keep) and the candidates ranked below it, best first."""
    ranked = sorted(means, key=means.__getitem__)
    keep = math.ceil(len(ranked) / reduction_factor)
    return ranked[keep - 1], ranked[keep:]


def decide(losses: Mapping[C, Mapping[int, float]], candidate: C, reduction_factor: float,
           protected: bool = False) -> Verdict[C]:
    """Stop `candidate` at a rung? `losses`: the rung loss of every seed of every candidate
    judged at this rung so far, `candidate`'s included (lower is better). Ranked by seed
    mean, the cut is the candidate at rank ceil(n / reduction_factor), the last one ASHA
    would keep; a candidate below it is stopped only when its paired difference to the
    cut's seeds (a 95% t-interval) lies above zero. `protected` (the baseline): never."""
    import numpy as np
    import pandas as pd

    from shapesweep.results.stats import paired_difference

    means = {c: float(np.mean(list(seeds.values()))) for c, seeds in losses.items() if seeds}
    cut, below = rung_cut(means, reduction_factor)
    if protected or candidate not in below:
        return Verdict(False)
    diff = paired_difference(pd.Series(losses[candidate]), pd.Series(losses[cut]),
                             confidence=CONFIDENCE)
    return Verdict(diff["verdict"] == "worse", cut, diff["delta"], diff["ci_low"], diff["ci_high"])
