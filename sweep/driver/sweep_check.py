"""Everything that can refuse a sweep, checked before anything is written anywhere: the
space, the seeds, the strategy's options, the trackers, data-parallel splits, the memory a
candidate needs, the data, the scheduler and the cluster address. What the checks establish
(`Checked`) is what the driver (`runner.run_sweep`) runs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from shapesweep.families import base as families
from shapesweep.results.catalog import default_catalog_url
from shapesweep.results.layout import validate_sweep_name
from shapesweep.search_spaces.cadence import cooldown_line, evaluation_line, sweep_budgets
from shapesweep.search_spaces.seeds import AdaptiveSeeds, options_seeds, seed_pool
from shapesweep.search_spaces.solver import Candidate
from shapesweep.search_spaces.space import (
    SearchSpace,
    check_seeds_option,
    check_sweep_trials,
    load_space,
)
from shapesweep.sweep.driver.packing import check_memory
from shapesweep.sweep.driver.ray_session import check_address
from shapesweep.sweep.driver.rounds import Adaptive, adaptive_design
from shapesweep.sweep.driver.trackers import check_trackers
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.search.paired_asha import PairedASHA
from shapesweep.sweep.search.scheduling import Choice, choose
from shapesweep.sweep.search.strategies import SearchStrategy, strategy_for
from shapesweep.sweep.search.verdict import refuse_without_verdict, seed_verdict
from shapesweep.trainers.data import check_fits, load_lm_data
from shapesweep.trainers.parallel import (
    check_compilable,
    check_shardable,
    check_split,
    sequences_per_step,
)


@dataclass
class Checked:
    """What the up-front checks established; nothing is on disk yet."""

    name: str  # the sweep's, checked (the options may name none: the space's then)
    space: SearchSpace
    strategy: SearchStrategy
    storage_url: str
    seeds: list[int]
    scheduler: TrialScheduler
    rungs: list[float]  # ASHA's, where trials evaluate besides their cadence
    notices: list[str]
    data_hash: str
    budget: int | None  # the trials' one token budget; None when recipes differ (no ASHA)
    adaptive: Adaptive | None = None  # measure seeds as a range: the rounds' design (sweep/driver/rounds.py)


def check_sweep(options: SweepOptions) -> tuple[SweepOptions, Checked]:
    """Everything that can refuse the sweep, before anything is written anywhere; returns
    the options as the sweep runs them (its name, the strategy's settings)."""
    check_trackers(options.log_to)
    space = load_space(options.space)  # an unreadable file is one line (safe_yaml)
    name = validate_sweep_name(options.name or space.name)
    measure = options_seeds(options.seeds) or space.seeds
    seeds = (list(range(measure.min)) if isinstance(measure, AdaptiveSeeds)  # round 1's
             else check_seeds_option(measure))
    given = seed_pool(measure) if options.seeds else None
    check_sweep_trials(space, seeds=given)  # before the solver, one candidate per variant
    strategy = strategy_for(options, space)
    adaptive = (adaptive_design(measure, space, strategy.candidates, options.search, options.scheduler,
                                options.min_effect) if isinstance(measure, AdaptiveSeeds) else None)
    if strategy.candidates is not None:
        check_sweep_trials(space, len(strategy.candidates), given)
    _check_data_parallel(options, space, strategy.candidates)
    check_memory(options, space, strategy.candidates)  # trials that fit (issues 37, 39)
    budgets = sweep_budgets(space, strategy.candidates)
    scheduler, choice = _scheduler(options, space, strategy.candidates, seeds)
    lines = [choice.line, evaluation_line(space, strategy.candidates, choice.rungs),
             cooldown_line(space, strategy.candidates, choice.rungs)]
    data_hash, data_notices = data_hash_for(space, strategy.candidates, absolute(options.data))
    # after the checks of what cannot run at all: what can run, but ends without a verdict
    refuse_without_verdict(seed_verdict(space, len(given or seed_pool(measure)), len(strategy.candidates or ()),
                                        options.search, options), options, options.space)
    # makes a local root (a dry run only checks that it would have a catalog)
    storage_url = options.storage or _catalog_url(options.root, options.dry_run)
    budget = next(iter(budgets)) if budgets and len(budgets) == 1 else None
    options = replace(options, name=name, scheduler=choice.kind, **strategy.settings())
    if not options.dry_run:  # a dry run joins no cluster
        check_address(options.address)  # last: what the space and flags can refuse comes first
    return options, Checked(name, space, strategy, storage_url, seeds, scheduler, choice.rungs,
                            [*strategy.notices, *filter(None, lines), *data_notices],
                            data_hash, budget, adaptive)


def _catalog_url(root: str, dry_run: bool) -> str:
    """The default catalog's URL; a dry run refuses what `run` would and makes no folder."""
    if dry_run:
        return "" if root.startswith("file://") or "://" not in root else default_catalog_url(root)
    return default_catalog_url(root)


def data_hash_for(space: SearchSpace, candidates: list[Candidate] | None,
                  data: str | None) -> tuple[str, list[str]]:
    """Load (and so validate) the data once in the driver, before any trial, and check the
    models can read it; returns its hash (it goes on every row) and notices to print.

    Data no candidate can read (token ids past every vocab_size, splits shorter than
    seq_len + 1) refuses the sweep; data only some candidates cannot read is a notice, and
    their trials fail with the reason (the sweep goes on, `--retry-failed` reruns them).
    """
    if space.families and not any(families.get(f).task.reads_tokens for f in space.families):  # images
        from shapesweep.trainers.vision_data import load_images  # torch: the driver never needs it

        return load_images(data).data_hash, []
    tokens = load_lm_data(data)
    vocab = _vocab_sizes(space, candidates)
    check_fits(tokens, max(vocab), min(v.train.seq_len for v in space.resolved()))
    short = sorted(v for v in vocab if v < tokens.vocab_size)
    notices = [f"{tokens.source}: vocab_size: the data uses {tokens.vocab_size} token ids; "
               f"candidates with vocab_size {', '.join(map(str, short))} cannot read it "
               "and will fail"] if short else []
    return tokens.data_hash, notices


def _vocab_sizes(space: SearchSpace, candidates: list[Candidate] | None) -> set[int]:
    """Every vocab_size the sweep may train: the grid's candidates', else each language-model
    variant's (its family's default where the variant sets none)."""
    if candidates is not None:
        return {c.config.vocab_size for c in candidates if families.of(c.config).task.reads_tokens}
    return {v for variant in space.resolved() if families.get(variant.family).task.reads_tokens
            for v in variant.grid_values().get("vocab_size")
            or [variant.fixed.get("vocab_size", _default(variant.family, "vocab_size"))]}


def _default(family: str, name: str) -> object:
    return families.get(family).config.model_fields[name].default


def _scheduler(options: SweepOptions, space: SearchSpace, candidates: list[Candidate] | None,
               seeds: list[int]) -> tuple[TrialScheduler, Choice]:
    """Tune's scheduler for the sweep, and the choice it comes from (`scheduling.choose`:
    which, why, and the token counts of ASHA's rungs, where trials evaluate)."""
    choice = choose(options.scheduler, space, candidates, seeds, options.grace_tokens,
                    options.reduction_factor, options.workers_per_trial, options.max_concurrent)
    if choice.kind == "fifo":
        return FIFOScheduler(), choice
    if choice.per_trial:
        assert choice.budget is not None, "ASHA per trial: the trials have one token budget"
        return ASHAScheduler(time_attr="tokens", metric="val_loss", mode="min", max_t=choice.budget,
                             # Ray annotates an int; its rungs are compared as numbers
                             grace_period=choice.rungs[0],  # type: ignore[arg-type]
                             reduction_factor=options.reduction_factor), choice
    return PairedASHA(choice.rungs, options.reduction_factor), choice


def _check_data_parallel(options: SweepOptions, space: SearchSpace,
                         candidates: list[Candidate] | None) -> None:
    """With N > 1 workers per trial: every language model's step splits evenly over them,
    and under fsdp no candidate is a mixture of experts (an Optuna search's candidates are
    not known yet; its trials are checked as they start) and no recipe compiles."""
    if options.workers_per_trial < 2:
        return
    if options.parallel == "fsdp":
        for variant in space.resolved():
            check_compilable(variant.train, "--parallel")
    for candidate in candidates or []:
        if families.get(candidate.config.family).task.reads_tokens:
            train = space.train_for(candidate=candidate)
            check_split(sequences_per_step(train), options.workers_per_trial)
        if options.parallel == "fsdp":
            check_shardable(candidate.config)


def absolute(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None
