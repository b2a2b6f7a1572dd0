"""Where a sweep's files live under a results root, and how one is written whole.

A root is a local folder, a file:// URI or an object store (pyarrow's filesystems); every
sweep is one folder named after it, so a sweep name is checked before it becomes a path.
A file is written under a hidden temporary name and renamed into place (one PUT on an
object store), so a reader or a crash never sees half of one.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from shapesweep.common import DEFAULT_ROOT, UserError

SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def validate_sweep_name(sweep: str) -> str:
    """Sweep names become folder names: letters, digits and `-_.` only, so none escapes the root."""
    if not isinstance(sweep, str) or not SWEEP_NAME.fullmatch(sweep):
        raise UserError(
            f"sweep name {sweep!r} is not allowed: use letters, digits, '-', '_' and '.', "
            "starting with a letter or digit (at most 200 characters)", key="name",
        )
    return sweep


def filesystem(root: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    root = os.fspath(root)
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), os.path.abspath(root)


def local_folder(root: str | os.PathLike) -> str | None:
    """The root as a folder of this machine (a path or file:// URI), or None (object stores)."""
    fs, base = filesystem(root)
    return base if isinstance(fs, pafs.LocalFileSystem) else None


def probe(root: str | os.PathLike) -> None:
    """Ask an object-store root's store once (pyarrow's error if it does not answer); a
    local root is not asked."""
    fs, base = filesystem(root)
    if not isinstance(fs, pafs.LocalFileSystem):
        fs.get_file_info(base)


def sweep_dir(root: str | os.PathLike, sweep: str) -> str:
    """The sweep's folder: a local path for a local root, else a URI under the root."""
    validate_sweep_name(sweep)
    root = os.fspath(root)
    if "://" in root:
        return root.rstrip("/") + "/" + sweep
    return os.path.join(os.path.abspath(root), sweep)


def stamp() -> str:
    """Sorts by write time (tie-break between equal `finished_at`), unique across writers."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"


def safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:80]


def write_atomic(fs: pafs.FileSystem, path: str, content: pa.Table | bytes) -> None:
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
    fs, base = filesystem(root)
    folder = posixpath.join(base, validate_sweep_name(sweep))
    fs.create_dir(folder, recursive=True)
    write_atomic(fs, posixpath.join(folder, name), text.encode())


def read_sweep_file(root, sweep: str, name: str) -> str | None:
    """The text `write_sweep_file` wrote, or None when there is none; text that is not
    UTF-8 (a garbled file) is one line naming the file and its repair."""
    fs, base = filesystem(root)
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


def decode_json(text: str, kind: type, check: Callable[[object], str | None] | None = None,
                ) -> tuple[object, str | None]:
    """(value, problem) of a small JSON file's text: the problem, None when it is none, says
    why it is damaged (not JSON, not a `kind`, or what `check(value)` says)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        return None, f"not JSON: {getattr(error, 'msg', error)}"
    if not isinstance(value, kind):
        return value, f"a JSON {type(value).__name__}, not a {kind.__name__}"
    return value, check(value) if check else None


def read_sweep_json(root, sweep: str, name: str, kind: type,
                    check: Callable[[object], str | None] | None = None) -> object:
    """A small JSON file of the sweep (`sweep.json`, `asha.json`), or None when there is
    none. Damaged (truncated, zeroed, garbled, not a `kind`, or `check(value)` says why
    not), it is one line naming the file and its repair (exit 2), never a traceback."""
    text = read_sweep_file(root, sweep, name)
    if text is None:
        return None
    value, problem = decode_json(text, kind, check)
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
