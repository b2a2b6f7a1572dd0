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

from shapesweep.sweep.options import add_flags, parsed, resumed
from shapesweep.sweep.sweep_options import SweepOptions

from shapesweep.common import UserError, command_name


def add_arguments_run(parser: argparse.ArgumentParser, model: type = SweepOptions) -> None:
    add_flags(parser, model)


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


def run(args: argparse.Namespace, model: type = SweepOptions) -> int:
    from shapesweep.sweep.runner import run_sweep

    options = model(**parsed(model, args))  # each option checked against its declaration
    _check_resources(options)
    with _resume_hint(options.name, options.space, options.root):
        return _report(run_sweep(options), options.root)


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


def _check_resources(options: Any) -> None:
    """Refuse trials that can never run, before the sweep starts (the options together;
    each alone is checked against its declaration)."""
    workers = options.workers_per_trial
    check_parallel(options.parallel, workers, "--workers-per-trial")
    check_placement(workers, ("--cpus-per-trial", options.cpus_per_trial),
                    ("--gpus-per-trial", options.gpus_per_trial), options.address,
                    "--workers-per-trial")


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


def check_memory(options: Any, space: Any, candidates: list | None) -> None:
    """Refuse, before Ray starts, a sweep whose trials cannot fit their memory: on GPUs, a
    candidate whose predicted peak at micro-batch 1 exceeds its --gpus-per-trial share of
    the card (each trial then gets the largest micro-batch that fits its share, and caps its
    process there: shapesweep.trainers.fitting); on CPUs, the trials that run at once (at most
    --max-concurrent, and as many as the CPUs hold) together exceeding this machine's memory.
    An Optuna search's candidates are known only as its trials start (each checks itself)."""
    from shapesweep.trainers import memory

    if not candidates:
        return
    trains = [space.train_for(candidate=c) for c in candidates]
    workers, gpus = options.workers_per_trial, options.gpus_per_trial
    shards = workers if options.parallel == "fsdp" else 1
    if gpus:
        card = _card_bytes(options)
        if card is None:  # a cluster's cards are known only once joined
            return
        share = int(min(gpus, 1.0) * card)
        for candidate, train in zip(candidates, trains, strict=True):
            need = memory.estimate(candidate.config, train, "cuda", 1, shards).total
            if not memory.fits(need, share):
                raise UserError(
                    f"{_named(candidate)} needs about {memory.size(need)} to train at "
                    f"micro-batch 1; a trial's share of the GPU is {gpus:g} x "
                    f"{memory.size(card)} = {memory.size(share)} ({memory.MARGIN:.0%} "
                    f"planned on): give each trial more of a GPU", key="--gpus-per-trial")
        return
    ram = memory.device_bytes("cpu")
    for candidate, train in zip(candidates, trains, strict=True):  # one trial alone, at its least
        need = memory.estimate(candidate.config, train, "cpu", 1, shards).total
        if not memory.fits(need, ram):
            raise UserError(f"{_named(candidate)} needs about {memory.size(need)} to train even at "
                            f"micro-batch 1; this machine has {memory.size(ram)} "
                            f"({memory.MARGIN:.0%} planned on)", key="model")
    peaks = sorted(((memory.estimate(c.config, t, "cpu", memory.chosen(c.config, t, "cpu",
                                                                        lambda: ram)).total, c)
                    for c, t in zip(candidates, trains, strict=True)),
                   key=lambda pair: pair[0], reverse=True)
    at_once = _trials_at_once(options, len(candidates) * space.trials_per_candidate())
    repeats = space.trials_per_candidate()
    largest = [peak for peak, _ in peaks for _ in range(repeats)][:at_once]
    need = sum(largest) * workers // shards
    if not memory.fits(need, ram):
        biggest, candidate = peaks[0]
        fitting = sum(1 for total in range(1, at_once + 1)
                      if memory.fits(sum(largest[:total]) * workers // shards, ram))
        fix = (f"run at most {fitting} at once (--max-concurrent {fitting})" if fitting
               else "give it a smaller train.micro_batch_size (or auto)")
        raise UserError(
            f"{at_once} trials at once need about {memory.size(need)} (the largest, "
            f"{_named(candidate)}, about {memory.size(biggest)} each); this machine has "
            f"{memory.size(ram)} ({memory.MARGIN:.0%} planned on): {fix}",
            key="--max-concurrent")


def _named(candidate: Any) -> str:
    from shapesweep.search_spaces.configs import config_key

    return f"{candidate.config.family} candidate {config_key(candidate.config)}"


def _trials_at_once(options: Any, trials: int) -> int:
    """How many trials this machine runs at once: --max-concurrent, as many as its CPUs hold
    (--cpus-per-trial each), and no more than the sweep has."""
    at_once = min(options.max_concurrent or trials, trials)
    per_trial = options.cpus_per_trial * options.workers_per_trial
    if per_trial > 0 and options.address is None:
        at_once = min(at_once, max(1, int((os.cpu_count() or 1) // per_trial)))
    return max(1, at_once)


def _card_bytes(options: Any) -> int | None:
    """Each GPU's memory: --gpu-memory, else this machine's first GPU (None where it has
    none: the trials then run on a cluster joined with --address)."""
    from shapesweep.trainers.memory import device_bytes, parse_size

    if options.gpu_memory:
        return parse_size(options.gpu_memory, "--gpu-memory")
    if _local_gpus():
        return device_bytes("cuda")
    return None


def check_parallel(parallel: str, workers: int, flag: str) -> None:
    """fsdp shards a model over workers: one worker has nothing to shard it over."""
    if parallel == "fsdp" and workers < 2:
        raise UserError(f"fsdp shards a model over workers: give {flag} 2 or more",
                        key="--parallel")


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def add_arguments_resume(parser: argparse.ArgumentParser, model: type = SweepOptions) -> None:
    parser.add_argument("name", help="the sweep to finish")
    add_flags(parser, model, resumed)


def resume(args: argparse.Namespace, model: type = SweepOptions) -> int:
    from shapesweep.sweep.runner import load_options, run_sweep

    given = {key: value for key, value in parsed(model, args, resumed).items() if value is not None}
    options = replace(load_options(args.root, args.name, model), **given)
    with _resume_hint(args.name, options.space, args.root):
        return _report(run_sweep(options), args.root)
