"""The Ray Tune driver: one sweep = one `Tuner.fit` over the trials still missing.

Rows are written by the driver (`ResultsWriter`, a Tune callback), once per trial, when
it ends: `completed` (it reached its token budget), `stopped_early` (ASHA stopped it) or
`failed` (it raised; the error text is kept and the sweep goes on). Trial ids are
`KEY-sSEED` (`KEY-tHASH-sSEED` with `tune:`), so a rerun replaces a row instead of adding
one, and a driver killed mid-sweep loses only the trials that had not ended: `resume` runs
exactly those (candidate, tuned values, seed).

Everything that can refuse a sweep (space, plan, options, seeds, data) is checked before
the catalog is opened or a folder made (`sweep_check`), so a refused run leaves nothing
behind. Then the driver takes the sweep's lease (`shapesweep.sweep.driver.lease`): a second driver
of the same sweep is refused. This module is the driver's lifecycle, start to finish (check,
lease, plan, Ray up, Tuner.fit, Ray down); the tuner is built in `tune_setup`, trials are
filed by `results_writer`, the sweep's own files are `sweep_files`.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console

from shapesweep.common import printable, resume_command
from shapesweep.results.catalog import without_password
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.sweep.driver import ray_compat
from shapesweep.sweep.driver.lease import sweep_lease
from shapesweep.sweep.driver.progress import SweepProgress
from shapesweep.sweep.driver.ray_session import (
    SESSION_RECORD,
    clear_dead_session,
    init_ray,
    quiet,
    ray_storage,
    stop_ray,
    terminate_as_interrupt,
)
from shapesweep.sweep.driver.results_writer import (
    ResultsWriter,
    compact_quietly,
    count_statuses,
    sigint_deferred,
)
from shapesweep.sweep.driver.rounds import adaptive_plans
from shapesweep.sweep.driver.sweep_check import Checked, absolute, check_sweep
from shapesweep.sweep.driver.sweep_files import (
    COMPLETEP_KEY,
    COMPLETEP_RULE,
    OPTIONS_FILE,
    SPACE_FILE,
    check_saved_space,
    load_options,
    space_hash,
)
from shapesweep.sweep.driver.tune_setup import record_decisions, run_config, tuner
from shapesweep.sweep.options.fields import saved_values
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.search.paired_asha import PairedASHA
from shapesweep.sweep.search.strategies import PlanContext, TrialPlan

__all__ = ["OPTIONS_FILE", "SPACE_FILE", "ResultsWriter", "SweepOptions", "SweepOutcome",
           "load_options", "run_sweep", "sigint_deferred"]


@dataclass
class SweepOutcome:
    name: str
    status: str
    counts: dict[str, int]
    launched: int


def run_sweep(options: SweepOptions, console: Console | None = None) -> SweepOutcome:
    """Run (or finish) a sweep; see the module docstring for what lands where."""
    options, checked = check_sweep(options)
    name = checked.name
    store = ParquetStore(options.root, checked.storage_url)  # the catalog at that URL
    with sweep_lease(store, name), quiet():
        clear_dead_session(options.root, name)  # what a killed driver left of Ray
        compact_quietly(store, name)  # ... and in fragments
        plans = _plans(options, checked, store)
        plan = next((p for p in plans if p.launches), None)  # an adaptive sweep's looks made meanwhile
        if plan is not None:
            status, launched = _fit(options, checked, itertools.chain([plan], plans), store, console)  # compacts
        else:
            status, launched = "finished", 0
            store.catalog.set_status(name, status)
            compact_quietly(store, name)
    counts = count_statuses(store.completed_keys(name))
    return SweepOutcome(name, status, counts, launched)


def _plans(options: SweepOptions, checked: Checked, store: ParquetStore) -> Iterator[TrialPlan]:
    """The plans the sweep runs, in turn: a fixed sweep's one, or an adaptive sweep's rounds
    (sweep/driver/rounds.py: the next planned once the caller has run the last)."""
    if checked.adaptive is None:
        yield _plan(options, checked, store)
        return
    told: list[bool] = []

    def plan_round(seeds: list[int], keys: set[str]) -> TrialPlan:
        plan = _plan(options, checked, store, seeds, keys, quiet=bool(told))
        told.append(True)
        return plan

    yield from adaptive_plans(checked.adaptive, store, checked.name, plan_round)


def _plan(options: SweepOptions, checked: Checked, store: ParquetStore, seeds: list[int] | None = None,
          only: set[str] | None = None, quiet: bool = False) -> TrialPlan:
    """With the lease held: what the strategy runs now (the trials the store lacks; `seeds`
    and `only`: an adaptive round's seeds and candidates), the sweep registered, and how it
    runs saved beside its results for `resume`."""
    name, space = checked.name, checked.space
    rerun = {"failed"} if options.retry_failed else set()
    skip = {triple for triple, status in store.completed_keys(name).items() if status not in rerun}
    plan = checked.strategy.plan(PlanContext(
        options.root, name, checked.seeds if seeds is None else seeds, absolute(options.data),
        checked.storage_url, checked.budget, skip, only))
    saved_space = store.read_file(name, SPACE_FILE)
    check_saved_space(name, saved_space, space)
    store.catalog.register(name, space.name, space.source_text, space.space_hash, plan.total,
                           hash_now=space_hash)
    if not quiet:
        _say(*checked.notices)
    if saved_space is None:
        store.write_file(name, SPACE_FILE, space.source_text)
    # Paths in the sweep folder are relative to it (`resume` resolves them under the root it
    # is given, and the root is the one it is given); the data path is absolute, so a resume
    # from another folder finds it.
    saved = saved_values(options) | {
        "space": SPACE_FILE, "data": absolute(options.data),
        "storage": without_password(options.storage), COMPLETEP_KEY: COMPLETEP_RULE}
    store.write_file(name, OPTIONS_FILE, json.dumps(saved, indent=2, sort_keys=True))
    return plan


def _fit(options: SweepOptions, checked: Checked, plans: Iterator[TrialPlan], store: ParquetStore,
         console: Console | None) -> tuple[str, int]:
    """Run each plan's trials in one `Tuner.fit` (a fixed sweep has one; an adaptive sweep's
    rounds are asked for in turn, all in the one Ray started here), each trial filed as it
    ends, then merge the sweep's results; returns how the sweep ended (also its catalog
    status) and how many trials were filed."""
    name, catalog = checked.name, store.catalog
    started_ray, session_dir = init_ray(options.address, ray_storage(options.root, name) / SESSION_RECORD,
                                        then=f"to resume: {resume_command(name, options.root)}")
    status, written = "failed", 0
    try:  # from here on, an interrupt stops the Ray just started
        for plan in plans:
            if plan.launches:
                written += _fit_one(options, checked, plan, store, console, session_dir)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        catalog.set_status(name, status)
        _stop(started_ray, session_dir, options.root, store, name)
    return status, written


def _fit_one(options: SweepOptions, checked: Checked, plan: TrialPlan, store: ParquetStore,
             console: Console | None, session_dir: str | None) -> int:
    """One `Tuner.fit` of the plan's trials; returns how many trials were filed."""
    name = checked.name
    grid = plan.param_space.get("spec")  # a grid's trials are known now: `tune.grid_search(specs)`
    progress = SweepProgress(total=plan.launches, console=console, enabled=options.progress,
                             budget=checked.budget,
                             planned=grid.get("grid_search") if isinstance(grid, dict) else None)
    writer = ResultsWriter(store, name, checked.data_hash, progress)
    if isinstance(checked.scheduler, PairedASHA):  # the noise-aware ASHA: each candidate's seeds
        record_decisions(checked.scheduler, store, name)
        assert plan.specs is not None, "the noise-aware ASHA runs a grid, whose trials are known"
        checked.scheduler.expect(plan.specs)
    fit = tuner(options, checked, plan, run_config(options, name, [writer, progress]),
                state_api=session_dir is None)  # our local Ray runs no dashboard
    store.catalog.set_status(name, "running")
    with progress, terminate_as_interrupt(), ray_compat.no_callback_census():
        fit.fit()
    return len(writer.written)


def _stop(started_ray: bool, session_dir: str | None, root: str, store: ParquetStore, name: str) -> None:
    """Merge the sweep's results while the Ray we started stops: neither waits for the other;
    the lease is released only after the merge."""
    merging = threading.Thread(target=compact_quietly, args=(store, name), name="shapesweep-compact")
    merging.start()
    try:
        if started_ray:
            stop_ray(session_dir, ray_storage(root, name) / SESSION_RECORD)
    finally:
        with sigint_deferred():
            merging.join()


def _say(*lines: str) -> None:
    """Notices before the sweep starts (the plan, dropped grid points), on stderr."""
    for line in lines:
        print(printable(line), file=sys.stderr, flush=True)  # they name variants of the space
