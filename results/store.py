"""The Parquet results store: one folder per sweep, one atomic fragment per trial.

Layout (plain Parquet; DuckDB `read_parquet('ROOT/*/trials/*.parquet')` and Polars read it):

    ROOT/SWEEP/trials/part-<trial_id>-<stamp>.parquet     one trial row
    ROOT/SWEEP/curves/part-<trial_id>-<stamp>.parquet     that attempt's curve rows
    ROOT/SWEEP/layers/part-<trial_id>-<stamp>.parquet     its per-layer analysis rows (xformer
                                                          §4), only for a trial that has them

A fragment is written under a hidden temporary name and renamed into place, so a reader
(or a crash) never sees half a file. The trials fragment is the commit record: it is
renamed last, and curves or layers files without a trials sibling of the same name are
ignored. A retried trial writes a new set; readers keep the newest row per (sweep, trial_id)
by `finished_at` and the curves and layers of that same attempt. `compact` merges the
fragments into one `compact-<stamp>.parquet` set with the same semantics; on a local root
the table folders are links into one version folder that a compaction replaces whole
(`shapesweep.results.versions`), so a raw glob never sees a row twice.

Why one module of this length: the layout, the atomic write, compaction and the
readers share one set of invariants (a raw glob never sees a row twice, a damaged
fragment is set aside once), which are easier to keep when they sit together
(`versions` holds the folder-version mechanics).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import shapesweep.results.versions as versions
from shapesweep.results.schema import (
    CURVE_COLUMNS,
    LAYER_COLUMNS,
    TRIAL_COLUMNS,
    normalize_curve_row,
    normalize_layer_row,
    normalize_trial_row,
)

from shapesweep.common import DEFAULT_ROOT, UserError, did_you_mean

SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_READ_RETRIES = 20  # a concurrent `compact` may delete a fragment between listing and reading
_BULK = 32  # from this many fragments a folder is read as one dataset scan (a running sweep's)


def validate_sweep_name(sweep: str) -> str:
    """Sweep names become folder names: letters, digits and `-_.` only, so none escapes the root."""
    if not isinstance(sweep, str) or not SWEEP_NAME.fullmatch(sweep):
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


def probe(root: str | os.PathLike) -> None:
    """Ask an object-store root's store once (pyarrow's error if it does not answer); a
    local root is not asked."""
    fs, base = _filesystem(root)
    if not isinstance(fs, pafs.LocalFileSystem):
        fs.get_file_info(base)


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
        os.replace(temp, path)
        return
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
    """The text `write_sweep_file` wrote, or None when there is none; text that is not
    UTF-8 (a garbled file) is one line naming the file and its repair."""
    fs, base = _filesystem(root)
    path = posixpath.join(base, validate_sweep_name(sweep), name)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        data = stream.read()
    try:
        return data.decode()
    except UnicodeDecodeError as error:
        raise UserError(f"cannot read (damaged: not UTF-8 text at byte {error.start}); "
                        f"{sweep_file_repair(root, sweep, name)}",
                        file=sweep_dir(root, sweep) + "/" + name) from None


def read_sweep_json(root, sweep: str, name: str, kind: type, check=None):
    """A small JSON file of the sweep (`sweep.json`, `asha.json`), or None when there is
    none. Damaged (truncated, zeroed, garbled, not a `kind`, or `check(value)` says why
    not), it is one line naming the file and its repair (exit 2), never a traceback."""
    text = read_sweep_file(root, sweep, name)
    if text is None:
        return None
    try:
        value = json.loads(text)
        problem = None if isinstance(value, kind) else f"a JSON {type(value).__name__}, not a {kind.__name__}"
    except ValueError as error:
        problem = f"not JSON: {getattr(error, 'msg', error)}"
    problem = problem or (check(value) if check else None)
    if problem:
        raise UserError(f"damaged ({problem}); {sweep_file_repair(root, sweep, name)}",
                        file=sweep_dir(root, sweep) + "/" + name)
    return value


def sweep_file_repair(root, sweep: str, name: str) -> str:
    """How to repair a damaged small file of a sweep folder, in words a user can follow.
    (The command is spelled here, not by `explain.rerun_command`, which imports this module.)"""
    if name == "sweep.json":
        where = "" if root == DEFAULT_ROOT else f" --root {root}"
        return ("to repair, run its space again under its name with the options it ran with "
                f"(shapesweep run {sweep_dir(root, sweep)}/space.yaml --name {sweep}{where} ...), "
                "which writes it anew")
    if name == "space.yaml":
        return ("to repair, copy the space file the sweep was run with over it (the catalog "
                "keeps its text)")
    if name == "asha.json":
        return ("to repair, delete it: it records the noise-aware ASHA's stop decisions only "
                "(the next run starts the record anew)")
    return "to repair, delete it"


def _own_rows(rows: list[dict], trial: dict, normalize, what: str) -> list[dict]:
    """A trial's curve or layer rows, normalised, each checked to belong to that trial."""
    out = []
    for item in rows:
        if item.get("trial_id") not in (None, trial["trial_id"]):
            raise ValueError(f"{what} row for trial {item['trial_id']!r} in trial {trial['trial_id']!r}")
        out.append(normalize({**item, "sweep": trial["sweep"], "trial_id": trial["trial_id"]}))
    return out


def write_trial(root, sweep: str, trial_row: dict, curve_rows: list[dict],
                layer_rows: list[dict] = ()) -> str:
    """Write one trial (its curve, and its layer rows if it has any) as one new set of
    fragments, the trials fragment last; returns the trials fragment path."""
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
    siblings = [("curves", CURVE_COLUMNS, _own_rows(curve_rows, row, normalize_curve_row, "curve"))]
    layers = _own_rows(layer_rows, row, normalize_layer_row, "layer")
    if layers:
        siblings.append(("layers", LAYER_COLUMNS, layers))

    fs, base = _filesystem(root)
    name = f"part-{_safe(row['trial_id'])}-{_stamp()}.parquet"
    tables = [(folder, pa.Table.from_pylist(rows, schema=schema)) for folder, schema, rows in siblings]
    with _writing(fs, posixpath.join(base, sweep)):
        for table_name in ("trials", *(folder for folder, _ in tables)):
            fs.create_dir(posixpath.join(base, sweep, table_name), recursive=True)
        for folder, table in tables:
            _write_atomic(fs, posixpath.join(base, sweep, folder, name), table)
        trial_path = posixpath.join(base, sweep, "trials", name)
        _write_atomic(fs, trial_path, pa.Table.from_pylist([row], schema=TRIAL_COLUMNS))
    return trial_path


@contextlib.contextmanager
def _writing(fs: pafs.FileSystem, folder: str):
    """A writer's hold on a local sweep (`versions`): its folders laid out, and the shared
    lock that keeps a compaction from retiring the version it writes into."""
    if not isinstance(fs, pafs.LocalFileSystem):
        _ready(fs, *posixpath.split(folder))
        yield
        return
    _ready(fs, *posixpath.split(folder))
    versions.ensure(folder)
    with versions.locked(folder, exclusive=False):
        yield


def _ready(fs: pafs.FileSystem, base: str, sweep: str) -> None:
    """A sweep folder whose version links are missing or dangling, repaired before anything
    reads or writes it (`versions.repair`; on an object store, `_restore`), with one warning
    line saying what was found; one line naming the repair where it cannot be. Never a
    fragment deleted: without this a copy that skipped the links reads as an empty sweep,
    and its next compaction would take every version for a killed one's leftovers."""
    folder = posixpath.join(base, sweep)
    if not isinstance(fs, pafs.LocalFileSystem):
        _restore(fs, folder)
        return
    try:
        done = versions.repair(folder)
    except versions.Unrepairable as error:
        raise UserError(str(error), file=folder) from None
    except OSError as error:  # a read-only copy, say
        raise UserError(f"{versions.broken(folder)}, and it cannot be repaired here "
                        f"({error.strerror or error}): run once where it can be written",
                        file=folder) from None
    if done:
        print(f"warning: {folder}: {done}", file=sys.stderr, flush=True)


def _restore(fs: pafs.FileSystem, folder: str) -> None:
    """An object-store sweep uploaded without its links: `.versions/` holds its fragments
    but no table folder does. The newest complete version's fragments are copied into the
    table folders (curves and layers first, trials, the commit record, last); `.versions`
    stays as it is. Nothing happens where `trials/` has anything."""
    if fs.get_file_info(posixpath.join(folder, "trials")).type == pafs.FileType.Directory:
        return
    stored = posixpath.join(folder, versions.VERSIONS)
    found = sorted(i.path for i in _listing(fs, stored) if i.type == pafs.FileType.Directory)
    if not found:
        return
    complete = [v for v in found if fs.get_file_info(posixpath.join(v, versions.COMPLETE)).type
                == pafs.FileType.File and not posixpath.basename(v).startswith("copied-")]
    if not complete and len(found) > 1:
        raise UserError(f"no table folders beside {len(found)} versions in {versions.VERSIONS}, none "
                        "marked complete: copy the fragments of the one to keep into trials/, "
                        "curves/ and layers/", file=folder)
    chosen = (complete or found)[-1]
    copied = 0
    for table in ("curves", "layers", "trials"):
        for info in _fragments(fs, posixpath.join(chosen, table)):
            target = posixpath.join(folder, table, info.base_name)
            if fs.get_file_info(target).type != pafs.FileType.File:
                fs.copy_file(info.path, target)
                copied += 1
    if copied:
        print(f"warning: {folder}: no table folders beside {versions.VERSIONS} (uploaded without "
              f"links?): copied the {copied} fragments of {versions.VERSIONS}/"
              f"{posixpath.basename(chosen)} into them ({versions.VERSIONS} is left as it is)",
              file=sys.stderr, flush=True)


def unknown_sweep(name: str, root, known=()) -> UserError:
    """The one line for a sweep `name` not found under `root`: the name meant and the sweeps
    there, or, where there are none (a command run from another folder), that `--root` names
    the folder the sweep was run with. `known`: names found elsewhere (the catalog, live files)."""
    names = sorted(set(known) | set(list_sweeps(root)))
    if not names:
        return UserError(f"no sweep named {name!r} under {root}, and no sweeps there: give --root, "
                         "the folder the sweep was run with (./sweeps where `run` ran)", key="name")
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return UserError(f"no sweep named {name!r} under {root} ({did_you_mean(name, names)}sweeps there: "
                     f"{shown}; --root names another folder)", key="name")


def list_sweeps(root) -> list[str]:
    """Names of the sweeps with a results folder under root, sorted.

    A sweep folder whose version links are missing is repaired first (`_ready`), or, where
    it cannot be, left out with one warning line naming the repair."""
    fs, base = _filesystem(root)
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    names = []
    for info in _listing(fs, base):
        if info.type == pafs.FileType.Directory and SWEEP_NAME.fullmatch(info.base_name):
            trials = posixpath.join(info.path, "trials")
            if fs.get_file_info(trials).type != pafs.FileType.Directory:
                local = isinstance(fs, pafs.LocalFileSystem)
                if not (versions.broken(info.path) if local else fs.get_file_info(
                        posixpath.join(info.path, versions.VERSIONS)).type == pafs.FileType.Directory):
                    continue
                try:
                    _ready(fs, base, info.base_name)
                except UserError as error:
                    print(f"warning: skipping {info.path}: {error.problem}", file=sys.stderr, flush=True)
                    continue
            if fs.get_file_info(trials).type == pafs.FileType.Directory:
                names.append(info.base_name)
    return sorted(names)


class DamagedStore(UserError):
    """Every fragment asked for is unreadable: a one-line error (exit 2; HTTP 500 when served)."""


class _Table(NamedTuple):
    """A table folder's schema, the columns a fragment must have to be one of ours, those
    that may not be null (a foreign file would otherwise show as an all-null row), and the
    columns that order a trial's rows."""

    folder: str
    schema: pa.Schema
    required: tuple[str, ...]
    not_null: tuple[str, ...]
    order: tuple[str, ...] = ()


_TRIALS = _Table("trials", TRIAL_COLUMNS, ("sweep", "trial_id", "key", "seed", "status"),
                 ("sweep", "trial_id", "status"))
_CURVES = _Table("curves", CURVE_COLUMNS, ("sweep", "trial_id", "step"), ("sweep", "trial_id"),
                 ("step",))
_LAYERS = _Table("layers", LAYER_COLUMNS, ("sweep", "trial_id", "layer"), ("sweep", "trial_id"),
                 ("layer", "threshold"))
_KINDS = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_timestamp,
          pa.types.is_list, lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))


class _Damaged(Exception):
    """A fragment that cannot be read as a row of its table; the message says why."""


def _unreadable(path: str, error: OSError) -> UserError:
    """A file or folder we may not open is no damage: one line naming it (exit 2); it is
    never moved, and its trial never run again."""
    reason = os.strerror(error.errno).lower() if error.errno else "permission denied"
    return UserError(f"cannot read ({reason}): give this process access to it", file=path)


def _schema_problem(found: pa.Schema, table: _Table) -> str | None:
    """Why a fragment's schema is not its table's, or None. Types must be of the same kind
    (a whole number where a whole number belongs): a foreign file's numbers never become names."""
    if found.equals(table.schema):  # what write_trial and compact write
        return None
    missing = [name for name in table.required if name not in found.names]
    if missing:
        return f"not a {table.folder} fragment (no column {', '.join(missing)})"
    for field in found:
        want = table.schema.field(field.name).type if field.name in table.schema.names else None
        if want is not None and field.type != want and not any(
                kind(field.type) and kind(want) for kind in _KINDS):
            return f"column {field.name!r} is {field.type}, not {want}"
    return None


def _conform(found: pa.Table, schema: pa.Schema, names: list[str]) -> list[pa.ChunkedArray]:
    """The `names` columns in `schema`'s types; a column the fragment predates is null."""
    present = set(found.column_names)
    if present.issuperset(names):
        selected = found.select(names)
        if selected.schema.equals(pa.schema([schema.field(n) for n in names])):
            return selected.columns
    return [found[n].cast(schema.field(n).type) if n in present
            else pa.nulls(found.num_rows, schema.field(n).type) for n in names]


def _describe(error: Exception) -> str:
    """pyarrow's error as a short problem: its first line, named plainly when we can."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    if "size is 0 bytes" in text:
        return "empty file (0 bytes)"
    if "magic bytes not found" in text:
        return "not a Parquet file (truncated?)"
    return f"damaged Parquet file ({text})"


def _read_fragment(fs: pafs.FileSystem, path: str, table: _Table, names: list[str]) -> pa.Table:
    """One fragment's `names` columns in its table's types (columns it predates are null),
    plus `_file`; raises _Damaged. One open: the footer gives the schema, then the columns."""
    try:
        with fs.open_input_file(path) as handle:
            # pre-buffering coalesces an object store's requests; it only slows a local read
            parquet = pq.ParquetFile(handle, pre_buffer=not isinstance(fs, pafs.LocalFileSystem))
            schema = parquet.schema_arrow  # built anew at each access
            problem = _schema_problem(schema, table)
            if problem:
                raise _Damaged(problem)
            wanted = dict.fromkeys([*table.required, *names])
            found = parquet.read([n for n in wanted if n in schema.names], use_threads=False)
        nulls = [name for name in table.not_null if found[name].null_count]
        if nulls:
            raise _Damaged(f"not a {table.folder} fragment (null {', '.join(nulls)})")
        columns = _conform(found, table.schema, names)
    except FileNotFoundError:
        raise  # a concurrent compaction removed it: `_with_retries` lists again
    except PermissionError as error:
        raise _unreadable(path, error) from None
    except (pa.ArrowException, OSError) as error:
        raise _Damaged(_describe(error)) from None
    files = pa.array([posixpath.basename(path)] * found.num_rows, pa.string())
    return pa.Table.from_arrays([*columns, files], [*names, "_file"])


def _read_or_problem(fs, path: str, table: _Table, names: list[str]) -> pa.Table | str:
    try:
        return _read_fragment(fs, path, table, names)
    except _Damaged as damage:
        return str(damage)


def _read_fragments(fs, paths: list[str], table: _Table, names: list[str]) -> list[pa.Table | str]:
    """Each file's rows, or the problem that made it unreadable; threads hide object-store latency."""
    if len(paths) < 2:
        return [_read_or_problem(fs, p, table, names) for p in paths]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda p: _read_or_problem(fs, p, table, names), paths))


_warned: set[tuple[str, str]] = set()


def _warn(path: str, problem: str) -> None:
    """One line on stderr per damaged file and process, however many readers meet it."""
    if (path, problem) not in _warned:
        _warned.add((path, problem))
        print(f"warning: skipping {path}: {problem}", file=sys.stderr, flush=True)


def _fragments(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    """Visible Parquet files of one table folder (temporary names start with '.'), by path."""
    version = _version(fs, folder)
    infos = sorted(
        (info for info in _listing(fs, folder)
         if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
         and not info.base_name.startswith((".", "_"))),
        key=lambda info: info.path,
    )
    if not infos and _version(fs, folder) != version:
        # An empty listing is also what a version retired mid-listing gives (`versions`): a
        # compaction swapped the folder meanwhile, and `_with_retries` lists it again.
        raise FileNotFoundError(f"{folder} was compacted while listing it")
    return infos


def _listing(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    """A folder's entries (none when it does not exist); one we may not list is one line."""
    try:
        return fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except PermissionError as error:
        raise _unreadable(folder, error) from None


def _version(fs: pafs.FileSystem, folder: str) -> str:
    """The folder a local table folder's links resolve to now (the sweep's current version);
    the path itself elsewhere (object stores have no links)."""
    return os.path.realpath(folder) if isinstance(fs, pafs.LocalFileSystem) else folder


def _footer(fragment: ds.ParquetFileFragment) -> pa.Schema | None:
    """A fragment's schema (its footer, kept for the scan), or None when it cannot be read."""
    try:
        return fragment.physical_schema
    except (pa.ArrowException, OSError):
        return None


def _read_bulk(fs, paths: list[str], table: _Table, names: list[str]):
    """Rows and problems of many fragments: one dataset scan of those whose footer is one of
    ours, each other read alone (so its problem is named, or a vanished file retried). A
    scan costs less per file than opening each: the cost follows the rows, not the files."""
    dataset = ds.dataset(paths, schema=table.schema, format="parquet", filesystem=fs)
    fragments = list(dataset.get_fragments())
    with ThreadPoolExecutor(max_workers=8) as pool:  # footers in parallel: object-store latency
        schemas = list(pool.map(_footer, fragments))
    ours = [f for f, schema in zip(fragments, schemas, strict=True)
            if schema is not None and _schema_problem(schema, table) is None]
    try:
        rows = ds.FileSystemDataset(ours, table.schema, ds.ParquetFileFormat(), fs).to_table(
            columns=[*dict.fromkeys([*table.not_null, *names]), "__filename"])
    except (pa.ArrowException, OSError):  # changed under us: file by file names why
        return _combine(paths, _read_fragments(fs, paths, table, names), table, names)
    if any(rows[name].null_count for name in table.not_null):  # a foreign file: name it
        return _combine(paths, _read_fragments(fs, paths, table, names), table, names)
    files = pc.replace_substring_regex(rows["__filename"], r"^.*/", "")
    rows = pa.Table.from_arrays([*rows.select(names).columns, files], [*names, "_file"])
    read = {f.path for f in ours}
    others = [p for p in paths if p not in read]
    rest, damaged = _combine(others, _read_fragments(fs, others, table, names), table, names)
    return pa.concat_tables([rows, rest]), damaged


class _Scan(NamedTuple):
    rows: pa.Table  # the readable fragments' rows, plus `_file` (the fragment's base name)
    listed: list[str]  # every visible fragment's path, readable or not
    damaged: dict[str, str]  # path -> why it cannot be read
    bad_rows: dict[str, set[str]] = {}  # path -> trial_ids of its rows left out (`_bad_json`)


_JSON_COLUMNS = ("config_json", "tuned_json")  # each a JSON object where it is not null


def _bad_json(rows: pa.Table) -> np.ndarray | None:
    """Which trial rows hold a JSON column that is not a JSON object (a fragment edited or
    damaged inside one value, which Parquet's checks do not see); None when none does."""
    present = [c for c in _JSON_COLUMNS if c in rows.column_names]
    if not present or not rows.num_rows:
        return None
    bad = np.zeros(rows.num_rows, bool)
    for column in present:
        for i, text in enumerate(rows[column].to_pylist()):
            if text is None or bad[i]:
                continue
            try:
                bad[i] = not isinstance(json.loads(text), dict)
            except ValueError:
                bad[i] = True
    return bad if bad.any() else None


def _empty(table: _Table, names: list[str]) -> pa.Table:
    return table.schema.empty_table().select(names).append_column("_file", pa.array([], pa.string()))


def _combine(paths: list[str], results: list, table: _Table, names: list[str]):
    """Rows of the readable results (one table) and the problems of the others, by path."""
    tables = [r for r in results if not isinstance(r, str)]
    damaged = {p: r for p, r in zip(paths, results, strict=True) if isinstance(r, str)}
    return pa.concat_tables([_empty(table, names), *tables]), damaged


def _read_each(fs, paths: list[str], table: _Table, names: list[str]) -> list[pa.Table | str]:
    """Each file's rows or problem, as `_read_fragments` gives them; many files are read in
    one scan (`_read_bulk`) and its rows split by file, which costs less than opening each."""
    if len(paths) < _BULK:
        return _read_fragments(fs, paths, table, names)
    rows, damaged = _read_bulk(fs, paths, table, names)
    rows = rows.sort_by("_file")  # a stable sort: each file's rows keep their order
    files = rows["_file"].to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]]) if len(files) else []
    ends = [*starts[1:], len(files)]
    own = {files[start]: rows.slice(start, end - start) for start, end in zip(starts, ends, strict=True)}
    empty = _empty(table, names)
    return [damaged.get(p) or own.get(posixpath.basename(p), empty) for p in paths]


class FragmentCache:
    """Fragments already read, for a long-lived reader (the live dashboard): a fragment is
    read again only when its path, size or mtime is new, and forgotten once it vanishes.
    Fragment names are unique and written once, so path, size and mtime pin the content."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one reader fills the cache; the others wait, then share
        self._files: dict[str, tuple[tuple, pa.Table | str]] = {}  # path -> (stamp, rows or problem)
        self._bad: dict[str, set[str]] = {}  # path -> trial ids of rows left out (`_drop_bad`)
        # folder -> (listing, rows, damaged, bad rows)
        self._folders: dict[str, tuple[tuple, pa.Table, dict, dict]] = {}

    def folder(self, fs, folder: str, infos: list[pafs.FileInfo], table: _Table):
        """Every column of a folder's readable fragments (less the rows `_drop_bad` leaves
        out, checked once per fragment), the damaged ones, and the rows left out."""
        listing = tuple((i.path, i.size, i.mtime_ns) for i in infos)
        with self._lock:
            cached = self._folders.get(folder)
            if cached is not None and cached[0] == listing:
                return cached[1:]
            stamps = {path: (size, mtime) for path, size, mtime in listing}
            fresh = [p for p in stamps if self._files.get(p, (None,))[0] != stamps[p]]
            names = table.schema.names
            results = _read_each(fs, fresh, table, names)
            if table is _TRIALS:
                results = [self._checked(fs, path, result) for path, result in zip(fresh, results, strict=True)]
            gone = [p for p in self._files if posixpath.dirname(p) == folder and p not in stamps]
            appended = cached is not None and not gone and not any(p in self._files for p in fresh)
            for path, result in zip(fresh, results, strict=True):
                self._files[path] = (stamps[path], result)
            for path in gone:
                del self._files[path]
                self._bad.pop(path, None)
            if appended:  # only new fragments (trials landing): add their rows to those combined
                rows, damaged = _combine(fresh, results, table, names)
                rows, damaged = pa.concat_tables([cached[1], rows]), {**cached[2], **damaged}
            else:
                rows, damaged = _combine(list(stamps), [self._files[p][1] for p in stamps], table, names)
            bad = {p: self._bad[p] for p in stamps if p in self._bad}
            self._folders[folder] = (listing, rows.combine_chunks(), damaged, bad)  # one chunk: fast sorts
            return self._folders[folder][1:]

    def _checked(self, fs, path: str, result: pa.Table | str) -> pa.Table | str:
        self._bad.pop(path, None)
        if isinstance(result, str):
            return result
        rows, bad = _drop_bad(result, posixpath.dirname(path))
        if bad:
            self._bad[path] = bad[path]
        return rows


def _drop_bad(rows: pa.Table, folder: str) -> tuple[pa.Table, dict[str, set[str]]]:
    """Trial rows less those `_bad_json` finds, and those by fragment path: trial ids."""
    bad = _bad_json(rows)
    if bad is None:
        return rows, {}
    found: dict[str, set[str]] = {}
    left_out = rows.filter(bad)
    for file, trial_id in zip(left_out["_file"].to_pylist(), left_out["trial_id"].to_pylist(), strict=True):
        found.setdefault(posixpath.join(folder, file), set()).add(trial_id)
    return rows.filter(~bad), found


def _scan(fs, folder: str, table: _Table, columns=None, cache: FragmentCache | None = None,
          warn: bool = True) -> _Scan:
    """Read a table folder: each fragment once, a damaged or foreign one skipped (and named)."""
    infos = _fragments(fs, folder)
    names = list(columns or table.schema.names)
    # a trial row is read with its JSON columns, whatever is asked: each reader skips the same rows
    read = list(dict.fromkeys([*names, *(("trial_id", *_JSON_COLUMNS) if table is _TRIALS else ())]))
    if cache is None:
        paths = [info.path for info in infos]
        rows, damaged = (_read_bulk(fs, paths, table, read) if len(paths) >= _BULK else
                         _combine(paths, _read_fragments(fs, paths, table, read), table, read))
        rows, bad_rows = _drop_bad(rows, folder) if table is _TRIALS else (rows, {})
    else:
        rows, damaged, bad_rows = cache.folder(fs, folder, infos, table)
    rows = rows.select([*names, "_file"])
    if warn:
        for path, problem in damaged.items():
            _warn(path, problem)
        for path, trial_ids in bad_rows.items():
            _warn(path, f"trial(s) {', '.join(sorted(trial_ids))}: config_json or tuned_json is not a "
                        "JSON object (row skipped; resume runs the trial again)")
    return _Scan(rows, [info.path for info in infos], damaged, bad_rows)


def _sweeps(root, sweeps: list[str] | None) -> list[str]:
    """The sweeps asked for (None: all), each ready to read (`_ready`)."""
    if sweeps is None:
        return list_sweeps(root)
    fs, base = _filesystem(root)
    for sweep in sweeps:
        _ready(fs, base, validate_sweep_name(sweep))
    return list(sweeps)


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
    keys = table.select(["sweep", "trial_id", "finished_at", "_file"]).append_column(
        "_row", pa.array(range(table.num_rows), pa.int64()))  # sort the keys; take the rows once
    order = keys.sort_by([("sweep", "ascending"), ("trial_id", "ascending"),
                          ("finished_at", "descending"), ("_file", "descending")])
    order = order.append_column("_at", pa.array(range(order.num_rows), pa.int64()))
    first = order.group_by(["sweep", "trial_id"], use_threads=False).aggregate([("_at", "first")])
    positions = first["_at_first"].take(pc.sort_indices(first["_at_first"]))
    return table.take(order["_row"].take(positions))


def _newest_trials(fs, base: str, sweeps: list[str], columns=None,
                   cache: FragmentCache | None = None) -> pa.Table:
    """The newest row per (sweep, trial_id), with `_file` naming the fragment it came from.
    Damaged fragments are skipped with a warning; when nothing is readable, that is an error."""
    if columns is not None:
        columns = list(dict.fromkeys(["sweep", "trial_id", "finished_at", *columns]))
    scans = [_scan(fs, posixpath.join(base, s, "trials"), _TRIALS, columns, cache) for s in sweeps]
    damaged = sum(len(scan.damaged) for scan in scans)
    if damaged and damaged == sum(len(scan.listed) for scan in scans):
        raise DamagedStore(
            f"none of its {damaged} trials fragment(s) can be read (each is named above); "
            "move them out of trials/ to run those trials again",
            file=posixpath.join(base, sweeps[0]) if len(sweeps) == 1 else base)
    empty = _empty(_TRIALS, columns or TRIAL_COLUMNS.names)
    return _newest(pa.concat_tables([empty, *(scan.rows for scan in scans)]))


def _attempt_curves(curves: pa.Table, listed: list[str], winners: pa.Table,
                    missing_ok: bool = False, quarantined: frozenset = frozenset()) -> pa.Table:
    """The curve rows written together with each winning trial row (same file name).
    `quarantined`: (sweep, name) of curves a compaction moved to `damaged/` (`_held`)."""
    names = {posixpath.basename(p) for p in listed}
    missing = [(s, f) for s, f in zip(winners["sweep"].to_pylist(), winners["_file"].to_pylist(),
                                      strict=True) if f not in names]
    for sweep, name in [m for m in missing if m in quarantined]:
        _warn(f"{sweep}/curves/{name}", "damaged, moved to damaged/curves/ (resume runs its "
                                        "trials again; until then they show no curve)")
    missing = [m for m in missing if m not in quarantined]
    if missing and not missing_ok:
        # Every trials file is renamed in after its curves sibling: a missing sibling means a
        # compaction deleted it after we listed the trials. Let `_with_retries` look again.
        raise FileNotFoundError(f"curves fragment(s) missing beside trials: {missing[:3]}")
    for sweep, name in missing:  # deleted by hand: the trial stays, without its curve
        _warn(f"{sweep}/curves/{name}", "missing beside its trials fragment (no curve shown)")
    return _attempt_rows(curves, winners, _CURVES)


def _attempt_rows(rows: pa.Table, winners: pa.Table, table: _Table) -> pa.Table:
    """The rows of a curves or layers folder written with each winning trial row (same file name)."""
    kept = rows.join(winners.select(["sweep", "trial_id", "_file"]),
                     ["sweep", "trial_id", "_file"], join_type="inner")
    order = ["sweep", "trial_id", *table.order]
    return kept.select(table.schema.names).sort_by([(name, "ascending") for name in order])


def _curves_table(fs, base, sweeps, cache=None, missing_ok: bool = False) -> pa.Table:
    winners = _newest_trials(fs, base, sweeps, columns=[], cache=cache)
    scans = [_scan(fs, posixpath.join(base, s, "curves"), _CURVES, cache=cache) for s in sweeps]
    rows = pa.concat_tables([_empty(_CURVES, CURVE_COLUMNS.names), *(s.rows for s in scans)])
    quarantined = frozenset((s, name) for s in sweeps
                            for name in _quarantined(fs, posixpath.join(base, s), ("curves",)))
    return _attempt_curves(rows, [p for scan in scans for p in scan.listed], winners, missing_ok,
                           quarantined)


def _quarantined(fs, folder: str, tables=("curves", "layers")) -> set[str]:
    """Names of the sweep's curves or layers fragments a compaction moved to `damaged/`:
    the trials written with them lost their curve (or layers), so `resume` runs them again."""
    return {info.base_name for table in tables
            for info in _listing(fs, posixpath.join(folder, "damaged", table))
            if info.type == pafs.FileType.File}


def _layers_table(fs, base, sweeps, cache=None) -> pa.Table:
    if not any(_fragments(fs, posixpath.join(base, s, "layers")) for s in sweeps):
        return LAYER_COLUMNS.empty_table()  # no trial analysed: spare reading the trials
    winners = _newest_trials(fs, base, sweeps, columns=[], cache=cache)
    scans = [_scan(fs, posixpath.join(base, s, "layers"), _LAYERS, cache=cache) for s in sweeps]
    # Only analysed trials have a layers file, so a missing one cannot reveal a concurrent
    # compaction as a missing curves file does; a winner's trials file gone by now can.
    present = {(s, info.base_name) for s in sweeps
               for info in _fragments(fs, posixpath.join(base, s, "trials"))}
    gone = [(s, f) for s, f in zip(winners["sweep"].to_pylist(), winners["_file"].to_pylist(),
                                   strict=True) if (s, f) not in present]
    if gone:
        raise FileNotFoundError(f"trials fragment(s) compacted while reading layers: {gone[:3]}")
    rows = pa.concat_tables([_empty(_LAYERS, LAYER_COLUMNS.names), *(s.rows for s in scans)])
    return _attempt_rows(rows, winners, _LAYERS)


def load_trials(root, sweeps: list[str] | None = None, *,
                cache: FragmentCache | None = None) -> pd.DataFrame:
    """One row per trial (newest attempt) of the given sweeps (None: all), TRIAL_COLUMNS order.
    A damaged fragment is skipped with one warning line; none readable is a DamagedStore."""
    fs, base = _filesystem(root)
    names = _sweeps(root, sweeps)
    table = _with_retries(lambda: _newest_trials(fs, base, names, cache=cache))
    return table.select(TRIAL_COLUMNS.names).to_pandas()


def load_curves(root, sweeps: list[str] | None = None, *,
                cache: FragmentCache | None = None) -> pd.DataFrame:
    """Curve rows of each trial's newest attempt, sorted by sweep, trial_id, step."""
    fs, base = _filesystem(root)
    names = _sweeps(root, sweeps)
    try:
        table = _with_retries(lambda: _curves_table(fs, base, names, cache))
    except FileNotFoundError:  # a curves fragment gone for good: its trial stays, without a curve
        table = _curves_table(fs, base, names, cache, missing_ok=True)
    return table.to_pandas()


def load_layers(root, sweeps: list[str] | None = None, *,
                cache: FragmentCache | None = None) -> pd.DataFrame:
    """Layer rows (`shapesweep.trainers.analysis`) of each trial's newest attempt, sorted by sweep,
    trial_id, layer, threshold; a trial that was not analysed has none."""
    fs, base = _filesystem(root)
    names = _sweeps(root, sweeps)
    return _with_retries(lambda: _layers_table(fs, base, names, cache)).to_pandas()


def completed_keys(root, sweep: str) -> dict[tuple[str, str, int], str]:
    """(key, tuned_json, seed) -> status of what a sweep already holds, for resume; a trial
    whose curves or layers a compaction quarantined is not held (it runs again).

    `tuned_json` is "{}" for a trial that tuned nothing (also a row written before the
    column existed). When several trials share a triple, a completed/stopped_early one wins
    over a failed one; among equals the newest wins.
    """
    fs, base = _filesystem(root)
    _sweeps(root, [sweep])
    columns = ["key", "tuned_json", "seed", "status"]
    table = _with_retries(lambda: _newest_trials(fs, base, [sweep], columns=columns))
    lost = _quarantined(fs, posixpath.join(base, sweep))  # their curves or layers are damaged
    rows = sorted((r for r in table.select([*columns, "finished_at", "_file"]).to_pylist()
                   if r["_file"] not in lost),
                  key=lambda r: (r["status"] != "failed", r["finished_at"]))
    return {(r["key"], r["tuned_json"] or "{}", r["seed"]): r["status"] for r in rows}


def quarantined_trials(root, sweep: str) -> set[str]:
    """Trial ids whose newest row sits beside curves or layers a compaction quarantined
    (`_held`): the store keeps the row, but `resume` runs the trial again."""
    fs, base = _filesystem(root)
    _sweeps(root, [sweep])
    lost = _quarantined(fs, posixpath.join(base, sweep))
    if not lost:
        return set()
    table = _with_retries(lambda: _newest_trials(fs, base, [sweep], columns=[]))
    return {t for t, f in zip(table["trial_id"].to_pylist(), table["_file"].to_pylist(), strict=True)
            if f in lost}


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
    lost. A sweep whose version links are missing is repaired first (`_ready`). Leftovers older than `stale_s` are deleted: temporary
    files of killed writers, curves or layers whose trial never landed, and live curves
    (`shapesweep.results.live`) no evaluation has appended to since; so are versions a
    killed compaction left. `stale_s=0` is for a caller that knows no writer of this sweep
    runs (the driver holding it).
    """
    fs, base = _filesystem(root)
    folder = posixpath.join(base, validate_sweep_name(sweep))
    local = isinstance(fs, pafs.LocalFileSystem)
    if local and not os.path.isdir(folder):
        return None  # nothing written yet: make nothing
    _ready(fs, base, sweep)  # never a version taken for a killed compaction's leftover
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
    trials = _scan(fs, trials_dir, _TRIALS, warn=False)
    curves = _scan(fs, curves_dir, _CURVES, warn=False)
    layers = _scan(fs, layers_dir, _LAYERS, warn=False)
    moved = _set_aside(fs, folder, trials, curves, layers)
    readable = [p for p in trials.listed if p not in moved]
    held = _held(fs, folder, readable, trials.rows) | _holding_bad_rows(trials)
    inputs = [p for p in readable if p not in held]
    if len(inputs) < 2:
        return inputs[0] if inputs else None
    # Only the listed files: on an object store a fragment written meanwhile is neither
    # merged nor deleted.
    kept = pa.array(sorted(posixpath.basename(p) for p in inputs), pa.string())
    winners = _newest(trials.rows.filter(pc.is_in(trials.rows["_file"], kept)))
    merged_tables = {
        "curves": _attempt_curves(curves.rows, curves.listed, winners, missing_ok=True),
        "layers": _attempt_rows(layers.rows, winners, _LAYERS),
        "trials": winners.select(TRIAL_COLUMNS.names),  # last: the commit record
    }
    name = f"compact-{_stamp()}.parquet"
    merged_names = {posixpath.basename(p) for p in inputs}
    if local:
        version = versions.new_version(folder)
        for table, rows in merged_tables.items():
            if rows.num_rows or table != "layers":
                _write_atomic(fs, posixpath.join(version, table, name), rows)
            versions.carry(posixpath.join(folder, table), posixpath.join(version, table),
                           skip=merged_names)
        retired = versions.publish(folder, versions.mark_complete(version))
        time.sleep(grace_s)
        versions.retire(retired)
        return posixpath.join(trials_dir, name)
    for table, rows in merged_tables.items():
        if rows.num_rows or table != "layers":
            fs.create_dir(posixpath.join(folder, table), recursive=True)
            _write_atomic(fs, posixpath.join(folder, table, name), rows)
    time.sleep(grace_s)
    # Trials first (an orphan curves or layers file is ignored), then their siblings only:
    # a sibling listed without its trials file is a write in flight, or a crashed one.
    for path in inputs:
        fs.delete_file(path)
    for path in [*curves.listed, *layers.listed]:
        if path not in moved and posixpath.basename(path) in merged_names:
            fs.delete_file(path)
    return posixpath.join(trials_dir, name)


def _set_aside(fs, folder: str, trials: _Scan, *siblings: _Scan) -> set[str]:
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
    quarantined = _quarantined(fs, folder)
    named = [p for p in readable if posixpath.basename(p) in quarantined]
    if not named:
        return set()
    names = pa.array(sorted({posixpath.basename(p) for p in readable}), pa.string())
    winning = set(_newest(rows.filter(pc.is_in(rows["_file"], names)))["_file"].to_pylist())
    return {p for p in named if posixpath.basename(p) in winning}


def _holding_bad_rows(trials: _Scan) -> set[str]:
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
    trial_names = {info.base_name for info in _fragments(fs, trials_dir)}
    cutoff = time.time() - stale_s
    for where in (folder, trials_dir, *sibling_dirs, live_dir):
        for info in fs.get_file_info(pafs.FileSelector(where, allow_not_found=True)):
            old = info.mtime is not None and info.mtime.timestamp() <= cutoff
            orphan = info.base_name.endswith(".tmp") or where == live_dir or (
                where in sibling_dirs and info.base_name not in trial_names)
            if info.type == pafs.FileType.File and old and orphan:
                with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
                    fs.delete_file(info.path)
