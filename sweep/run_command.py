"""`shapesweep run SPACE` and `shapesweep resume NAME`: a sweep from its space (or its saved
options), the resources it asks for checked before Ray starts.

Ray, pandas and the runner are imported inside the verbs, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from shapesweep.search_spaces.cadence import CHECKPOINT_EVERY_S
from shapesweep.sweep.scheduling import SCHEDULERS
from shapesweep.sweep.store_args import add_root
from shapesweep.sweep.strategies import SAMPLERS, STRATEGIES

from shapesweep.common import UserError, command_name

PARALLEL = ("ddp", "fsdp")  # how N > 1 workers share a model (shapesweep.trainers.loop.train)


def _add_execution(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS") or None,
                        help="join a Ray cluster (auto or HOST:PORT); default: $RAY_ADDRESS when "
                             "set (`ray job submit` sets it), else start a Ray of this sweep's own")
    parser.add_argument("--max-concurrent", type=int, default=None, help="trials at once")
    parser.add_argument("--retry-failed", action="store_true", help="rerun failed trials too")
    parser.add_argument("--no-progress", action="store_true", help="no live progress table")


def add_arguments_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("space", help="a built-in space name or a YAML file")
    parser.add_argument("--name", default=None, help="sweep name (default: the space's name)")
    add_root(parser)
    _add_execution(parser)
    parser.add_argument("--gpus-per-trial", "--gpus-per-worker", dest="gpus_per_trial",
                        type=float, default=0.0,
                        help="GPUs for each trial; with --workers-per-trial N, for each of its "
                             "N workers (the two names are one setting; default 0)")
    parser.add_argument("--cpus-per-trial", "--cpus-per-worker", dest="cpus_per_trial",
                        type=float, default=1.0,
                        help="CPUs for each trial, or for each of its workers (default 1)")
    parser.add_argument("--search", default="grid", help=f"{' or '.join(STRATEGIES)} (default grid)")
    parser.add_argument("--num-samples", type=int, default=8,
                        help="optuna: trials to complete in total (default 8)")
    parser.add_argument("--seeds", default=None,
                        help="N (seeds 0..N-1) or a comma list like 0,3,7 (default: the space's)")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="auto",
                        help="asha: the noise-aware ASHA, each candidate judged on its seed mean "
                             "(Ray's per-trial ASHA under --search optuna); fifo: every trial to "
                             "its budget; auto (default): asha for 9+ candidates with 2+ seeds "
                             "and cooldown rungs (train.decay wsd), else fifo")
    parser.add_argument("--grace-tokens", type=int, default=None,
                        help="ASHA grace period in tokens (default: an eighth of the budget, at "
                        "least 100 optimizer steps, at most half the budget)")
    parser.add_argument("--reduction-factor", type=float, default=3.0)
    parser.add_argument("--data", default=None, help="training data (default: built-in corpus)")
    parser.add_argument("--multi-objective", nargs="?", const="params_non_embedding",
                        choices=("params_non_embedding", "flops_per_token"), default=None,
                        help="optuna: trade val_loss against this (default params_non_embedding)")
    parser.add_argument("--sampler", default=None,
                        help=f"optuna: {', '.join(SAMPLERS)} (default tpe; nsga2 with "
                        "--multi-objective)")
    parser.add_argument("--sampler-seed", type=int, default=0, help="optuna sampler seed")
    parser.add_argument("--log-to", action="append", default=[], metavar="TRACKER",
                        help="also log each trial to mlflow, wandb or tensorboard (repeatable)")
    parser.add_argument("--max-failures", type=int, default=2,
                        help="retry a trial whose worker died up to N times, from its last "
                             "checkpoint (default 2)")
    parser.add_argument("--checkpoint-every", type=float, default=CHECKPOINT_EVERY_S,
                        metavar="SECONDS",
                        help="a trial saves a checkpoint at its first evaluation this long after "
                             "its last: a lost worker costs this much training and an evaluation "
                             "interval at most, and shorter trials save none; 0: at every "
                             f"evaluation (default {CHECKPOINT_EVERY_S:g})")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each ended trial's last checkpoint, for export --weights "
                             "(implies --checkpoint-every 0: every trial's is its final state)")
    parser.add_argument("--fresh-workers", action="store_true",
                        help="a new worker process for every trial, as for training code that "
                             "leaks state from one trial to the next (each trial then pays a "
                             "process start and torch's import: seconds)")
    parser.add_argument("--workers-per-trial", type=int, default=1,
                        help="train each trial data parallel on N Ray Train workers (DDP), each "
                             "with --cpus-per-trial CPUs and --gpus-per-trial GPUs (default 1)")
    parser.add_argument("--parallel", choices=PARALLEL, default="ddp",
                        help="with --workers-per-trial N > 1: ddp keeps a whole model on each "
                             "worker; fsdp shards parameters, gradients and AdamW state over "
                             "the N (default ddp)")


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


EXIT_FAILED_TRIALS = 1  # the sweep ran, and some of its trials failed (2 is bad input, refused)


def _report(outcome: Any, root: str) -> int:
    """The sweep's one-line summary; the exit code: 0 when every trial completed or was
    stopped by the scheduler, EXIT_FAILED_TRIALS when the sweep holds failed ones."""
    from rich.console import Console
    from shapesweep.results.store import sweep_dir

    c = outcome.counts
    # soft_wrap: one line even in a log (rich wraps at 80 columns off a terminal)
    Console(soft_wrap=True).print(
        f"sweep [bold]{outcome.name}[/]: {outcome.status} - {c['completed']} completed, "
        f"{c['stopped_early']} stopped early, {c['failed']} failed "
        f"({outcome.launched} trials this run); results in {sweep_dir(root, outcome.name)}")
    return EXIT_FAILED_TRIALS if c["failed"] else 0


def run(args: argparse.Namespace) -> int:
    from shapesweep.sweep.runner import SweepOptions, run_sweep

    for flag, value in (("--max-concurrent", args.max_concurrent),
                        ("--num-samples", args.num_samples)):
        if value is not None and value < 1:
            raise UserError("must be at least 1", key=flag)
    for flag, value in (("--max-failures", args.max_failures),
                        ("--checkpoint-every", args.checkpoint_every)):
        if value < 0:
            raise UserError("must be 0 or more", key=flag)
    _check_resources(args)
    options = SweepOptions(
        space=args.space, name=args.name, root=args.root, address=args.address,
        gpus_per_trial=args.gpus_per_trial, cpus_per_trial=args.cpus_per_trial,
        max_concurrent=args.max_concurrent, search=args.search, num_samples=args.num_samples,
        seeds=parse_seeds(args.seeds), scheduler=args.scheduler, grace_tokens=args.grace_tokens,
        reduction_factor=args.reduction_factor, storage=args.storage, data=args.data,
        multi_objective=args.multi_objective, retry_failed=args.retry_failed,
        sampler=args.sampler, sampler_seed=args.sampler_seed, log_to=args.log_to, progress=not args.no_progress,
        max_failures=args.max_failures, checkpoint_every_s=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints, fresh_workers=args.fresh_workers,
        workers_per_trial=args.workers_per_trial, parallel=args.parallel,
    )
    with _resume_hint(args.name, args.space, args.root):
        return _report(run_sweep(options), args.root)


@contextmanager
def _resume_hint(name: str | None, space: str, root: str) -> Iterator[None]:
    """On Ctrl-C (or SIGTERM, SIGHUP: the runner turns them into one), the exact command that
    finishes the sweep, once it is one `resume` can find (its options file is written)."""
    try:
        yield
    except KeyboardInterrupt:
        from shapesweep.results.store import read_sweep_file
        from shapesweep.search_spaces.space import load_space

        name = name or load_space(space).name  # it loaded before: the sweep started
        if read_sweep_file(root, name, "sweep.json") is not None:
            print(f"interrupted; to finish the sweep: {command_name()} resume {shlex.quote(name)} "
                  f"--root {shlex.quote(root)}", file=sys.stderr, flush=True)
        raise


def _check_resources(args: argparse.Namespace) -> None:
    """Refuse trials that can never run, before the sweep starts."""
    workers = args.workers_per_trial
    if workers < 1:
        raise UserError("must be at least 1", key="--workers-per-trial")
    check_parallel(args.parallel, workers, "--workers-per-trial")
    check_placement(workers, ("--cpus-per-trial", args.cpus_per_trial),
                    ("--gpus-per-trial", args.gpus_per_trial), args.address, "--workers-per-trial")


def check_placement(workers: int, cpus: tuple[str, float], gpus: tuple[str, float],
                    address: str | None, workers_flag: str) -> None:
    """Refuse `workers` of (flag, CPUs) and (flag, GPUs) each that the local cluster (this
    machine) could never place: Ray would wait for them forever. A remote cluster's size is
    known only once joined (`--address`)."""
    for flag, value in (cpus, gpus):
        if value < 0:
            raise UserError(f"must not be negative (got {value:g})", key=flag)
    if address is not None:
        return
    have_gpus = _local_gpus() if gpus[1] else 0  # the driver imports torch only for this
    for (flag, per_worker), kind, have in ((cpus, "CPUs", os.cpu_count() or 1),
                                           (gpus, "GPUs", have_gpus)):
        if workers * per_worker > have:
            what = f"{workers} workers x {per_worker:g} {kind}" if workers > 1 else f"{per_worker:g} {kind} per trial"
            raise UserError(f"{what} do not fit this machine's {have} {kind} (the local cluster; "
                            "join a larger one with --address)",
                            key=workers_flag if workers > 1 else flag)


def check_parallel(parallel: str, workers: int, flag: str) -> None:
    """fsdp shards a model over workers: one worker has nothing to shard it over."""
    if parallel == "fsdp" and workers < 2:
        raise UserError(f"fsdp shards a model over workers: give {flag} 2 or more",
                        key="--parallel")


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def add_arguments_resume(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the sweep to finish")
    add_root(parser)
    _add_execution(parser)


def resume(args: argparse.Namespace) -> int:
    from shapesweep.sweep.runner import load_options, run_sweep

    given = {name: getattr(args, name) for name in ("storage", "address", "max_concurrent")
             if getattr(args, name) is not None}
    options = replace(load_options(args.root, args.name), root=args.root,
                      retry_failed=args.retry_failed, progress=not args.no_progress, **given)
    with _resume_hint(args.name, options.space, args.root):
        return _report(run_sweep(options), args.root)
