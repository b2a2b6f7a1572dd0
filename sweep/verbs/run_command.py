"""`shapesweep run SPACE` and `shapesweep resume NAME`: a sweep from its space (or its saved
options), the resources it asks for checked before Ray starts.

The verb table imports this module only when one of its verbs runs (`--help` never does).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace

from shapesweep.common import UserError, resume_command, terminal_console
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.verb_table import ResumeArgs
from shapesweep.sweep.driver.runner import SweepOutcome, run_sweep
from shapesweep.sweep.driver.sweep_files import OPTIONS_FILE, load_options
from shapesweep.sweep.options.fields import flagged, resumed
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.verbs.dry_run import dry_run

EXIT_FAILED_TRIALS = 1  # the sweep ran, and some of its trials failed (2 is bad input, refused)


def _report(outcome: SweepOutcome, root: str) -> int:
    """The sweep's one-line summary; the exit code: 0 when every trial completed or was
    stopped by the scheduler, EXIT_FAILED_TRIALS when the sweep holds failed ones."""
    c = outcome.counts
    # soft_wrap: one line even in a log (rich wraps at 80 columns off a terminal)
    terminal_console(soft_wrap=True).print(
        f"sweep [bold]{outcome.name}[/]: {outcome.status} - {c['completed']} completed, "
        f"{c['stopped_early']} stopped early, {c['failed']} failed "
        f"({outcome.launched} trials this run); results in {ParquetStore(root).file_location(outcome.name)}")
    return EXIT_FAILED_TRIALS if c["failed"] else 0


def run(options: SweepOptions) -> int:
    """`shapesweep run`: `options` (each checked against its declaration) checked together,
    then the sweep, or for `--dry-run` its plan and price."""
    _check_cluster(options)
    if options.dry_run:  # the checks, the plan and its price: no driver
        return dry_run(options)
    return _sweep(options, options.name, options.root)


def _sweep(options: SweepOptions, name: str | None, root: str) -> int:
    """The sweep, then its one-line summary; the exit code."""
    with _resume_hint(name, options.space, root):
        return _report(run_sweep(options), root)


@contextmanager
def _resume_hint(name: str | None, space: str, root: str) -> Iterator[None]:
    """On Ctrl-C (or SIGTERM, SIGHUP: the runner turns them into one), the exact command that
    finishes the sweep, once it is one `resume` can find (its options file is written)."""
    try:
        yield
    except KeyboardInterrupt:
        name = name or load_space(space).name  # it loaded before: the sweep started
        if ParquetStore(root).read_file(name, OPTIONS_FILE) is not None:
            with suppress(OSError):  # SIGHUP: the terminal may be gone
                print(f"interrupted; to finish the sweep: {resume_command(name, root)}",
                      file=sys.stderr, flush=True)
        raise


def _check_resources(options: SweepOptions) -> None:
    """Refuse trials that can never run, before the sweep starts (the options together;
    each alone is checked against its declaration)."""
    workers = options.workers_per_trial
    check_parallel(options.parallel, workers, "--workers-per-trial")
    check_placement(workers, ("--cpus-per-trial", options.cpus_per_trial),
                    ("--gpus-per-trial", options.gpus_per_trial), options.address,
                    "--workers-per-trial")


def _check_cluster(options: SweepOptions) -> None:
    """`_check_resources`, or for a dry run that names its GPUs (`--gpus`), placement on them
    (their nodes' CPUs are unknown) instead of on this machine."""
    _check_priced(options)
    if options.gpus is None:
        _check_resources(options)
        return
    check_parallel(options.parallel, options.workers_per_trial, "--workers-per-trial")
    check_gpus(options.workers_per_trial, options.gpus_per_trial, options.gpus)


def _check_priced(options: SweepOptions) -> None:
    """--gpu, --gpus and --gpu-hour-price describe the GPUs a dry run prices and places on."""
    priced = [flag for flag, value in (("--gpu", options.gpu), ("--gpus", options.gpus),
                                       ("--gpu-hour-price", options.gpu_hour_price))
              if value is not None]
    if priced and not options.dry_run:
        raise UserError("prices a dry run and checks its placement: give --dry-run too",
                        key=priced[0])


def check_gpus(workers: int, per_worker: float, gpus: int) -> None:
    """A trial's GPUs against the `--gpus` a dry run names (their nodes' CPUs are unknown)."""
    if workers * per_worker > gpus:
        what = f"{workers} workers x {per_worker:g} GPUs" if workers > 1 else f"{per_worker:g} GPUs per trial"
        raise UserError(f"{what} do not fit the {gpus} GPUs --gpus names",
                        key="--workers-per-trial" if workers > 1 else "--gpus-per-trial")


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




def _judged(root: str, name: str) -> bool:
    """Whether the sweep's options file says whether it was started with --no-verdict (one
    from before the verdict check has no such key: it resumes as it was started)."""
    text = ParquetStore(root).read_file(name, OPTIONS_FILE)
    try:
        return "no_verdict" in json.loads(text or "{}")
    except ValueError:
        return True  # load_options has read it


def resume(args: ResumeArgs, model: type[SweepOptions] = SweepOptions) -> int:
    """`shapesweep resume`: the sweep's saved options (as `model`, a sweep's options), the
    ones `args` gives over them."""
    given = {f.name: getattr(args, f.name) for f, _ in flagged(model, resumed)
             if getattr(args, f.name, None) is not None}
    options = replace(load_options(args.root, args.name, model), **given)
    if not _judged(args.root, args.name):  # started before `run` refused a sweep without a verdict
        options = replace(options, no_verdict=True)
    if options.dry_run:
        _check_cluster(options)
        return dry_run(options)
    _check_priced(options)
    return _sweep(options, args.name, args.root)
