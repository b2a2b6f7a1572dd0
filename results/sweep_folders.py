"""A sweep's folder: listed, made ready (its version links repaired) and written into.

`write_trial` is the one writer of trial rows: one new set of fragments per attempt, the
trials fragment (the commit record) renamed in last.
"""

from __future__ import annotations

import contextlib
import posixpath
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs

import shapesweep.results.versions as versions
from shapesweep.common import UserError, did_you_mean
from shapesweep.results.fragments import fragment_files, fragment_listing
from shapesweep.results.layout import (
    SWEEP_NAME,
    filesystem,
    safe,
    stamp,
    validate_sweep_name,
    write_atomic,
)
from shapesweep.results.schema import (
    CURVE_COLUMNS,
    LAYER_COLUMNS,
    TRIAL_COLUMNS,
    normalize_curve_row,
    normalize_layer_row,
    normalize_trial_row,
)


def _own_rows(rows: Sequence[dict], trial: dict, normalize, what: str) -> list[dict]:
    """A trial's curve or layer rows, normalised, each checked to belong to that trial."""
    out = []
    for item in rows:
        if item.get("trial_id") not in (None, trial["trial_id"]):
            raise ValueError(f"{what} row for trial {item['trial_id']!r} in trial {trial['trial_id']!r}")
        out.append(normalize({**item, "sweep": trial["sweep"], "trial_id": trial["trial_id"]}))
    return out


def prepare_trial(sweep: str, trial_row: dict, curve_rows: list[dict],
                  layer_rows: Sequence[dict] = ()) -> tuple[dict, list[dict], list[dict]]:
    """A trial's row, curve rows and layer rows as every store keeps them: normalised, each
    checked to belong to that sweep and trial (a ValueError before anything is written),
    `finished_at` now where the row has none."""
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
    return (row, _own_rows(curve_rows, row, normalize_curve_row, "curve"),
            _own_rows(layer_rows, row, normalize_layer_row, "layer"))


def write_trial(root, sweep: str, trial_row: dict, curve_rows: list[dict],
                layer_rows: Sequence[dict] = ()) -> str:
    """Write one trial (its curve, and its layer rows if it has any) as one new set of
    fragments, the trials fragment last; returns the trials fragment path."""
    row, curves, layers = prepare_trial(sweep, trial_row, curve_rows, layer_rows)
    siblings = [("curves", CURVE_COLUMNS, curves)]
    if layers:
        siblings.append(("layers", LAYER_COLUMNS, layers))

    fs, base = filesystem(root)
    name = f"part-{safe(row['trial_id'])}-{stamp()}.parquet"
    tables = [(folder, pa.Table.from_pylist(rows, schema=schema)) for folder, schema, rows in siblings]
    with _writing(fs, posixpath.join(base, sweep)):
        for table_name in ("trials", *(folder for folder, _ in tables)):
            fs.create_dir(posixpath.join(base, sweep, table_name), recursive=True)
        for folder, table in tables:
            write_atomic(fs, posixpath.join(base, sweep, folder, name), table)
        trial_path = posixpath.join(base, sweep, "trials", name)
        write_atomic(fs, trial_path, pa.Table.from_pylist([row], schema=TRIAL_COLUMNS))
    return trial_path


@contextlib.contextmanager
def _writing(fs: pafs.FileSystem, folder: str):
    """A writer's hold on a local sweep (`versions`): its folders laid out, and the shared
    lock that keeps a compaction from retiring the version it writes into."""
    if not isinstance(fs, pafs.LocalFileSystem):
        ready_sweeps(fs, *posixpath.split(folder))
        yield
        return
    ready_sweeps(fs, *posixpath.split(folder))
    versions.ensure(folder)
    with versions.locked(folder, exclusive=False):
        yield


def ready_sweeps(fs: pafs.FileSystem, base: str, sweep: str) -> None:
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
    found = sorted(i.path for i in fragment_listing(fs, stored) if i.type == pafs.FileType.Directory)
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
        for info in fragment_files(fs, posixpath.join(chosen, table)):
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

    A sweep folder whose version links are missing is repaired first (`ready_sweeps`), or, where
    it cannot be, left out with one warning line naming the repair."""
    fs, base = filesystem(root)
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    names = []
    for info in fragment_listing(fs, base):
        if info.type == pafs.FileType.Directory and SWEEP_NAME.fullmatch(info.base_name):
            trials = posixpath.join(info.path, "trials")
            if fs.get_file_info(trials).type != pafs.FileType.Directory:
                local = isinstance(fs, pafs.LocalFileSystem)
                if not (versions.broken(info.path) if local else fs.get_file_info(
                        posixpath.join(info.path, versions.VERSIONS)).type == pafs.FileType.Directory):
                    continue
                try:
                    ready_sweeps(fs, base, info.base_name)
                except UserError as error:
                    print(f"warning: skipping {info.path}: {error.problem}", file=sys.stderr, flush=True)
                    continue
            if fs.get_file_info(trials).type == pafs.FileType.Directory:
                names.append(info.base_name)
    return sorted(names)


def sweep_names(root, sweeps: list[str] | None) -> list[str]:
    """The sweeps asked for (None: all), each ready to read (`ready_sweeps`)."""
    if sweeps is None:
        return list_sweeps(root)
    fs, base = filesystem(root)
    for sweep in sweeps:
        ready_sweeps(fs, base, validate_sweep_name(sweep))
    return list(sweeps)
