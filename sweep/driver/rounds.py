"""Adaptive measure seeds in the driver (issue 58): a sweep with `seeds: {min, max}` runs in
rounds, each round one `Tuner.fit` in the one Ray the driver started.

Round 1 runs every candidate and the baseline on seeds 0..min-1 (with tune.choice_seeds,
each candidate's choice trials first, as a fixed sweep does). After a round the driver looks:
every comparison with the baseline is decided by the group-sequential design
(`shapesweep.results.sequential.decide`, Holm over the comparisons), and the next round gives
one more seed only to the candidates still open (neither resolved nor futile, below max),
and the baseline that seed too (pairing). Each look is kept in the sweep's `looks.json`
(`shapesweep.results.adaptive`) before the next round starts: `resume` continues the round a
killed driver was in (its trials minus those the store holds) and never decides a look again.

Why rounds of whole seeds: every look sees the same seeds of every open comparison, so the
information fraction of a look is n / max for each, as the alpha-spending boundary assumes;
trials of a round still run in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shapesweep.common import UserError
from shapesweep.results.adaptive import (
    LOOKS_FILE,
    Look,
    Looks,
    looks_text,
    paired_diffs,
    parse_looks,
)
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.roles import SeedRoles, with_seed_roles
from shapesweep.results.sequential import DEFAULT_MIN_EFFECT, Design, check_min_effect, decide
from shapesweep.search_spaces.seeds import AdaptiveSeeds
from shapesweep.search_spaces.solver import Candidate
from shapesweep.search_spaces.space import BASELINE_VARIANT, SearchSpace
from shapesweep.sweep.search.strategies import TrialPlan

METRIC = "val_loss"  # what the looks compare: the final validation loss, as `status` does
# schedulers that stop a trial before its budget: a look needs every trial of a round whole
STOPPING = {"asha": "ASHA (the noise-aware one on a grid) stops trials part-way through a round"}


@dataclass(frozen=True)
class Adaptive:
    """What an adaptive sweep's rounds need: the design, the baseline candidate, the compared
    candidates (in the order of the family) and the trials a candidate's choice costs."""

    design: Design
    baseline: str
    keys: list[str]
    choice_seeds: tuple[int, ...]
    choice_trials: int  # each candidate's trials on the choice seeds

    def new_looks(self) -> Looks:
        d = self.design
        return Looks(min_seeds=d.min_seeds, max_seeds=d.max_seeds, min_effect=d.min_effect,
                     alpha=d.alpha, metric=METRIC, baseline=self.baseline)


def adaptive_design(seeds: AdaptiveSeeds, space: SearchSpace, candidates: list[Candidate] | None,
                    search: str, scheduler: str, min_effect: float | None) -> Adaptive:
    """The design of a sweep whose measure seeds are a range, or one line why it cannot run
    (before any work): a grid with one baseline candidate, a scheduler that runs every trial
    whole, one tuned value per candidate (chosen on tune.choice_seeds), a positive effect."""
    if search != "grid" or candidates is None:
        raise UserError("adaptive seeds need a grid (--search grid): they compare each candidate "
                        "with the baseline", key="--search")
    if scheduler in STOPPING:
        raise UserError(f"adaptive seeds look after whole rounds of trials; {STOPPING[scheduler]}: "
                        "use --scheduler fifo", key="--scheduler")
    bases = [c for c in candidates if c.variant == BASELINE_VARIANT]
    if len(bases) != 1:
        raise UserError(f"adaptive seeds compare each candidate with one baseline; the space plans "
                        f"{len(bases)} candidates of variant {BASELINE_VARIANT!r} (give one variant "
                        f"named {BASELINE_VARIANT!r}, or seeds as a list)", file=space.source_file, key="seeds")
    if len(space.tuned_settings()) > 1 and not space.choice_seeds:
        raise UserError("adaptive seeds pair each candidate's one tuned value with the baseline's: "
                        "name tune.choice_seeds to choose it on, or seeds as a list",
                        file=space.source_file, key="seeds")
    if len(candidates) < 2:
        raise UserError("adaptive seeds need a candidate besides the baseline to compare",
                        file=space.source_file, key="seeds")
    effect = check_min_effect(min_effect) if min_effect is not None else DEFAULT_MIN_EFFECT
    keys = [c.key for c in candidates if c.key != bases[0].key]
    choice = len(space.tuned_settings()) * len(space.choice_seeds)
    return Adaptive(Design(seeds.min, seeds.max, effect), bases[0].key, keys,
                    tuple(space.choice_seeds), choice)


def next_round(looks: Looks, keys: list[str]) -> tuple[int, list[str]] | None:
    """(measure seeds of the round, the candidates that run it: the open ones and the
    baseline), or None when no comparison is open or the last look was at max."""
    if not looks.looks:
        return looks.min_seeds, [*keys, looks.baseline]
    last = looks.looks[-1]
    open_ = [k for k in keys if not last.decisions[k].decided]
    if not open_ or last.seeds >= looks.max_seeds:
        return None
    return last.seeds + 1, [*open_, looks.baseline]


def asked(looks: Looks, adaptive: Adaptive, upcoming: tuple[int, list[str]] | None) -> int:
    """Trials the design has asked for so far, the upcoming round's included: what the
    catalog plans (a sweep is finished with all of them held)."""
    seeds = {key: 0 for key in [*adaptive.keys, adaptive.baseline]}
    rounds = [(look.seeds, look.ran) for look in looks.looks] + ([upcoming] if upcoming else [])
    for n, ran in rounds:
        for key in ran:
            seeds[key] = max(seeds[key], n)
    return adaptive.choice_trials * len(seeds) + sum(seeds.values())


def make_look(looks: Looks, adaptive: Adaptive, store: ParquetStore, name: str, n: int,
              ran: list[str]) -> Looks:
    """The look after the round on `n` seeds: every comparison decided with the trials the
    store holds (each decided comparison kept as its earlier look decided it)."""
    roles = SeedRoles(adaptive.choice_seeds, tuple(range(adaptive.design.max_seeds)), False)
    trials = store.load_trials([name])
    if len(trials):
        trials = with_seed_roles(trials, store.root, {name: roles})
    diffs = paired_diffs(trials, adaptive.baseline, adaptive.keys, METRIC)
    previous = looks.latest()
    decisions = decide(diffs, adaptive.design, METRIC, previous=[previous.get(k) for k in adaptive.keys])
    look = Look(look=len(looks.looks) + 1, seeds=n, ran=ran,
                decisions=dict(zip(adaptive.keys, decisions, strict=True)))
    return looks.model_copy(update={"looks": [*looks.looks, look]})


def read_looks(store: ParquetStore, name: str) -> Looks | None:
    return parse_looks(store.read_file(name, LOOKS_FILE), store.file_location(name, LOOKS_FILE),
                       store.file_repair(name, LOOKS_FILE))


def adaptive_plans(adaptive: Adaptive, store: ParquetStore, name: str,
                   plan_round: Callable[[list[int], set[str]], TrialPlan]) -> Iterator[TrialPlan]:
    """Each round's plan (`plan_round(seeds, candidate keys)`), in turn; once the caller has
    run one (asked for the next), its look is made and kept, then the next round planned."""
    looks = read_looks(store, name) or adaptive.new_looks()
    while (step := next_round(looks, adaptive.keys)) is not None:
        n, ran = step
        plan = plan_round(list(range(n)), set(ran))
        store.catalog.set_planned(name, asked(looks, adaptive, step))
        yield plan
        looks = make_look(looks, adaptive, store, name, n, ran)
        store.write_file(name, LOOKS_FILE, looks_text(looks))
    store.catalog.set_planned(name, asked(looks, adaptive, None))
