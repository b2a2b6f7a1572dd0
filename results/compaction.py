"""Compaction: a sweep's fragments merged into one file per table, with nothing lost or seen twice."""

from __future__ import annotations

import contextlib
import os
import posixpath
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

import shapesweep.results.versions as versions
from shapesweep.results.fragments import (
    CURVES,
    LAYERS,
    TRIALS,
    Scan,
    fragment_files,
    newest_attempts,
    scan_fragments,
)
from shapesweep.results.layout import filesystem, stamp, validate_sweep_name, write_atomic
from shapesweep.results.readers import attempt_curves, attempt_rows, quarantined_rows
from shapesweep.results.schema import TRIAL_COLUMNS
from shapesweep.results.sweep_folders import ready_sweeps

STALE_S = 3600.0  # leftovers older than this have no live writer: compact deletes them


def compact(root, sweep: str, grace_s: float = 0.25, stale_s: float = STALE_S) -> str | None:
    """Merge a sweep's fragments into one trials, one curves and (when any trial has layer
    rows) one layers file; returns the trials file.

    Readers may run meanwhile, and a raw glob never sees a row twice, even if the
    compaction is killed at any point: on a local root the merged files and every fragment
    not merged go into a new version of the table folders, published by one atomic rename
    (`shapesweep.results.versions`); the old version is deleted `grace_s` later, and a
    reader whose file vanished lists and reads again (`_with_retries`). On an object store
    the merged files land before their inputs are deleted, `grace_s` later: a raw listing in
    between may see a trial twice (`load_trials` and friends never do). Writers wait for a
    local compaction (a lock); elsewhere fragments written meanwhile are left for the next one.

    Damaged or foreign fragments move to `SWEEP/damaged/{trials,curves,layers}/`, one by
    one, one warning line each (`_set_aside`: a damaged trials fragment takes its curves and
    layers along; a damaged curves or layers fragment goes alone, and its trials' rows stay,
    unmerged, until `resume` has run them again): the folders stay globbable and nothing is
    lost. A sweep whose version links are missing is repaired first (`ready_sweeps`). Leftovers older than `stale_s` are deleted: temporary
    files of killed writers, curves or layers whose trial never landed, and live curves
    (`shapesweep.results.live`) no evaluation has appended to since; so are versions a
    killed compaction left. `stale_s=0` is for a caller that knows no writer of this sweep
    runs (the driver holding it).
    """
    fs, base = filesystem(root)
    folder = posixpath.join(base, validate_sweep_name(sweep))
    local = isinstance(fs, pafs.LocalFileSystem)
    if local and not os.path.isdir(folder):
        return None  # nothing written yet: make nothing
    ready_sweeps(fs, base, sweep)  # never a version taken for a killed compaction's leftover
    with versions.locked(folder, exclusive=True) if local else contextlib.nullcontext():
        if local:
            versions.remove_stale(folder)
            versions.adopt(folder)
        merged = _merge(fs, folder, grace_s, local)
        _remove_leftovers(fs, folder, stale_s)
    return merged


def _merge(fs, folder: str, grace_s: float, local: bool) -> str | None:
    """`compact`'s merge: damaged inputs set aside, the rest published as one file per table."""
    trials_dir, curves_dir, layers_dir = (posixpath.join(folder, t) for t in versions.TABLES)
    trials = scan_fragments(fs, trials_dir, TRIALS, warn=False)
    curves = scan_fragments(fs, curves_dir, CURVES, warn=False)
    layers = scan_fragments(fs, layers_dir, LAYERS, warn=False)
    moved = _set_aside(fs, folder, trials, curves, layers)
    readable = [p for p in trials.listed if p not in moved]
    held = _held(fs, folder, readable, trials.rows) | _holding_bad_rows(trials)
    inputs = [p for p in readable if p not in held]
    if len(inputs) < 2:
        return inputs[0] if inputs else None
    # Only the listed files: on an object store a fragment written meanwhile is neither
    # merged nor deleted.
    kept = pa.array(sorted(posixpath.basename(p) for p in inputs), pa.string())
    winners = newest_attempts(trials.rows.filter(pc.is_in(trials.rows["_file"], kept)))
    merged_tables = {
        "curves": attempt_curves(curves.rows, curves.listed, winners, missing_ok=True),
        "layers": attempt_rows(layers.rows, winners, LAYERS),
        "trials": winners.select(TRIAL_COLUMNS.names),  # last: the commit record
    }
    name = f"compact-{stamp()}.parquet"
    merged_names = {posixpath.basename(p) for p in inputs}
    if local:
        version = versions.new_version(folder)
        for table, rows in merged_tables.items():
            if rows.num_rows or table != "layers":
                write_atomic(fs, posixpath.join(version, table, name), rows)
            versions.carry(posixpath.join(folder, table), posixpath.join(version, table),
                           skip=merged_names)
        retired = versions.publish(folder, versions.mark_complete(version))
        time.sleep(grace_s)
        versions.retire(retired)
        return posixpath.join(trials_dir, name)
    for table, rows in merged_tables.items():
        if rows.num_rows or table != "layers":
            fs.create_dir(posixpath.join(folder, table), recursive=True)
            write_atomic(fs, posixpath.join(folder, table, name), rows)
    time.sleep(grace_s)
    # Trials first (an orphan curves or layers file is ignored), then their siblings only:
    # a sibling listed without its trials file is a write in flight, or a crashed one.
    for path in inputs:
        fs.delete_file(path)
    for path in [*curves.listed, *layers.listed]:
        if path not in moved and posixpath.basename(path) in merged_names:
            fs.delete_file(path)
    return posixpath.join(trials_dir, name)


def _set_aside(fs, folder: str, trials: Scan, *siblings: Scan) -> set[str]:
    """Move damaged fragments into `folder/damaged/`, one by one: a damaged trials fragment
    takes its curves and layers along (they belong to rows no one can read, whose trials
    run again); a damaged curves or layers fragment goes alone, its trials' rows stay where
    they are (`_held`), never a whole intact table with it. Returns the paths moved."""
    lost = {posixpath.basename(p) for p in trials.damaged}
    moving = dict(trials.damaged)
    for scan in siblings:
        moving.update(scan.damaged)
        for path in scan.listed:
            if posixpath.basename(path) in lost:
                moving.setdefault(path, "its trials fragment is damaged")
    for path, problem in moving.items():
        target = posixpath.join(folder, "damaged", posixpath.basename(posixpath.dirname(path)))
        fs.create_dir(target, recursive=True)
        fs.move(path, posixpath.join(target, posixpath.basename(path)))
        print(f"warning: moved {path} to {target}/: {problem}", file=sys.stderr, flush=True)
    return set(moving)


def _held(fs, folder: str, readable: list[str], rows: pa.Table) -> set[str]:
    """Trials fragments left out of a merge: those whose curves or layers are quarantined
    and that still hold a trial's newest row. Their name is how `completed_keys` knows the
    trials to run again; once every row is superseded (run again) they merge away."""
    quarantined = quarantined_rows(fs, folder)
    named = [p for p in readable if posixpath.basename(p) in quarantined]
    if not named:
        return set()
    names = pa.array(sorted({posixpath.basename(p) for p in readable}), pa.string())
    winning = set(newest_attempts(rows.filter(pc.is_in(rows["_file"], names)))["_file"].to_pylist())
    return {p for p in named if posixpath.basename(p) in winning}


def _holding_bad_rows(trials: Scan) -> set[str]:
    """Trials fragments with a row left out (`_bad_json`) of a trial no other fragment
    holds: merging would drop that row unseen. They stay as they are (a reader skips the row,
    with a warning) until `resume` has run the trial again; then they merge away."""
    held = set()
    for path, trial_ids in trials.bad_rows.items():
        elsewhere = trials.rows.filter(pc.not_equal(trials.rows["_file"], posixpath.basename(path)))
        if not trial_ids <= set(elsewhere["trial_id"].to_pylist()):
            held.add(path)
    return held


def _remove_leftovers(fs, folder: str, stale_s: float) -> None:
    """Delete temporary files, orphan curves or layers, and live curves (`shapesweep.results.live`)
    older than `stale_s`: no live writer owns them."""
    trials_dir, *sibling_dirs = (posixpath.join(folder, t) for t in ("trials", "curves", "layers"))
    live_dir = posixpath.join(folder, "live")
    trial_names = {info.base_name for info in fragment_files(fs, trials_dir)}
    cutoff = time.time() - stale_s
    for where in (folder, trials_dir, *sibling_dirs, live_dir):
        for info in fs.get_file_info(pafs.FileSelector(where, allow_not_found=True)):
            old = info.mtime is not None and info.mtime.timestamp() <= cutoff
            orphan = info.base_name.endswith(".tmp") or where == live_dir or (
                where in sibling_dirs and info.base_name not in trial_names)
            if info.type == pafs.FileType.File and old and orphan:
                with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
                    fs.delete_file(info.path)
