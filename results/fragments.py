"""Reading a table folder's fragments: each once, a damaged or foreign one named and skipped.

A fragment is one Parquet file of `trials/`, `curves/` or `layers/`; `scan_fragments` reads a whole
folder (one dataset scan from `BULK` fragments on), checks each file's schema against its
table's, and leaves out a trial row whose JSON columns are not JSON objects. Readers that
race a compaction list and read again (`with_retries`).
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from shapesweep.common import UserError
from shapesweep.results.schema import CURVE_COLUMNS, LAYER_COLUMNS, TRIAL_COLUMNS

_READ_RETRIES = 20  # a concurrent `compact` may delete a fragment between listing and reading
BULK = 32  # from this many fragments a folder is read as one dataset scan (a running sweep's)


class DamagedStore(UserError):
    """Every fragment asked for is unreadable: a one-line error (exit 2; HTTP 500 when served)."""


class FragmentTable(NamedTuple):
    """A table folder's schema, the columns a fragment must have to be one of ours, those
    that may not be null (a foreign file would otherwise show as an all-null row), and the
    columns that order a trial's rows."""

    folder: str
    schema: pa.Schema
    required: tuple[str, ...]
    not_null: tuple[str, ...]
    order: tuple[str, ...] = ()


TRIALS = FragmentTable("trials", TRIAL_COLUMNS, ("sweep", "trial_id", "key", "seed", "status"),
                 ("sweep", "trial_id", "status"))
CURVES = FragmentTable("curves", CURVE_COLUMNS, ("sweep", "trial_id", "step"), ("sweep", "trial_id"),
                 ("step",))
LAYERS = FragmentTable("layers", LAYER_COLUMNS, ("sweep", "trial_id", "layer"), ("sweep", "trial_id"),
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


def _schema_problem(found: pa.Schema, table: FragmentTable) -> str | None:
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


def _read_fragment(fs: pafs.FileSystem, path: str, table: FragmentTable, names: list[str]) -> pa.Table:
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
        raise  # a concurrent compaction removed it: `with_retries` lists again
    except PermissionError as error:
        raise _unreadable(path, error) from None
    except (pa.ArrowException, OSError) as error:
        raise _Damaged(_describe(error)) from None
    files = pa.array([posixpath.basename(path)] * found.num_rows, pa.string())
    return pa.Table.from_arrays([*columns, files], [*names, "_file"])


def _read_or_problem(fs, path: str, table: FragmentTable, names: list[str]) -> pa.Table | str:
    try:
        return _read_fragment(fs, path, table, names)
    except _Damaged as damage:
        return str(damage)


def _read_fragments(fs, paths: list[str], table: FragmentTable, names: list[str]) -> list[pa.Table | str]:
    """Each file's rows, or the problem that made it unreadable; threads hide object-store latency."""
    if len(paths) < 2:
        return [_read_or_problem(fs, p, table, names) for p in paths]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda p: _read_or_problem(fs, p, table, names), paths))


_warned: set[tuple[str, str]] = set()


def warn_damaged(path: str, problem: str) -> None:
    """One line on stderr per damaged file and process, however many readers meet it."""
    if (path, problem) not in _warned:
        _warned.add((path, problem))
        print(f"warning: skipping {path}: {problem}", file=sys.stderr, flush=True)


def fragment_files(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    """Visible Parquet files of one table folder (temporary names start with '.'), by path."""
    version = _version(fs, folder)
    infos = sorted(
        (info for info in fragment_listing(fs, folder)
         if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
         and not info.base_name.startswith((".", "_"))),
        key=lambda info: info.path,
    )
    if not infos and _version(fs, folder) != version:
        # An empty listing is also what a version retired mid-listing gives (`versions`): a
        # compaction swapped the folder meanwhile, and `with_retries` lists it again.
        raise FileNotFoundError(f"{folder} was compacted while listing it")
    return infos


def fragment_listing(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
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


def _read_bulk(fs, paths: list[str], table: FragmentTable, names: list[str]):
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


class Scan(NamedTuple):
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


def empty_frame(table: FragmentTable, names: list[str]) -> pa.Table:
    return table.schema.empty_table().select(names).append_column("_file", pa.array([], pa.string()))


def _combine(paths: list[str], results: list, table: FragmentTable, names: list[str]):
    """Rows of the readable results (one table) and the problems of the others, by path."""
    tables = [r for r in results if not isinstance(r, str)]
    damaged = {p: r for p, r in zip(paths, results, strict=True) if isinstance(r, str)}
    return pa.concat_tables([empty_frame(table, names), *tables]), damaged


def _read_each(fs, paths: list[str], table: FragmentTable, names: list[str]) -> list[pa.Table | str]:
    """Each file's rows or problem, as `_read_fragments` gives them; many files are read in
    one scan (`_read_bulk`) and its rows split by file, which costs less than opening each."""
    if len(paths) < BULK:
        return _read_fragments(fs, paths, table, names)
    rows, damaged = _read_bulk(fs, paths, table, names)
    rows = rows.sort_by("_file")  # a stable sort: each file's rows keep their order
    files = rows["_file"].to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]]) if len(files) else np.array([], int)
    ends = [*starts[1:], len(files)]
    own = {files[start]: rows.slice(start, end - start) for start, end in zip(starts, ends, strict=True)}
    empty = empty_frame(table, names)
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

    def folder(self, fs, folder: str, infos: list[pafs.FileInfo], table: FragmentTable):
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
            if table is TRIALS:
                results = [self._checked(fs, path, result) for path, result in zip(fresh, results, strict=True)]
            gone = [p for p in self._files if posixpath.dirname(p) == folder and p not in stamps]
            appended = cached is not None and not gone and not any(p in self._files for p in fresh)
            for path, result in zip(fresh, results, strict=True):
                self._files[path] = (stamps[path], result)
            for path in gone:
                del self._files[path]
                self._bad.pop(path, None)
            if appended and cached is not None:  # only new fragments (trials landing): add their rows to those combined
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


def scan_fragments(fs, folder: str, table: FragmentTable, columns=None, cache: FragmentCache | None = None,
          warn: bool = True) -> Scan:
    """Read a table folder: each fragment once, a damaged or foreign one skipped (and named)."""
    infos = fragment_files(fs, folder)
    names = list(columns or table.schema.names)
    # a trial row is read with its JSON columns, whatever is asked: each reader skips the same rows
    read = list(dict.fromkeys([*names, *(("trial_id", *_JSON_COLUMNS) if table is TRIALS else ())]))
    if cache is None:
        paths = [info.path for info in infos]
        rows, damaged = (_read_bulk(fs, paths, table, read) if len(paths) >= BULK else
                         _combine(paths, _read_fragments(fs, paths, table, read), table, read))
        rows, bad_rows = _drop_bad(rows, folder) if table is TRIALS else (rows, {})
    else:
        rows, damaged, bad_rows = cache.folder(fs, folder, infos, table)
    rows = rows.select([*names, "_file"])
    if warn:
        for path, problem in damaged.items():
            warn_damaged(path, problem)
        for path, trial_ids in bad_rows.items():
            warn_damaged(path, f"trial(s) {', '.join(sorted(trial_ids))}: config_json or tuned_json is not a "
                        "JSON object (row skipped; resume runs the trial again)")
    return Scan(rows, [info.path for info in infos], damaged, bad_rows)



def with_retries(read):
    """Run a listing+read, again if a concurrent compaction removed a file in between."""
    for attempt in range(_READ_RETRIES):
        try:
            return read()
        except FileNotFoundError:
            if attempt == _READ_RETRIES - 1:
                raise
            time.sleep(0.05)


def newest_attempts(table: pa.Table) -> pa.Table:
    """Keep the newest row per (sweep, trial_id): latest `finished_at`, then latest file name."""
    keys = table.select(["sweep", "trial_id", "finished_at", "_file"]).append_column(
        "_row", pa.array(range(table.num_rows), pa.int64()))  # sort the keys; take the rows once
    order = keys.sort_by([("sweep", "ascending"), ("trial_id", "ascending"),
                          ("finished_at", "descending"), ("_file", "descending")])
    order = order.append_column("_at", pa.array(range(order.num_rows), pa.int64()))
    first = order.group_by(["sweep", "trial_id"], use_threads=False).aggregate([("_at", "first")])
    positions = first["_at_first"].take(pc.sort_indices(first["_at_first"]))
    return table.take(order["_row"].take(positions))
