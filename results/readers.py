"""The store's readers: one row per trial (its newest attempt), and that attempt's curves and layers.

A retried trial has several rows; the newest by `finished_at` (then by file name) wins, and
only the curves and layers written with it (same file name) are read.
"""

from __future__ import annotations

import posixpath

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs

from shapesweep.results.fragments import (
    CURVES,
    LAYERS,
    TRIALS,
    DamagedStore,
    FragmentCache,
    FragmentTable,
    empty_frame,
    fragment_files,
    fragment_listing,
    newest_attempts,
    scan_fragments,
    warn_damaged,
    with_retries,
)
from shapesweep.results.layout import filesystem
from shapesweep.results.schema import CURVE_COLUMNS, LAYER_COLUMNS, TRIAL_COLUMNS
from shapesweep.results.sweep_folders import sweep_names


def _newest_trials(fs, base: str, sweeps: list[str], columns=None,
                   cache: FragmentCache | None = None) -> pa.Table:
    """The newest row per (sweep, trial_id), with `_file` naming the fragment it came from.
    Damaged fragments are skipped with a warning; when nothing is readable, that is an error."""
    if columns is not None:
        columns = list(dict.fromkeys(["sweep", "trial_id", "finished_at", *columns]))
    scans = [scan_fragments(fs, posixpath.join(base, s, "trials"), TRIALS, columns, cache) for s in sweeps]
    damaged = sum(len(scan.damaged) for scan in scans)
    if damaged and damaged == sum(len(scan.listed) for scan in scans):
        raise DamagedStore(
            f"none of its {damaged} trials fragment(s) can be read (each is named above); "
            "move them out of trials/ to run those trials again",
            file=posixpath.join(base, sweeps[0]) if len(sweeps) == 1 else base)
    empty = empty_frame(TRIALS, columns or TRIAL_COLUMNS.names)
    return newest_attempts(pa.concat_tables([empty, *(scan.rows for scan in scans)]))


def attempt_curves(curves: pa.Table, listed: list[str], winners: pa.Table,
                    missing_ok: bool = False, quarantined: frozenset = frozenset()) -> pa.Table:
    """The curve rows written together with each winning trial row (same file name).
    `quarantined`: (sweep, name) of curves a compaction moved to `damaged/` (`_held`)."""
    names = {posixpath.basename(p) for p in listed}
    missing = [(s, f) for s, f in zip(winners["sweep"].to_pylist(), winners["_file"].to_pylist(),
                                      strict=True) if f not in names]
    for sweep, name in [m for m in missing if m in quarantined]:
        warn_damaged(f"{sweep}/curves/{name}", "damaged, moved to damaged/curves/ (resume runs its "
                                        "trials again; until then they show no curve)")
    missing = [m for m in missing if m not in quarantined]
    if missing and not missing_ok:
        # Every trials file is renamed in after its curves sibling: a missing sibling means a
        # compaction deleted it after we listed the trials. Let `with_retries` look again.
        raise FileNotFoundError(f"curves fragment(s) missing beside trials: {missing[:3]}")
    for sweep, name in missing:  # deleted by hand: the trial stays, without its curve
        warn_damaged(f"{sweep}/curves/{name}", "missing beside its trials fragment (no curve shown)")
    return attempt_rows(curves, winners, CURVES)


def attempt_rows(rows: pa.Table, winners: pa.Table, table: FragmentTable) -> pa.Table:
    """The rows of a curves or layers folder written with each winning trial row (same file name)."""
    kept = rows.join(winners.select(["sweep", "trial_id", "_file"]),
                     ["sweep", "trial_id", "_file"], join_type="inner")
    order = ["sweep", "trial_id", *table.order]
    return kept.select(table.schema.names).sort_by([(name, "ascending") for name in order])


def _curves_table(fs, base, sweeps, cache=None, missing_ok: bool = False) -> pa.Table:
    winners = _newest_trials(fs, base, sweeps, columns=[], cache=cache)
    scans = [scan_fragments(fs, posixpath.join(base, s, "curves"), CURVES, cache=cache) for s in sweeps]
    rows = pa.concat_tables([empty_frame(CURVES, CURVE_COLUMNS.names), *(s.rows for s in scans)])
    quarantined = frozenset((s, name) for s in sweeps
                            for name in quarantined_rows(fs, posixpath.join(base, s), ("curves",)))
    return attempt_curves(rows, [p for scan in scans for p in scan.listed], winners, missing_ok,
                           quarantined)


def quarantined_rows(fs, folder: str, tables=("curves", "layers")) -> set[str]:
    """Names of the sweep's curves or layers fragments a compaction moved to `damaged/`:
    the trials written with them lost their curve (or layers), so `resume` runs them again."""
    return {info.base_name for table in tables
            for info in fragment_listing(fs, posixpath.join(folder, "damaged", table))
            if info.type == pafs.FileType.File}


def _layers_table(fs, base, sweeps, cache=None) -> pa.Table:
    if not any(fragment_files(fs, posixpath.join(base, s, "layers")) for s in sweeps):
        return LAYER_COLUMNS.empty_table()  # no trial analysed: spare reading the trials
    winners = _newest_trials(fs, base, sweeps, columns=[], cache=cache)
    scans = [scan_fragments(fs, posixpath.join(base, s, "layers"), LAYERS, cache=cache) for s in sweeps]
    # Only analysed trials have a layers file, so a missing one cannot reveal a concurrent
    # compaction as a missing curves file does; a winner's trials file gone by now can.
    present = {(s, info.base_name) for s in sweeps
               for info in fragment_files(fs, posixpath.join(base, s, "trials"))}
    gone = [(s, f) for s, f in zip(winners["sweep"].to_pylist(), winners["_file"].to_pylist(),
                                   strict=True) if (s, f) not in present]
    if gone:
        raise FileNotFoundError(f"trials fragment(s) compacted while reading layers: {gone[:3]}")
    rows = pa.concat_tables([empty_frame(LAYERS, LAYER_COLUMNS.names), *(s.rows for s in scans)])
    return attempt_rows(rows, winners, LAYERS)


def load_trials(root, sweeps: list[str] | None = None, *,
                cache: FragmentCache | None = None) -> pd.DataFrame:
    """One row per trial (newest attempt) of the given sweeps (None: all), TRIAL_COLUMNS order.
    A damaged fragment is skipped with one warning line; none readable is a DamagedStore."""
    fs, base = filesystem(root)
    names = sweep_names(root, sweeps)
    table = with_retries(lambda: _newest_trials(fs, base, names, cache=cache))
    return table.select(TRIAL_COLUMNS.names).to_pandas()


def load_curves(root, sweeps: list[str] | None = None, *,
                cache: FragmentCache | None = None) -> pd.DataFrame:
    """Curve rows of each trial's newest attempt, sorted by sweep, trial_id, step."""
    fs, base = filesystem(root)
    names = sweep_names(root, sweeps)
    try:
        table = with_retries(lambda: _curves_table(fs, base, names, cache))
    except FileNotFoundError:  # a curves fragment gone for good: its trial stays, without a curve
        table = _curves_table(fs, base, names, cache, missing_ok=True)
    return table.to_pandas()


def load_layers(root, sweeps: list[str] | None = None, *,
                cache: FragmentCache | None = None) -> pd.DataFrame:
    """Layer rows (`shapesweep.trainers.analysis`) of each trial's newest attempt, sorted by sweep,
    trial_id, layer, threshold; a trial that was not analysed has none."""
    fs, base = filesystem(root)
    names = sweep_names(root, sweeps)
    return with_retries(lambda: _layers_table(fs, base, names, cache)).to_pandas()


def completed_keys(root, sweep: str) -> dict[tuple[str, str, int], str]:
    """(key, tuned_json, seed) -> status of what a sweep already holds, for resume; a trial
    whose curves or layers a compaction quarantined is not held (it runs again).

    `tuned_json` is "{}" for a trial that tuned nothing (also a row written before the
    column existed). When several trials share a triple, a completed/stopped_early one wins
    over a failed one; among equals the newest wins.
    """
    fs, base = filesystem(root)
    sweep_names(root, [sweep])
    columns = ["key", "tuned_json", "seed", "status"]
    table = with_retries(lambda: _newest_trials(fs, base, [sweep], columns=columns))
    lost = quarantined_rows(fs, posixpath.join(base, sweep))  # their curves or layers are damaged
    rows = sorted((r for r in table.select([*columns, "finished_at", "_file"]).to_pylist()
                   if r["_file"] not in lost),
                  key=lambda r: (r["status"] != "failed", r["finished_at"]))
    return {(r["key"], r["tuned_json"] or "{}", r["seed"]): r["status"] for r in rows}


def quarantined_trials(root, sweep: str) -> set[str]:
    """Trial ids whose newest row sits beside curves or layers a compaction quarantined
    (`_held`): the store keeps the row, but `resume` runs the trial again."""
    fs, base = filesystem(root)
    sweep_names(root, [sweep])
    lost = quarantined_rows(fs, posixpath.join(base, sweep))
    if not lost:
        return set()
    table = with_retries(lambda: _newest_trials(fs, base, [sweep], columns=[]))
    return {t for t, f in zip(table["trial_id"].to_pylist(), table["_file"].to_pylist(), strict=True)
            if f in lost}
