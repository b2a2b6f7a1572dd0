"""A local sweep's table folders as one version, swapped whole: how compaction publishes.

A raw glob (`ROOT/*/trials/*.parquet`) lists a folder, then reads each file. Merging N
fragments into one file inside that folder cannot be atomic: whichever of "merged file
in" and "inputs out" comes first, a listing in between sees each row twice, or not at
all. So on a local root the three table folders are symbolic links into one version
folder, and compaction writes a whole new version beside it, then flips one link:

    ROOT/SWEEP/trials  -> .current/trials      (fixed links; what readers and writers open)
    ROOT/SWEEP/curves  -> .current/curves
    ROOT/SWEEP/layers  -> .current/layers
    ROOT/SWEEP/.current -> .versions/STAMP     (renamed over by each compaction: atomic)
    ROOT/SWEEP/.versions/STAMP/{trials,curves,layers}/*.parquet

A listing resolves the links when it runs, so it sees the old version or the new one,
never a mix; a reader that listed the old one and then finds a file gone lists again
(`fragments._with_retries`). Links are relative, so a moved or copied root keeps working.
Writers take a shared `flock` on ROOT/SWEEP/.lock and compaction an exclusive one, so no
fragment lands in a version being retired. A version no link names is what a killed
compaction left: the next one deletes it. A sweep of plain table folders (written before
versions, or copied with its links followed) is adopted by its next compaction. Object
stores have no links: there the merged file lands before its inputs go (`store.compact`).

A version is marked complete (an empty `.complete` file in it) once every file it needs
is in it, before it is published. A root copied without its links (a zip, a sync or copy
tool that skips them), or whose `.current` was removed or left dangling, is `repair`ed:
`.current` is pointed at the newest complete version and the table links are made again,
so no fragment is ever taken for a killed compaction's leftover and deleted.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator

TABLES = ("trials", "curves", "layers")
CURRENT, VERSIONS, LOCK, COMPLETE = ".current", ".versions", ".lock", ".complete"


class Unrepairable(Exception):
    """A sweep folder whose links are missing and whose versions do not say which to keep;
    the message names the repair."""


@contextlib.contextmanager
def locked(folder: str, exclusive: bool) -> Iterator[None]:
    """Hold the sweep's lock: shared for a writer, exclusive for compaction."""
    os.makedirs(folder, exist_ok=True)
    handle = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(handle)  # releases the lock


def ensure(folder: str) -> str | None:
    """Lay out a new sweep's folder as versions; a sweep that has tables is left as it is,
    or `repair`ed (returned: what was found and done)."""
    repaired = repair(folder)
    if os.path.lexists(os.path.join(folder, "trials")):
        return repaired
    with locked(folder, exclusive=True):
        if os.path.lexists(os.path.join(folder, "trials")):  # another writer laid it out
            return repaired
        if not os.path.isdir(os.path.join(folder, CURRENT)):  # else a killed layout's
            retire(_point_current(folder, mark_complete(new_version(folder))))
        for table in TABLES:
            if not os.path.lexists(os.path.join(folder, table)):
                os.symlink(os.path.join(CURRENT, table), os.path.join(folder, table))
    return repaired


def broken(folder: str) -> str | None:
    """What is wrong with a sweep folder's links, or None: a table link or `.current` that
    leads nowhere, or versions that no `.current` names (a copy that skipped the links).
    A few `stat`s: readers call it on every read."""
    current = os.path.join(folder, CURRENT)
    if os.path.isdir(current):
        dangling = [t for t in TABLES if os.path.lexists(p := os.path.join(folder, t))
                    and not os.path.isdir(p)]
        missing = [t for t in TABLES if not os.path.lexists(os.path.join(folder, t))]
        if dangling:
            return f"the link(s) {', '.join(dangling)} lead nowhere"
        if missing and os.path.islink(current) and "trials" in missing:
            return f"the link(s) {', '.join(missing)} are missing"
        return None
    if not _versions(folder):
        dangling = [t for t in (CURRENT, *TABLES) if os.path.islink(p := os.path.join(folder, t))
                    and not os.path.isdir(p)]
        if dangling:  # else a new sweep, or one of plain folders (`adopt`)
            return f"the link(s) {', '.join(dangling)} lead nowhere and {VERSIONS} holds no version"
        return None
    if os.path.islink(current):
        return f"{CURRENT} leads nowhere ({os.readlink(current)})"
    return f"{CURRENT} is missing (a copy that skipped links?)"


def _versions(folder: str) -> list[str]:
    """The version folders of a sweep, oldest first (stamped names sort by time)."""
    path = os.path.join(folder, VERSIONS)
    if not os.path.isdir(path):
        return []
    return sorted(e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False))


def repair(folder: str) -> str | None:
    """Point a `broken` sweep's `.current` at its newest complete version and make its
    table links again; returns what was found and done (None: nothing to do). Raises
    Unrepairable where no version is marked complete and several could be the one."""
    if broken(folder) is None:
        return None
    with locked(folder, exclusive=True):
        found = broken(folder)  # another process may have repaired it meanwhile
        if found is None:
            return None
        done = "made the table links again"
        if not os.path.isdir(os.path.join(folder, CURRENT)):
            chosen = _newest_complete(folder)
            aside = _point_current(folder, chosen)
            assert not aside  # `.current` is no folder here
            done = f"pointed {CURRENT} at {os.path.relpath(chosen, folder)} and {done}"
        for table in TABLES:
            path = os.path.join(folder, table)
            if not os.path.isdir(path):
                link = os.path.join(folder, f".{table}.{uuid.uuid4().hex[:8]}.link")
                os.symlink(os.path.join(CURRENT, table), link)
                os.replace(link, path)  # over a dangling link, in one step
        return f"{found}: {done}"


def _newest_complete(folder: str) -> str:
    """The version a repair keeps: the newest marked complete, or the only one there is."""
    found = _versions(folder)
    complete = [v for v in found if os.path.exists(os.path.join(v, COMPLETE))
                and not os.path.basename(v).startswith("copied-")]
    if complete:
        return complete[-1]
    if len(found) == 1:
        return found[0]
    if not found:
        raise Unrepairable(
            f"its table links lead nowhere and {VERSIONS} holds no version (its results are "
            f"gone, or elsewhere): copy its {VERSIONS} back, or remove the links ({CURRENT}, "
            f"{', '.join(TABLES)}) to start the sweep anew")
    names = ", ".join(os.path.basename(v) for v in found)
    raise Unrepairable(
        f"{CURRENT} leads to no version and none of {len(found)} in {VERSIONS} ({names}) is "
        f"marked complete: point it at the one to keep (cd {folder} && ln -sfn "
        f"{VERSIONS}/VERSION {CURRENT}), then run the command again")


def mark_complete(version: str) -> str:
    """Mark a version as holding every file it needs (before it is published)."""
    with open(os.path.join(version, COMPLETE), "wb") as handle:
        handle.flush()
        os.fsync(handle.fileno())
    return version


def new_version(folder: str) -> str:
    """A new, empty version folder (no link names it yet); returns its path."""
    path = os.path.join(folder, VERSIONS, f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}")
    for table in TABLES:
        os.makedirs(os.path.join(path, table))
    return path


def carry(source: str, target: str, skip: set[str]) -> None:
    """Hard-link every file of table folder `source` not in `skip` into `target`: fragments
    the compaction did not merge (a write in flight, a crash's leftovers) stay as they are."""
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.name not in skip and entry.is_file(follow_symlinks=False):
                # gone meanwhile, or already there (linked by a killed call)
                with contextlib.suppress(FileNotFoundError, FileExistsError):
                    os.link(entry.path, os.path.join(target, entry.name))


def adopt(folder: str) -> None:
    """Make a sweep of plain table folders (written before versions, or a root copied with
    its links followed) versioned, so that a compaction can publish: every file is first
    linked into the version `.current` names, then each folder is exchanged for its link
    (atomically where the kernel can). Both show the same files, so a raw glob sees the
    same rows at every step, and a kill midway is finished by the next call."""
    plain = [t for t in TABLES if not os.path.islink(os.path.join(folder, t))]
    if not plain or not os.path.lexists(os.path.join(folder, "trials")):
        return  # versioned already, or nothing written yet (`ensure` lays it out then)
    current = os.path.join(folder, CURRENT)
    linked = os.path.islink(current) and os.path.isdir(current)
    version = os.path.realpath(current) if linked else new_version(folder)
    for table in plain:
        if os.path.isdir(os.path.join(folder, table)):
            carry(os.path.join(folder, table), os.path.join(version, table), skip=set())
    if not linked:
        retire(_point_current(folder, mark_complete(version)))
    for table in plain:
        path = os.path.join(folder, table)
        link = os.path.join(folder, f".{table}.{uuid.uuid4().hex[:8]}.link")
        os.symlink(os.path.join(CURRENT, table), link)
        if os.path.isdir(path):
            _exchange(link, path)  # now `link` names the plain folder
            retire([link])
        else:
            os.replace(link, path)


def publish(folder: str, version: str) -> list[str]:
    """Make `version` the sweep's tables in one atomic step (the sweep is `adopt`ed);
    returns the version it retired (delete it once no reader needs it)."""
    retired = [os.path.realpath(os.path.join(folder, CURRENT))]
    return retired + _point_current(folder, version)


def remove_stale(folder: str) -> None:
    """Delete versions no link names and the temporary links a killed compaction left.
    Call it holding the exclusive lock: then no compaction is building one. A sweep whose
    `.current` leads to no folder is left alone: its versions are all it has (`repair`)."""
    current = os.path.realpath(os.path.join(folder, CURRENT))
    if not os.path.isdir(current):
        return
    versions = os.path.join(folder, VERSIONS)
    if os.path.isdir(versions):
        for entry in os.scandir(versions):
            if entry.path != current:
                retire([entry.path])
    for entry in os.scandir(folder):
        if entry.name.startswith(".") and entry.name.endswith((".link", ".tmp", ".aside")) and (
                entry.is_symlink() or entry.is_dir(follow_symlinks=False)):
            retire([entry.path])


def retire(paths: list[str]) -> None:
    for path in paths:
        if os.path.islink(path) or os.path.isfile(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _point_current(folder: str, version: str) -> list[str]:
    """Rename a new link over `.current` (one atomic rename); a plain folder in its place
    (a root copied with links followed) is moved among the versions first, and returned
    for deletion."""
    current = os.path.join(folder, CURRENT)
    link = os.path.join(folder, f"{CURRENT}.{uuid.uuid4().hex[:8]}.tmp")
    os.symlink(os.path.relpath(version, folder), link)
    aside = []
    if os.path.isdir(current) and not os.path.islink(current):
        aside = [os.path.join(folder, VERSIONS, f"copied-{uuid.uuid4().hex[:8]}")]
        os.rename(current, aside[0])
    os.replace(link, current)
    return aside


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: str, b: str) -> None:
    """Swap two names in one step (Linux renameat2); where the kernel or file system cannot,
    two renames, between which `b` is briefly absent (a reader sees no rows, never twice)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        at_cwd = -100
        if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), b)
    aside = f"{a}.aside"
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)
