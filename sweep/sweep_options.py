"""`SweepOptions`: every option `shapesweep run` takes, each declared once (its flag, help,
default, range, whether `resume` takes it and whether `sweep.json` keeps it). `run` and
`resume` build their arguments from it and read it back from them (shapesweep.sweep.options).
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field
from typing import Any

from shapesweep.common import UserError
from shapesweep.search_spaces.cadence import CHECKPOINT_EVERY_S
from shapesweep.sweep.options import option, same_as
from shapesweep.sweep.scheduling import SCHEDULERS
from shapesweep.sweep.store_args import StoreOptions
from shapesweep.sweep.strategies import SAMPLERS, STRATEGIES

PARALLEL = ("ddp", "fsdp")  # how N > 1 workers share a model (shapesweep.trainers.loop.train)
OBJECTIVES = ("params_non_embedding", "flops_per_token")  # --multi-objective's second objective


def parse_seeds(text: str | None) -> list[int] | None:
    """`N` (seeds 0..N-1) or `a,b,c`: every part a seed, each valid and given once."""
    from shapesweep.search_spaces.space import MAX_SEEDS, check_seeds_option

    if text is None:
        return None
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"cannot read {text!r} as a seed count or a comma list",
                        key="--seeds") from None
    if len(seeds) == 1 and "," not in text:  # a count
        seeds = list(range(min(seeds[0], MAX_SEEDS + 1)))
    return check_seeds_option(seeds)


def ray_address() -> str | None:
    """`--address`'s default: the cluster `ray job submit` names in $RAY_ADDRESS, if any."""
    return os.environ.get("RAY_ADDRESS") or None


@dataclass
class SweepOptions:
    """Everything `shapesweep run` takes; saved beside the results for `resume`. The field
    order is `run --help`'s."""

    space: str = option(MISSING, "space", help="a built-in space name or a YAML file")
    name: str | None = option(None, "--name", help="sweep name (default: the space's name)")
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    address: str | None = option(
        None, "--address", cli_default=ray_address, resume=True,
        help="join a Ray cluster (auto or HOST:PORT); default: $RAY_ADDRESS when set (`ray job "
             "submit` sets it), else start a Ray of this sweep's own")
    max_concurrent: int | None = option(None, "--max-concurrent", at_least=1, resume=True,
                                        help="trials at once")
    retry_failed: bool = option(False, "--retry-failed", resume=True, help="rerun failed trials too")
    progress: bool = option(True, "--no-progress", resume=True, help="no live progress table")
    gpus_per_trial: float = option(
        0.0, "--gpus-per-trial", "--gpus-per-worker", at_least=0,
        help="GPUs for each trial; with --workers-per-trial N, for each of its N workers (the "
             "two names are one setting; default 0)")
    gpu_memory: str | None = option(
        None, "--gpu-memory", metavar="SIZE", resume=True,
        help="each GPU's memory, e.g. 80GiB, for the check that every trial fits its share "
             "(default: this machine's first GPU; give it when joining a cluster with --address)")
    cpus_per_trial: float = option(
        1.0, "--cpus-per-trial", "--cpus-per-worker", at_least=0,
        help="CPUs for each trial, or for each of its workers (default 1)")
    search: str = option("grid", "--search", help=f"{' or '.join(STRATEGIES)} (default grid)")
    num_samples: int = option(8, "--num-samples", at_least=1,
                              help="optuna: trials to complete in total (default 8)")
    seeds: list[int] | None = option(
        None, "--seeds", read=parse_seeds,
        help="N (seeds 0..N-1) or a comma list like 0,3,7 (default: the space's)")
    scheduler: str = option(  # saved resolved (shapesweep.sweep.scheduling.choose)
        "auto", "--scheduler", choices=SCHEDULERS,
        help="asha: the noise-aware ASHA, each candidate judged on its seed mean (Ray's "
             "per-trial ASHA under --search optuna); fifo: every trial to its budget; auto "
             "(default): fifo, with the reason (the noise-aware ASHA missed on both early-ranking "
             "checks named before they ran: docs/scheduling.md)")
    grace_tokens: int | None = option(
        None, "--grace-tokens",
        help="ASHA grace period in tokens (default: an eighth of the budget, at least 100 "
             "optimizer steps, at most half the budget)")
    reduction_factor: float = option(3.0, "--reduction-factor")
    data: str | None = option(None, "--data", help="training data (default: built-in corpus)")
    multi_objective: str | None = option(
        None, "--multi-objective", nargs="?", const=OBJECTIVES[0], choices=OBJECTIVES,
        help=f"optuna: trade val_loss against this (default {OBJECTIVES[0]})")
    sampler: str | None = option(
        None, "--sampler",
        help=f"optuna: {', '.join(SAMPLERS)} (default tpe; nsga2 with --multi-objective)")
    sampler_seed: int | None = option(0, "--sampler-seed", help="optuna sampler seed")
    log_to: list[str] = option(  # experiment trackers (shapesweep.sweep.trackers)
        [], "--log-to", metavar="TRACKER",
        help="also log each trial to mlflow, wandb or tensorboard (repeatable)")
    max_failures: int = option(
        2, "--max-failures", at_least=0,
        help="retry a trial whose worker died up to N times, from its last checkpoint (default 2)")
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
    workers_per_trial: int = option(
        1, "--workers-per-trial", at_least=1,
        help="train each trial data parallel on N Ray Train workers (DDP), each with "
             "--cpus-per-trial CPUs and --gpus-per-trial GPUs (default 1)")
    parallel: str = option(
        "ddp", "--parallel", choices=PARALLEL,
        help="with --workers-per-trial N > 1: ddp keeps a whole model on each worker; fsdp "
             "shards parameters, gradients and AdamW state over the N (default ddp)")
    extra: dict[str, Any] = field(default_factory=dict)
