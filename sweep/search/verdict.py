"""Whether a sweep's measure seeds can end in a verdict, said before it runs.

A sweep that compares candidates with a baseline (its space has a variant named
`baseline`, searched as a grid) needs at least 2 measure seeds for a paired interval; where
the user states the effect they expect (`--min-effect` nats, with the seed spread of a paired
difference `--seed-sd`), as many as `shapesweep.results.stats.seeds_for_power` says a paired
t-test at the Bonferroni level (Holm's first step) needs for 80% power. `plan` says so with
the price of the seeds that would; `run` refuses such a sweep unless given `--no-verdict`.
A search without a baseline (Optuna, one seed a point) is no comparison: nothing to say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shapesweep.common import UserError
from shapesweep.sweep.search.flag_values import DEFAULT_SEED_SD, NO_VERDICT_FLAG


class Given(Protocol):
    """What the verdict reads of `plan`'s flags (sweep/cli/verb_table.PlanArgs) or of the
    options `run` checks (sweep_options.SweepOptions, which also has `no_verdict`)."""

    @property
    def min_effect(self) -> float | None: ...  # --min-effect
    @property
    def seed_sd(self) -> float | None: ...  # --seed-sd


@dataclass(frozen=True)
class SeedVerdict:
    compares: bool  # the sweep compares candidates with a baseline
    measure: int  # its measure seeds
    needed: int  # the measure seeds a verdict needs
    why: str  # how `needed` was found

    @property
    def gives_verdict(self) -> bool:
        return not self.compares or self.measure >= self.needed


def seed_verdict(space, measure: int, candidates: int, search: str,
                 args: Given) -> SeedVerdict:
    """What the sweep's `measure` seeds give (`candidates` solved; `search` grid or optuna)."""
    from shapesweep.search_spaces.space import BASELINE_VARIANT

    effect, sd = getattr(args, "min_effect", None), getattr(args, "seed_sd", None)
    if effect is not None and not effect > 0:
        raise UserError(f"must be above 0 nats (got {effect:g})", key="--min-effect")
    if sd is not None and not sd > 0:
        raise UserError(f"must be above 0 nats (got {sd:g})", key="--seed-sd")
    if sd is not None and effect is None:
        raise UserError("is the spread --min-effect is judged against: give --min-effect too",
                        key="--seed-sd")
    compares = search == "grid" and any(v.name == BASELINE_VARIANT for v in space.resolved())
    if not compares or effect is None:
        return SeedVerdict(compares, measure, 2, "for a paired interval")
    from shapesweep.results.stats import CONFIDENCE, seeds_for_power

    sd = sd or DEFAULT_SEED_SD
    comparisons = max(1, candidates - 1)
    level = (1 - CONFIDENCE) / comparisons
    needed = seeds_for_power(effect, sd, confidence=1 - level)
    n = int(needed) if needed == needed else 10**6
    return SeedVerdict(True, measure, max(2, n),
                       f"for 80% power at {effect:g} nats at a seed sd of {sd:g}"
                       f"{'' if getattr(args, 'seed_sd', None) else ' (the default)'}, "
                       f"{comparisons} comparisons at level {level:.2g} (Holm's first step)")


def verdict_line(verdict: SeedVerdict, cost_now: str, cost_needed: str | None) -> str | None:
    """One line for `plan`: whether the seeds give a verdict, and what the ones that would cost."""
    if not verdict.compares:
        return None
    if verdict.gives_verdict:
        return (f"verdict: {verdict.measure} measure seeds give one (at least {verdict.needed} "
                f"{verdict.why})")
    return (f"verdict: none - {verdict.measure} measure seed{'s' * (verdict.measure != 1)} "
            f"cannot give one (at least {verdict.needed} {verdict.why}); `run` refuses it "
            f"without {NO_VERDICT_FLAG}. With --seeds {verdict.needed}: {cost_needed} "
            f"(now {cost_now})")


def refuse_without_verdict(verdict: SeedVerdict, args: Given,
                           space: str = "SPACE") -> None:
    """`run`'s check: a comparison that cannot end in a verdict runs only when asked to; the
    refusal names the seeds that would and the `plan` that prices them."""
    if verdict.gives_verdict or getattr(args, "no_verdict", False):
        return
    seeds = ",".join(map(str, range(verdict.needed))) if verdict.needed <= 5 else f"0-{verdict.needed - 1}"
    raise UserError(f"{verdict.measure} measure seed{'s' * (verdict.measure != 1)} cannot give "
                    f"the comparison with the baseline a verdict (at least {verdict.needed} "
                    f"{verdict.why}): give --seeds {verdict.needed} (seeds {seeds}; `shapesweep "
                    f"plan {space} --seeds {verdict.needed}` prices it), or {NO_VERDICT_FLAG} to "
                    "run it for means only", key="--seeds")
