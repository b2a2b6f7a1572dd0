"""How a sweep chooses its trials: one `SearchStrategy` per `--search`, behind a registry.

A strategy answers the driver's few questions, as Optuna's `BaseSampler` and Ray's
`Searcher` do for theirs; the driver never asks which kind it holds:

- made from the options and the loaded space, before anything is written: it refuses
  options it cannot honour (`UserError`), and says which candidates it already knows
  (the grid's; None when they are proposed as the search goes) and what to tell the user;
- `settings()`: the options it resolved (the sampler a bare `--search optuna` means), saved
  in sweep.json so `resume` runs the same search;
- `plan(...)`, with the sweep's lease held: what Tune runs (`param_space`, `search_alg`,
  `num_samples`), reconciled with the trials a previous driver filed.

Adding a strategy is one class here and one line in `STRATEGIES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from shapesweep.common import UserError

if TYPE_CHECKING:  # types only: this module is imported for --help, the space's YAML reader is not
    import optuna

    from shapesweep.search_spaces.seeds import AdaptiveSeeds
    from shapesweep.search_spaces.space import SearchSpace
    from shapesweep.sweep.search.trials import TrialSpec

# --sampler NAME -> (its class in optuna.samplers, whether it trades two objectives)
SAMPLERS = {
    "tpe": ("TPESampler", True),
    "nsga2": ("NSGAIISampler", True),
    "cmaes": ("CmaEsSampler", False),
    "gp": ("GPSampler", True),
    "random": ("RandomSampler", True),
}


class StrategyOptions(Protocol):
    """The options a strategy reads: `run`'s (sweep/options/sweep_options.SweepOptions), which
    this module, below the CLI, names by what it holds."""

    @property
    def search(self) -> str: ...
    @property
    def seeds(self) -> list[int] | dict[str, int] | None: ...  # `--seeds` (adaptive: {"min", "max"})
    @property
    def num_samples(self) -> int: ...
    @property
    def multi_objective(self) -> str | None: ...
    @property
    def sampler(self) -> str | None: ...
    @property
    def sampler_seed(self) -> int | None: ...
    @property
    def max_concurrent(self) -> int | None: ...


def default_sampler(multi_objective: str | None) -> str:
    """TPE for one objective, NSGA-II for two: what a bare `--search optuna` means."""
    return "nsga2" if multi_objective else "tpe"


def make_sampler(name: str, seed: int | None = None):
    """The Optuna sampler `--sampler NAME` names, seeded."""
    import optuna

    return getattr(optuna.samplers, SAMPLERS[name][0])(seed=seed)


@dataclass
class TrialPlan:
    """What one `Tuner.fit` runs."""

    param_space: dict[str, Any]
    num_samples: int  # Tune's
    search_alg: Any  # a Tune Searcher, or None (the grid is in param_space)
    total: int  # trials of the whole sweep (the catalog's n_candidates)
    launches: int  # trials this run starts; 0: the sweep is already done
    specs: list[TrialSpec] | None = None  # the grid's trial specs this run starts


@dataclass
class PlanContext:
    """What the driver knows when the lease is held."""

    root: str
    name: str
    seeds: list[int]
    data: str | None  # absolute path of the training data, or None (built-in)
    storage_url: str  # the catalog's database (Optuna's storage too)
    budget: int | None  # the trials' one token budget; None when recipes differ
    skip: set[tuple[str, str, int]]  # (key, tuned_json, seed) of trials not to run again
    only: set[str] | None = None  # the candidate keys this run plans (an adaptive round's); None: all


class SearchStrategy:
    """One way of choosing trials; see the module docstring for the contract."""

    name: ClassVar[str]
    candidates: list | None = None  # planned up front (grid), else None
    notices: list[str]

    def __init__(self, options: StrategyOptions, space: SearchSpace):
        self.options, self.space, self.notices = options, space, []

    def settings(self) -> dict[str, Any]:
        return {}

    def plan(self, context: PlanContext) -> TrialPlan:
        raise NotImplementedError


class GridStrategy(SearchStrategy):
    """Every planned candidate x `tune:` combination x seed, each once."""

    name = "grid"

    def __init__(self, options: StrategyOptions, space: SearchSpace):
        from shapesweep.search_spaces.solver import plan
        from shapesweep.search_spaces.space import check_disjoint_seeds

        super().__init__(options, space)
        for flag, what, value in (("--multi-objective", "a second objective", options.multi_objective),
                                  ("--sampler", "a sampler", options.sampler)):
            if value:
                raise UserError(f"{what} needs --search optuna", key=flag)
        measure = _pool(options.seeds) or _pool(space.seeds)
        if space.choice_seeds and options.seeds:
            check_disjoint_seeds(space.choice_seeds, measure, key="--seeds")
        solved = plan(space)
        self.candidates = solved.candidates
        self.notices = [f"{space.name}: {solved.counts_line()}", *solved.dropped_lines(),
                        *tuning_lines(space, measure)]

    def plan(self, context: PlanContext) -> TrialPlan:
        from ray import tune

        from shapesweep.sweep.search.trials import GridVariants, grid_specs

        candidates = [c for c in self.candidates or [] if context.only is None or c.key in context.only]
        if self.space.choice_seeds:  # the chosen value's measure trials wait for its choice trials
            from shapesweep.sweep.search.choice import choice_plan

            searcher, total, launches = choice_plan(self.space, candidates, context)
            return TrialPlan({}, max(launches, 1), searcher, total, launches)
        specs, total = grid_specs(self.space, candidates, context.seeds, context.data, context.skip)
        variants = GridVariants(max_concurrent=self.options.max_concurrent or 0)
        return TrialPlan({"spec": tune.grid_search(specs)}, 1, variants, total, len(specs), specs)


def _pool(seeds: list[int] | dict[str, int] | AdaptiveSeeds | None) -> list[int]:
    """Every seed that may measure: a list, or an adaptive range's 0..max-1 (`--seeds` keeps
    one as {"min", "max"}); [] for none (no pydantic here: this module serves --help)."""
    if isinstance(seeds, dict):
        return list(range(seeds["max"]))
    return list(seeds) if isinstance(seeds, list) else seeds.pool() if seeds is not None else []


def tuning_lines(space: SearchSpace, seeds: list[int]) -> list[str]:
    """Which seeds choose the tuned values and which measure them, or the warning that the
    same seeds do both."""
    if not space.tune:
        return []
    names = ", ".join(space.tune)
    if space.choice_seeds:
        return [f"tune: seeds {', '.join(map(str, space.choice_seeds))} choose each candidate's {names}; "
                f"seeds {', '.join(map(str, seeds))} measure the chosen value"]
    if len(space.tuned_settings()) < 2:
        return []
    return [f"warning: tune: each candidate's {names} is chosen on the seeds that measure it, so its "
            "comparisons carry selection bias (tune.choice_seeds names seeds to choose on)"]


class OptunaStrategy(SearchStrategy):
    """An Optuna study (any sampler in `SAMPLERS`) proposing `--num-samples` trials; the
    searcher (`shapesweep.sweep.search.trials.OptunaSearcher`) keeps infeasible and already
    evaluated points from Ray."""

    name = "optuna"

    def __init__(self, options: StrategyOptions, space: SearchSpace):
        from shapesweep.sweep.search.trials import OBJECTIVES

        super().__init__(options, space)
        if space.choice_seeds:
            raise UserError("an Optuna study proposes each trial's tuned values itself; choice seeds "
                            "(tune.choice_seeds) choose them per candidate in a grid: use --search grid",
                            key="--search")
        second = options.multi_objective
        if second not in (None, *OBJECTIVES):
            raise UserError(f"unknown objective {second!r} ({' or '.join(OBJECTIVES)})",
                            key="--multi-objective")
        self.sampler = options.sampler or default_sampler(second)
        if self.sampler not in SAMPLERS:
            raise UserError(f"unknown sampler {self.sampler!r} ({', '.join(SAMPLERS)})",
                            key="--sampler")
        if second and not SAMPLERS[self.sampler][1]:
            raise UserError(f"{self.sampler} optimises one objective; with --multi-objective use "
                            f"{', '.join(n for n, (_, multi) in SAMPLERS.items() if multi)}",
                            key="--sampler")
        if self.sampler == "cmaes":
            self.notices = ["--sampler cmaes: Optuna's CMA-ES samples numeric dimensions; a "
                            "space's dimensions are categorical, so it samples them at random"]

    def settings(self) -> dict[str, Any]:
        return {"sampler": self.sampler}

    def plan(self, context: PlanContext) -> TrialPlan:
        from shapesweep.sweep.search.trials import (
            SpecMaker,
            check_study,
            damaged_study,
            launched_count,
            lost_trials,
            make_optuna_search,
        )

        options = self.options
        try:  # a damaged Optuna table: one line, before any work
            searcher, study = make_optuna_search(
                self.space, context.name, context.storage_url,
                SpecMaker(self.space, context.seeds[0], context.data), options.multi_objective,
                context.budget, sampler=make_sampler(self.sampler, options.sampler_seed))
            check_study(study)
            held = self._reconcile(study, context)
            searcher.lost = lost_trials(study, held)
            left = options.num_samples - launched_count(study, searcher.lost)
        except (ValueError, KeyError, LookupError, TypeError, AttributeError) as error:
            raise damaged_study(context.name, context.storage_url, error) from None
        return TrialPlan({}, left, searcher, options.num_samples, max(left, 0))

    def _reconcile(self, study: optuna.Study, context: PlanContext) -> set[str]:
        """Close the trials a killed driver left RUNNING with what the results store holds;
        returns the trial ids it holds (a trial whose results were quarantined is not held)."""
        from shapesweep.results.parquet_store import ParquetStore  # pyarrow: not for --help
        from shapesweep.sweep.search.trials import reconcile_study

        second = self.options.multi_objective
        store = ParquetStore(context.root)
        lost = store.quarantined_trials(context.name)
        finished = {
            row.trial_id: {"status": row.status,
                           "values": [row.val_loss] + ([getattr(row, second)] if second else [])}
            for row in store.load_trials([context.name]).itertuples()
            if row.trial_id not in lost
        }
        reconcile_study(study, finished)
        return set(finished)


STRATEGIES: dict[str, type[SearchStrategy]] = {s.name: s for s in (GridStrategy, OptunaStrategy)}


def strategy_for(options: StrategyOptions, space: SearchSpace) -> SearchStrategy:
    """The strategy `options.search` names, checked against the options and the space."""
    if options.search not in STRATEGIES:
        raise UserError(f"unknown search {options.search!r} ({' or '.join(STRATEGIES)})",
                        key="--search")
    return STRATEGIES[options.search](options, space)
