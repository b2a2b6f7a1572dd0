"""The Parquet results store: one folder per sweep, one atomic fragment per trial.

Layout (plain Parquet; DuckDB `read_parquet('ROOT/*/trials/*.parquet')` and Polars read it):

    ROOT/SWEEP/trials/part-<trial_id>-<stamp>.parquet     one trial row
    ROOT/SWEEP/curves/part-<trial_id>-<stamp>.parquet     that attempt's curve rows

A fragment is written under a hidden temporary name and renamed into place, so a reader
(or a crash) never sees half a file. The trials fragment is the commit record: it is
renamed last, and curve files without a trials sibling of the same name are ignored.
A retried trial writes a new pair; readers keep the newest row per (sweep, trial_id) by
`finished_at` and the curves of that same attempt. `compact` merges the fragments into one
`compact-<stamp>.parquet` pair with the same semantics.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
import uuid
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from results.schema import CURVE_COLUMNS, TRIAL_COLUMNS, normalize_curve_row, normalize_trial_row
from search_spaces.errors import UserError

_SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_READ_RETRIES = 20  # a concurrent `compact` may delete a fragment between listing and reading


def validate_sweep_name(sweep: str) -> str:
    """Sweep names become folder names: letters, digits and `-_.` only, so none escapes the root."""
    if not isinstance(sweep, str) or not _SWEEP_NAME.fullmatch(sweep):
        raise UserError(
            f"sweep name {sweep!r} is not allowed: use letters, digits, '-', '_' and '.', "
            "starting with a letter or digit (at most 200 characters)", key="name",
        )
    return sweep


def _filesystem(root: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    root = os.fspath(root)
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), os.path.abspath(root)


def local_folder(root: str | os.PathLike) -> str | None:
    """The root as a folder of this machine (a path or file:// URI), or None (object stores)."""
    fs, base = _filesystem(root)
    return base if isinstance(fs, pafs.LocalFileSystem) else None


def sweep_dir(root: str | os.PathLike, sweep: str) -> str:
    """The sweep's folder: a local path for a local root, else a URI under the root."""
    validate_sweep_name(sweep)
    root = os.fspath(root)
    if "://" in root:
        return root.rstrip("/") + "/" + sweep
    return os.path.join(os.path.abspath(root), sweep)


def _stamp() -> str:
    """Sorts by write time (tie-break between equal `finished_at`), unique across writers."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:80]


def _write_atomic(fs: pafs.FileSystem, path: str, content: pa.Table | bytes) -> None:
    """Write a Parquet table (or raw bytes) under a hidden temporary name, then rename
    (object stores: one PUT, which is atomic)."""
    def write(out) -> None:
        if isinstance(content, bytes):
            out.write(content)
        else:
            pq.write_table(content, out)

    if fs.type_name in ("s3", "gcs"):
        with fs.open_output_stream(path) as out:
            write(out)
        return
    folder, name = posixpath.split(path)
    temp = posixpath.join(folder, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    if isinstance(fs, pafs.LocalFileSystem):
        with open(temp, "wb") as handle:  # fsync so a power cut cannot rename an empty file
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    else:
        with fs.open_output_stream(temp) as out:
            write(out)
    fs.move(temp, path)


def write_sweep_file(root, sweep: str, name: str, text: str) -> None:
    """A small text file of the sweep (its space, how it was run), written atomically,
    under any root the store takes: local, file:// or an object store."""
    fs, base = _filesystem(root)
    folder = posixpath.join(base, validate_sweep_name(sweep))
    fs.create_dir(folder, recursive=True)
    _write_atomic(fs, posixpath.join(folder, name), text.encode())


def read_sweep_file(root, sweep: str, name: str) -> str | None:
    """The text `write_sweep_file` wrote, or None when there is none."""
    fs, base = _filesystem(root)
    path = posixpath.join(base, validate_sweep_name(sweep), name)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return stream.read().decode()


def write_trial(root, sweep: str, trial_row: dict, curve_rows: list[dict]) -> str:
    """Write one trial (and its curve) as one new fragment pair; returns the trials fragment path."""
    validate_sweep_name(sweep)
    if trial_row.get("sweep") not in (None, sweep):
        raise ValueError(f"trial row says sweep {trial_row['sweep']!r}, written to {sweep!r}")
    row = normalize_trial_row({**trial_row, "sweep": sweep})
    if not row["trial_id"]:
        raise ValueError("trial row has no trial_id")
    if row["status"] is None:
        raise ValueError("trial row has no status")
    if row["finished_at"] is None:
        row["finished_at"] = datetime.now(UTC)
    curves = []
    for curve in curve_rows:
        if curve.get("trial_id") not in (None, row["trial_id"]):
            raise ValueError(f"curve row for trial {curve['trial_id']!r} in trial {row['trial_id']!r}")
        curves.append(normalize_curve_row({**curve, "sweep": sweep, "trial_id": row["trial_id"]}))

    fs, base = _filesystem(root)
    name = f"part-{_safe(row['trial_id'])}-{_stamp()}.parquet"
    for table_name in ("trials", "curves"):
        fs.create_dir(posixpath.join(base, sweep, table_name), recursive=True)
    _write_atomic(fs, posixpath.join(base, sweep, "curves", name),
                  pa.Table.from_pylist(curves, schema=CURVE_COLUMNS))
    trial_path = posixpath.join(base, sweep, "trials", name)
    _write_atomic(fs, trial_path, pa.Table.from_pylist([row], schema=TRIAL_COLUMNS))
    return trial_path


def list_sweeps(root) -> list[str]:
    """Names of the sweeps with a results folder under root, sorted."""
    fs, base = _filesystem(root)
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    names = []
    for info in fs.get_file_info(pafs.FileSelector(base)):
        if info.type == pafs.FileType.Directory and _SWEEP_NAME.fullmatch(info.base_name):
            if fs.get_file_info(posixpath.join(info.path, "trials")).type == pafs.FileType.Directory:
                names.append(info.base_name)
    return sorted(names)


def _fragments(fs: pafs.FileSystem, folder: str) -> list[str]:
    """Visible Parquet files of one table folder (temporary names start with '.')."""
    return sorted(
        info.path for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
        and not info.base_name.startswith((".", "_"))
    )


def _read(fs: pafs.FileSystem, paths: list[str], schema: pa.Schema, columns=None) -> pa.Table:
    """Rows of the given files plus `_file` (the file's base name) to pair trials with curves."""
    names = list(columns or schema.names)
    if not paths:
        return schema.empty_table().select(names).append_column("_file", pa.array([], pa.string()))
    dataset = ds.dataset(paths, schema=schema, format="parquet", filesystem=fs)
    table = dataset.to_table(columns=[*names, "__filename"])  # one threaded scan of every file
    files = pa.array([posixpath.basename(p) for p in table["__filename"].to_pylist()], pa.string())
    return table.drop_columns(["__filename"]).append_column("_file", files)


def _sweeps(root, sweeps: list[str] | None) -> list[str]:
    return list_sweeps(root) if sweeps is None else [validate_sweep_name(s) for s in sweeps]


def _with_retries(read):
    """Run a listing+read, again if a concurrent compaction removed a file in between."""
    for attempt in range(_READ_RETRIES):
        try:
            return read()
        except FileNotFoundError:
            if attempt == _READ_RETRIES - 1:
                raise
            time.sleep(0.05)


def _newest(table: pa.Table) -> pa.Table:
    """Keep the newest row per (sweep, trial_id): latest `finished_at`, then latest file name."""
    order = table.sort_by([("sweep", "ascending"), ("trial_id", "ascending"),
                           ("finished_at", "descending"), ("_file", "descending")])
    order = order.append_column("_row", pa.array(range(order.num_rows), pa.int64()))
    first = order.group_by(["sweep", "trial_id"], use_threads=False).aggregate([("_row", "first")])
    return order.take(first["_row_first"]).sort_by("_row").drop_columns(["_row"])


def _newest_trials(fs, base: str, sweeps: list[str], columns=None) -> pa.Table:
    """The newest row per (sweep, trial_id), with `_file` naming the fragment it came from."""
    paths = [p for s in sweeps for p in _fragments(fs, posixpath.join(base, s, "trials"))]
    if columns is not None:
        columns = list(dict.fromkeys(["sweep", "trial_id", "finished_at", *columns]))
    return _newest(_read(fs, paths, TRIAL_COLUMNS, columns))


def _attempt_curves(fs, curve_paths: list[str], winners: pa.Table) -> pa.Table:
    """The curve rows written together with each winning trial row (same file name)."""
    missing = set(winners["_file"].to_pylist()) - {posixpath.basename(p) for p in curve_paths}
    if missing:
        # Every trials file is renamed in after its curves sibling: a missing sibling means a
        # compaction deleted it after we listed the trials. Let `_with_retries` look again.
        raise FileNotFoundError(f"curves fragment(s) missing beside trials: {sorted(missing)[:3]}")
    curves = _read(fs, curve_paths, CURVE_COLUMNS)
    kept = curves.join(winners.select(["sweep", "trial_id", "_file"]),
                       ["sweep", "trial_id", "_file"], join_type="inner")
    return kept.select(CURVE_COLUMNS.names).sort_by(
        [("sweep", "ascending"), ("trial_id", "ascending"), ("step", "ascending")])


def _curves_table(fs, base, sweeps) -> pa.Table:
    winners = _newest_trials(fs, base, sweeps, columns=[])
    paths = [p for s in sweeps for p in _fragments(fs, posixpath.join(base, s, "curves"))]
    return _attempt_curves(fs, paths, winners)


def load_trials(root, sweeps: list[str] | None = None) -> pd.DataFrame:
    """One row per trial (newest attempt) of the given sweeps (None: all), TRIAL_COLUMNS order."""
    fs, base = _filesystem(root)
    names = _sweeps(root, sweeps)
    table = _with_retries(lambda: _newest_trials(fs, base, names))
    return table.select(TRIAL_COLUMNS.names).to_pandas()


def load_curves(root, sweeps: list[str] | None = None) -> pd.DataFrame:
    """Curve rows of each trial's newest attempt, sorted by sweep, trial_id, step."""
    fs, base = _filesystem(root)
    names = _sweeps(root, sweeps)
    return _with_retries(lambda: _curves_table(fs, base, names)).to_pandas()


def completed_keys(root, sweep: str) -> dict[tuple[str, str, int], str]:
    """(key, tuned_json, seed) -> status of what a sweep already holds, for resume.

    `tuned_json` is "{}" for a trial that tuned nothing (also a row written before the
    column existed). When several trials share a triple, a completed/stopped_early one wins
    over a failed one; among equals the newest wins.
    """
    fs, base = _filesystem(root)
    validate_sweep_name(sweep)
    columns = ["key", "tuned_json", "seed", "status"]
    table = _with_retries(lambda: _newest_trials(fs, base, [sweep], columns=columns))
    rows = sorted(table.select([*columns, "finished_at"]).to_pylist(),
                  key=lambda r: (r["status"] != "failed", r["finished_at"]))
    return {(r["key"], r["tuned_json"] or "{}", r["seed"]): r["status"] for r in rows}


def compact(root, sweep: str, grace_s: float = 1.0) -> str | None:
    """Merge a sweep's fragments into one trials and one curves file; returns the trials file.

    Readers may run meanwhile: the merged pair appears (atomically) before the merged inputs
    are deleted, `grace_s` later so a directory listing in progress sees one or the other;
    duplicates in between resolve like any retry. Fragments written during compaction are
    left for the next one. Run one compaction per sweep at a time.
    """
    fs, base = _filesystem(root)
    validate_sweep_name(sweep)
    trials_dir, curves_dir = (posixpath.join(base, sweep, t) for t in ("trials", "curves"))
    trial_inputs = _fragments(fs, trials_dir)
    if len(trial_inputs) <= 1:
        return trial_inputs[0] if trial_inputs else None
    curve_inputs = _fragments(fs, curves_dir)
    # Only the listed files: a fragment written meanwhile is neither merged nor deleted.
    winners = _newest(_read(fs, trial_inputs, TRIAL_COLUMNS))
    curves = _attempt_curves(fs, curve_inputs, winners)
    name = f"compact-{_stamp()}.parquet"
    _write_atomic(fs, posixpath.join(curves_dir, name), curves)
    merged = posixpath.join(trials_dir, name)
    _write_atomic(fs, merged, winners.select(TRIAL_COLUMNS.names))
    time.sleep(grace_s)
    merged_names = {posixpath.basename(p) for p in trial_inputs}
    # Trials first (an orphan curves file is ignored), then their curves siblings only: a curves
    # file listed without its trials file is a write in flight, or a crashed one once stale.
    for path in trial_inputs:
        fs.delete_file(path)
    for path in curve_inputs:
        if posixpath.basename(path) in merged_names:
            fs.delete_file(path)
    trial_names = {posixpath.basename(p) for p in _fragments(fs, trials_dir)}
    _remove_crash_leftovers(fs, (trials_dir, curves_dir), trial_names)
    return merged


def _remove_crash_leftovers(fs, folders, trial_names: set[str], age_s: float = 3600.0) -> None:
    """Delete temporary files and orphan curves older than `age_s`: no live writer owns them."""
    cutoff = time.time() - age_s
    for folder in folders:
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            old = info.mtime is not None and info.mtime.timestamp() < cutoff
            orphan = info.base_name.endswith(".tmp") or (
                folder.endswith("curves") and info.base_name not in trial_names)
            if info.type == pafs.FileType.File and old and orphan:
                fs.delete_file(info.path)
