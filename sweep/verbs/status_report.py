"""`status` run: the sweeps under a root, or one sweep's candidates, verdicts and trials, in the
asked format. `status_document` gathers what is shown, `status_view` renders it; this module
reads the store and the catalog once and prints (imported when `status` runs, not for `--help`:
it imports pandas and rich)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pandas as pd
from rich.console import Console
from rich.text import Text

from shapesweep.common import UserError, printable, terminal_console, write_csv
from shapesweep.results.fragments import FragmentCache
from shapesweep.results.live import live_sweeps, load_live
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.roles import with_seed_roles
from shapesweep.results.summary import adaptive_lines, adjustment_line, exploratory_line, seeds_line
from shapesweep.results.sweep_folders import unknown_sweep
from shapesweep.results.tuned_view import per_tuned_document
from shapesweep.sweep.cli.verb_table import StatusArgs
from shapesweep.sweep.verbs.status_document import status_document, sweep_name, sweep_records
from shapesweep.sweep.verbs.status_view import (
    asha_line,
    candidates_table,
    eval_noise_line,
    fidelity_line,
    machines_line,
    no_verdict_lines,
    oom_line,
    per_tuned_table,
    running_table,
    stopped_lines,
    sweeps_table,
    trials_table,
)
from shapesweep.sweep.verbs.store_access import read_catalog

if TYPE_CHECKING:
    from shapesweep.results.catalog import (  # SQLAlchemy: only where a catalog is
        Catalog,
        SweepRecord,
    )


def show(args: StatusArgs) -> int:
    """`status [NAME]`, its arguments checked (`status_command.check_status_args`)."""
    console = terminal_console(markup=False)  # names and errors from the store: shown as written
    catalog = read_catalog(args)
    records = {r.name: r for r in catalog.list()} if catalog else {}
    if args.name is None:
        return _sweeps_list(args, catalog, records, console)
    return _one_sweep(args, records.get(args.name), list(records), console)


def _sweeps_list(args: StatusArgs, catalog: Catalog | None, records: dict[str, SweepRecord],
                 console: Console) -> int:
    """`status` without a NAME: one line (record) per sweep, its state read from its lease."""
    store = ParquetStore(args.root, args.storage)
    names = list(dict.fromkeys([*records, *store.sweeps(), *live_sweeps(args.root)]))
    trials = store.load_trials(names) if names else None

    def driven(name: str) -> bool:  # a reader opens no catalog where none is
        lease = catalog.lease(name) if catalog is not None else None
        return lease is not None and lease.alive()

    sweeps = sweep_records(records, names, trials, load_live(args.root)[0], driven)
    if args.format == "json":
        print(json.dumps(sweeps, indent=2))
    elif args.format == "csv":
        write_csv(sweeps, sys.stdout)
    else:
        console.print(sweeps_table(args.root, sweeps))
    return 0


def _one_sweep(args: StatusArgs, record: SweepRecord | None, known: list[str],
               console: Console) -> int:
    """`status NAME` in the asked format."""
    name = sweep_name(args)
    store = ParquetStore(args.root, args.storage, cache=FragmentCache())  # the curves need the trials again
    trials = store.load_trials([name])
    running = load_live(args.root, [name])[0]
    if record is None and trials.empty and running.empty:
        raise unknown_sweep(name, args.root, [*known, *live_sweeps(args.root)])
    if args.per == "tuned":
        return _per_tuned(args, trials, console)
    document = status_document(args, store, trials, store.load_curves([name]), running)
    if args.format == "json":
        print(json.dumps(document, indent=2))
    elif args.format == "csv":
        _print_csv(document)
    else:
        _print_sweep(args, record, document, trials, running, console)
    return 0


def _print_sweep(args: StatusArgs, record: SweepRecord | None, document: dict,
                 trials: pd.DataFrame, running: pd.DataFrame, console: Console) -> None:
    """`status NAME`'s table view: the header, the counts, the candidates with their verdicts
    and what stands behind them, the running trials and the trials best first."""
    name = sweep_name(args)
    if record is not None:
        console.print(Text.assemble(
            (printable(record.name), "bold"),
            printable(f"  space {record.space_name} ({record.space_hash})  status {record.status}  "
                      f"{len(document['candidates'])} candidates, {record.n_candidates} trials")))
        # the catalog's n_candidates counts trials
    counts = trials["status"].value_counts().to_dict() if not trials.empty else {}
    counts |= {"running": len(running)} if len(running) else {}
    console.print("  ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(counts.items()))
                  or "no trials yet")
    for line in (machines_line(document["machines"]), oom_line(trials)):
        if line:
            console.print(line, soft_wrap=True, highlight=False, markup=False)
    if document["candidates"]:
        _print_candidates(args, document, console)
    if len(running):
        console.print(running_table(name, running))
    if not trials.empty:
        console.print(trials_table(name, trials, len(trials) if args.all else args.top))


def _print_candidates(args: StatusArgs, document: dict, console: Console) -> None:
    """The candidates table and the lines under it: seeds, warnings, why no verdict, missing
    seeds, the adjustment, rank fidelity, ASHA's stops."""
    console.print(candidates_table(document, narrow=console.width < 100))
    # wrapped at the terminal's width (status fits 80 columns), between words
    hint = ([f"each candidate at every tuned value: status {args.name} --per tuned"]
            if any(c["tuned"] for c in document["candidates"]) else [])
    for line in [seeds_line(document), *hint, *(f"warning: {w}" for w in document["warnings"])]:
        console.print(line, highlight=False, markup=False)
    reasons = no_verdict_lines(document)
    if reasons:
        console.print("no verdict:", *reasons, sep="\n", highlight=False, markup=False)
    short = [f"  {c['variant'] or c['key']} ({c['key']}): {c['missing']}"
             + (f"; run: {c['to_run_missing']}" if c["to_run_missing"] else "")
             for c in document["candidates"] if c["missing"]]
    if short:
        console.print("missing seeds:", *short, sep="\n", highlight=False, markup=False)
    for note in (adjustment_line(document), exploratory_line(document)):
        if note:
            console.print(note, highlight=False, markup=False)  # wrapped at the width, between words
    for line in adaptive_lines(document):  # seeds per candidate, the look and why it stopped
        console.print(line, highlight=False, markup=False)
    if eval_noise_line(document):
        console.print(eval_noise_line(document), soft_wrap=True)
    console.print(fidelity_line(document), soft_wrap=True)
    if "rank_fidelity_cooled" in document:
        console.print(fidelity_line(document, "rank_fidelity_cooled"), soft_wrap=True)
    for line in stopped_lines(document):
        console.print(line, soft_wrap=True)
    if asha_line(document) and "asha_stopped" not in document:  # Ray's per-trial ASHA
        console.print(asha_line(document), soft_wrap=True)


def _per_tuned(args: StatusArgs, trials: pd.DataFrame, console: Console) -> int:
    """`status NAME --per tuned` in the asked format."""
    name = sweep_name(args)
    variants = set(trials["variant"].dropna())
    if args.baseline is not None and args.baseline not in variants:
        known = ", ".join(sorted(variants)) or "none recorded"
        raise UserError(f"sweep {name!r} has no variant {args.baseline!r} (its variants: {known})",
                        key="--baseline")
    document = per_tuned_document(with_seed_roles(trials, args.root), name, args.root, args.metric,
                                  args.baseline or "baseline")
    if args.format == "json":
        print(json.dumps(document, indent=2))
    elif args.format == "csv":
        write_csv([{**{k: v for k, v in r.items() if k not in ("tuned", "baseline_tuned")},
                    **{f"tuned.{k}": v for k, v in r["tuned"].items()}} for r in document["rows"]], sys.stdout)
    elif not document["rows"]:
        console.print(f"{name}: no trial has landed yet", highlight=False)
    else:
        console.print(per_tuned_table(document))
        console.print(seeds_line(document), highlight=False, markup=False)
    return 0


def _flat(candidate: dict) -> dict:
    """A candidate as one CSV row: tuned values as `tuned.NAME` columns."""
    row = {k: v for k, v in candidate.items() if k != "tuned"}
    row.update({f"tuned.{k}": v for k, v in (candidate["tuned"] or {}).items()})
    return row


def _print_csv(document: dict) -> None:
    """One row per candidate; the sweep's seeds (which chose, which measured) on every row."""
    seeds = {name: document[name] for name in ("choice_seeds", "measure_seeds")}
    write_csv([{**_flat(c), **seeds} for c in document["candidates"]], sys.stdout)
