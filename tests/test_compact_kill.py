"""A compaction killed at every step it takes on disk: a raw glob (what DuckDB's
`read_parquet('ROOT/*/trials/*.parquet')` does: list, then read each file) sees each trial
once and each (trial_id, step) once at every point, and the next start leaves no leftover.

The compactor is a forked child with an audit hook (`sys.addaudithook`) that SIGKILLs it
just before its Nth filesystem change (a mkdir, a file opened for writing, a rename, link,
symlink or removal), for N = 1, 2, ... until one compaction runs to its end. Real Parquet
files, real kills; no Ray."""

from __future__ import annotations

import glob
import multiprocessing
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from synthetic import synthetic_sweep

from shapesweep.results.store import compact, load_curves, load_trials, write_trial

CHANGES = {"os.mkdir", "os.rename", "os.link", "os.symlink", "os.remove", "os.rmdir",
           "shutil.rmtree", "os.truncate"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _changes_disk(event: str, args: tuple) -> bool:
    if event in CHANGES:
        return True
    if event != "open" or len(args) < 3:
        return False
    mode, flags = args[1], args[2]
    return any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & WRITE_FLAGS)


def _compact_killed_at(root: str, step: int) -> None:
    """In the forked child: compact, dying just before the `step`th change on disk."""
    count = 0

    def hook(event: str, args: tuple) -> None:
        nonlocal count
        if _changes_disk(event, args):
            count += 1
            if count == step:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    compact(root, "s", grace_s=0, stale_s=0)
    os._exit(0)


def raw_glob(root: Path, table: str) -> list[tuple]:
    """Every row a raw glob reads, no dedupe: (trial_id,) or (trial_id, step)."""
    columns = ["trial_id"] if table == "trials" else ["trial_id", "step"]
    found = []
    for path in glob.glob(str(root / "*" / table / "*.parquet")):
        found += list(zip(*pq.read_table(path, columns=columns).to_pydict().values(), strict=True))
    return found


def check_once(root: Path, expected_trials: set, expected_points: set, where: str) -> None:
    trials, points = raw_glob(root, "trials"), raw_glob(root, "curves")
    assert sorted(trials) == sorted(expected_trials), f"{where}: trials {sorted(trials)}"
    assert len(points) == len(set(points)) and set(points) == expected_points, \
        f"{where}: {len(points)} curve points, {len(set(points))} distinct, {len(expected_points)} expected"


def leftovers(root: Path) -> list[str]:
    """Hidden temporary files, retired folders and links: what only a killed step leaves."""
    sweep = root / "s"
    found = [str(p) for p in sweep.rglob(".*") if p.name.endswith((".tmp", ".link", ".aside"))]
    versions = list((sweep / ".versions").iterdir()) if (sweep / ".versions").exists() else []
    return found + [str(p) for p in versions[1:]]


@pytest.fixture
def sweep_store(tmp_path) -> tuple[Path, set, set]:
    """A sweep mid-run: an earlier compaction's file and four fragments since."""
    root = tmp_path / "template"
    pairs = synthetic_sweep("s", 8, families=("conventional",), seed=7, curve_points=4)
    for row, curve in pairs[:4]:
        write_trial(root, "s", row, curve)
    compact(root, "s", grace_s=0, stale_s=0)
    for row, curve in pairs[4:]:
        write_trial(root, "s", row, curve)
    trial_ids = {(row["trial_id"],) for row, _ in pairs}
    points = {(row["trial_id"], point["step"]) for row, curve in pairs for point in curve}
    return root, trial_ids, points


# The plain-folders case, the same kill at each step of a longer compaction (27 s quiet), is
# marked slow: `make test-fast` keeps the versioned one.
@pytest.mark.parametrize("layout", ["versioned", pytest.param("plain folders", marks=pytest.mark.slow)])
def test_a_compaction_killed_at_any_step_never_shows_a_row_twice(sweep_store, tmp_path, layout):
    """`plain folders`: the same sweep copied with its links followed (or written before
    versions existed); its compaction makes it versioned, a table folder at a time."""
    template, trial_ids, points = sweep_store
    check_once(template, trial_ids, points, "before")
    context = multiprocessing.get_context("fork")
    step = 0
    while True:
        step += 1
        assert step < 200, "the compaction never ran to its end"
        root = tmp_path / f"kill-{step}"
        shutil.copytree(template, root, symlinks=layout == "versioned")
        child = context.Process(target=_compact_killed_at, args=(str(root), step))
        child.start()
        child.join(timeout=120)
        check_once(root, trial_ids, points, f"killed before change {step}")
        compact(root, "s", grace_s=0, stale_s=0)  # the next start
        check_once(root, trial_ids, points, f"after the next start (kill at {step})")
        assert leftovers(root) == [], f"kill at {step}"
        assert len(list((root / "s" / "trials").iterdir())) == 1
        assert len(load_trials(root, ["s"])) == len(trial_ids)
        assert len(load_curves(root, ["s"])) == len(points)
        if child.exitcode == 0:  # ran to its end: every step has had its kill
            break
        assert child.exitcode == -signal.SIGKILL
        shutil.rmtree(root)
    assert step > 10  # the kills really landed between the steps


def test_a_raw_glob_during_compactions_never_sees_a_row_twice(sweep_store):
    """A raw reader polling while trials land and compactions (each with a grace before the
    old files go) run back to back: no read sees a trial or a curve point twice, or misses
    one that had landed before the compactions began."""
    root, trial_ids, points = sweep_store
    done, reads = threading.Event(), []

    def read_until_done():
        while not done.is_set():
            try:
                trials, curve_points = raw_glob(root, "trials"), raw_glob(root, "curves")
            except FileNotFoundError:  # listed before a compaction, opened after: list again
                continue
            reads.append(len(trials) == len(set(trials)) and set(trials) >= trial_ids
                         and len(curve_points) == len(set(curve_points))
                         and set(curve_points) >= points)

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for i, (row, curve) in enumerate(synthetic_sweep("s", 3, families=("conventional",),
                                                         seed=8, curve_points=4)):
            row["trial_id"] = f"late-{i}"
            write_trial(root, "s", row, [{**p, "trial_id": None} for p in curve])
            compact(root, "s", grace_s=0.3, stale_s=0)
    finally:
        done.set()
        reader.join()
    assert len(reads) >= 3 and all(reads), \
        f"{reads.count(False)} of {len(reads)} raw reads saw a row twice or missed one"
