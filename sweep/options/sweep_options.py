"""`SweepOptions`: every option `shapesweep run` takes (its flag, help, default, range,
whether `resume` takes it and whether `sweep.json` keeps it). An option other verbs take too
is declared once on its group (sweep/options/option_groups.py, store_args.StoreOptions) and named
here with `same_as`; the rest are `run`'s own. `run` and `resume` build their arguments from
it and read it back from them (shapesweep.sweep.options.fields).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any

from shapesweep.common import CHECKPOINT_EVERY_S, UserError
from shapesweep.sweep.options.fields import option, same_as
from shapesweep.sweep.options.option_groups import (
    OBJECTIVES,
    PARALLEL,
    Parallel,
    PlanPriceOptions,
    ResourceOptions,
    SearchOptions,
    TrainerOptions,
    gpus_here,
    ray_address,
    seeds_list,
)
from shapesweep.sweep.options.store_args import StoreOptions
from shapesweep.sweep.search.flag_values import NO_VERDICT_FLAG

__all__ = ["OBJECTIVES", "PARALLEL", "SweepOptions", "parse_seeds", "ray_address"]


def parse_seeds(text: str | list[int] | dict[str, int] | None) -> list[int] | dict[str, int] | None:
    """`--seeds` read (shapesweep.sweep.options.option_groups.seeds_list), one line naming it."""
    try:
        return seeds_list(text)
    except ValueError as error:
        raise UserError(str(error), key="--seeds") from None


@dataclass(kw_only=True)
class SweepOptions:
    """Everything `shapesweep run` takes; saved beside the results for `resume`. The field
    order is `run --help`'s."""

    space: str = option(MISSING, "space", help="a built-in space name or a YAML file")
    name: str | None = option(None, "--name", help="sweep name (default: the space's name)")
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    address: str | None = same_as(ResourceOptions, "address")
    max_concurrent: int | None = same_as(ResourceOptions, "max_concurrent")
    retry_failed: bool = option(False, "--retry-failed", resume=True, help="rerun failed trials too")
    progress: bool = option(True, "--no-progress", resume=True, help="no live progress table")
    # the dataclass's own default stays 0 (a sweep built in Python); the command line's is
    # this machine's (a GPU a trial where it has one)
    gpus_per_trial: float = same_as(ResourceOptions, "gpus_per_trial", default=0.0,
                                    cli_default=gpus_here)
    gpu_memory: str | None = same_as(ResourceOptions, "gpu_memory")
    cpus_per_trial: float = same_as(ResourceOptions, "cpus_per_trial")
    search: str = same_as(SearchOptions, "search")
    num_samples: int = same_as(SearchOptions, "num_samples")
    seeds: list[int] | dict[str, int] | None = same_as(SearchOptions, "seeds")
    scheduler: str = same_as(SearchOptions, "scheduler")
    grace_tokens: int | None = same_as(SearchOptions, "grace_tokens")
    reduction_factor: float = same_as(SearchOptions, "reduction_factor")
    data: str | None = same_as(TrainerOptions, "data")
    multi_objective: str | None = same_as(SearchOptions, "multi_objective")
    sampler: str | None = same_as(SearchOptions, "sampler")
    sampler_seed: int | None = same_as(SearchOptions, "sampler_seed")
    log_to: list[str] = option(  # experiment trackers (shapesweep.sweep.driver.trackers)
        [], "--log-to", metavar="TRACKER",
        help="also log each trial to mlflow, wandb or tensorboard (repeatable)")
    max_failures: int = option(
        2, "--max-failures", at_least=0,
        help="retry a trial whose worker died up to N times, from its last checkpoint; 0: never "
             "(default 2)")
    checkpoint_every_s: float = option(
        CHECKPOINT_EVERY_S, "--checkpoint-every", at_least=0, metavar="SECONDS",
        help="a trial saves a checkpoint at its first evaluation this long after its last: a "
             "lost worker costs this much training and an evaluation interval at most, and "
             "shorter trials save none; 0: at every evaluation "
             f"(default {CHECKPOINT_EVERY_S:g})")
    keep_checkpoints: bool = option(
        False, "--keep-checkpoints",
        help="keep each ended trial's last checkpoint, for export --weights (implies "
             "--checkpoint-every 0: every trial's is its final state)")
    fresh_workers: bool = option(  # Tune's reuse_actors off
        False, "--fresh-workers",
        help="a new worker process for every trial, as for training code that leaks state from "
             "one trial to the next (each trial then pays a process start and torch's import: "
             "seconds)")
    workers_per_trial: int = same_as(ResourceOptions, "workers_per_trial")
    parallel: Parallel = same_as(TrainerOptions, "parallel")
    # whether the seeds can end in a verdict (shapesweep.sweep.search.verdict): kept, so `resume`
    # judges a sweep as it was started
    min_effect: float | None = same_as(PlanPriceOptions, "min_effect")
    seed_sd: float | None = same_as(PlanPriceOptions, "seed_sd")
    no_verdict: bool = option(
        False, NO_VERDICT_FLAG,
        help="run a comparison with the baseline whose measure seeds cannot give it a verdict "
             "(fewer than 2, or than --min-effect needs): means only, no intervals")
    # a dry run: every check that needs no cluster, then the plan and its price; not kept
    dry_run: bool = option(
        False, "--dry-run", resume=True, saved=False,
        help="check everything that needs no cluster (space, flags, scheduler, seeds, memory at "
             "--gpu-memory, placement on --gpus), print the plan and its price, and stop: "
             "nothing written, no Ray started")
    gpu: str | None = same_as(PlanPriceOptions, "gpu", resume=True, saved=False)
    gpus: int | None = same_as(
        PlanPriceOptions, "gpus", resume=True, saved=False,
        help="--dry-run: the GPUs the sweep runs on, for its placement check (instead of this "
             "machine's) and its wall time")
    gpu_hour_price: float | None = same_as(PlanPriceOptions, "gpu_hour_price", resume=True,
                                           saved=False)
    extra: dict[str, Any] = field(default_factory=dict)
