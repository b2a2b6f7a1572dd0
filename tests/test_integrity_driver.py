"""One driver per sweep, a catalog that never tracebacks, refused runs that leave nothing,
data checked before any trial, a root that can move (issue 10).

Real SQLite through SQLAlchemy, real data files (the built-in corpus, a FIFO, /dev/zero),
real drivers as subprocesses with real Ray for the end-to-end tests (marked slow).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from sweep_helpers import CHILD_ENV, TINY_SPACE, TINY_TRAIN, pairs, raw_trial_rows, run, write_space

from shapesweep.common import UserError
from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.store import load_trials, sweep_dir
from shapesweep.search_spaces.solver import candidate_document, plan
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main as shapesweep
from shapesweep.sweep.driver.lease import sweep_lease

SPACE_TEXT = "name: s\n"


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (nothing if the folder does not exist)."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.exists() else {}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --- refused runs leave nothing -------------------------------------------------------------

def _refusals(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(extra `run` arguments, the problem the one error line names) for each refusal."""
    short = tmp_path / "short.txt"
    short.write_bytes(b"def f(): pass\n" * 3)  # 42 bytes: a 3-byte validation split
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:  # sparse: costs nothing, and must not be read
        f.truncate(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    v64 = write_space(tmp_path, name="v64", fixed={**TINY_SPACE["fixed"], "vocab_size": 64})
    tiny = str(write_space(tmp_path))
    return [
        ([str(v64)], "uses 256 token ids but the model has vocab_size=64"),
        ([tiny, "--data", str(short)], "seq_len: the val split has 3 tokens, fewer than seq_len + 1 = 33"),
        ([tiny, "--data", "/dev/zero"], "/dev/zero: not a regular file"),
        ([tiny, "--data", str(fifo)], "pipe.txt: not a regular file"),
        ([tiny, "--data", str(huge)], "pre-tokenize it"),
        ([tiny, "--data", str(tmp_path / "absent.txt")], "data path not found"),
        ([str(tmp_path / "absent.yaml")], "no such file"),
        ([tiny, "--grace-tokens", "8192"], "--grace-tokens: grace period 8192"),
        ([tiny, "--reduction-factor", "1"], "--reduction-factor: must be more than 1"),
        ([tiny, "--seeds", "1,1"], "--seeds: seed 1 is given twice"),
        ([tiny, "--multi-objective"], "--multi-objective: a second objective needs --search optuna"),
        ([tiny, "--name", "../escape"], "is not allowed"),
    ]


def test_refused_runs_leave_nothing(tmp_path, capsys):
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    Catalog(default_catalog_url(used)).register("other", "s", SPACE_TEXT, "h", 1)
    before = files_under(used)
    for argv, problem in _refusals(tmp_path):
        for root in (fresh, used):
            assert run("run", *argv, "--root", str(root)) == 2, argv
            assert problem in one_line_error(capsys), argv
            assert not fresh.exists(), argv  # no folder, no database file
            assert files_under(used) == before, argv  # no catalog row, no sweep folder
    # An object-store root needs --storage: refused before anything, too.
    assert run("run", str(write_space(tmp_path)), "--root", "s3://bucket/sweeps") == 2
    assert "--storage" in one_line_error(capsys)


def test_shapesweep_train_refuses_a_device_and_a_small_vocab(tmp_path, capsys):
    candidate = plan(load_space(write_space(tmp_path))).candidates[0]
    config = tmp_path / "config.yaml"
    train = load_space(write_space(tmp_path)).train
    config.write_text(yaml.safe_dump(candidate_document(candidate, train)))
    started = time.monotonic()
    assert shapesweep(["train", str(config), "--data", "/dev/zero"]) == 2
    assert "/dev/zero: not a regular file" in one_line_error(capsys)
    doc = candidate_document(candidate, train)
    doc["model"]["vocab_size"] = 64
    config.write_text(yaml.safe_dump(doc))
    assert shapesweep(["train", str(config)]) == 2
    assert "vocab_size: the data uses 256 token ids" in one_line_error(capsys)
    assert time.monotonic() - started < 30  # refused up front, not after training


# --- a catalog that never tracebacks --------------------------------------------------------

def test_garbage_catalog_is_one_line_and_left_alone(tmp_path, capsys):
    root = tmp_path / "root"
    root.mkdir()
    db = root / "shapesweep.db"
    db.write_bytes(os.urandom(4096))
    before = db.read_bytes()
    for argv in (["status"], ["run", str(write_space(tmp_path))]):
        assert run(*argv, "--root", str(root)) == 2
        line = one_line_error(capsys)
        assert f"{db}: cannot use the catalog database: file is not a database" in line
    assert db.read_bytes() == before and files_under(root) == {"shapesweep.db": before}


def test_locked_catalog_is_one_line_after_a_short_wait(tmp_path, capsys):
    url = default_catalog_url(tmp_path)
    Catalog(url).register("alpha", "s", SPACE_TEXT, "h", 1)
    holder = sqlite3.connect(tmp_path / "shapesweep.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's long write
    try:
        started = time.monotonic()
        assert run("status", "--root", str(tmp_path)) == 2
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "cannot use the catalog database: database is locked" in one_line_error(capsys)
    assert took < 15, took
    assert Catalog(url).get("alpha").status == "created"


def test_garbled_sweep_json_and_unreadable_space_are_one_line(tmp_path, capsys):
    folder = tmp_path / "broken"
    folder.mkdir()
    options = folder / "sweep.json"
    for text, problem in (('{"space": "space.yaml", "name": ', "Invalid JSON"),
                          ('{"space": "space.yaml", "seeds": "x"}', "seeds: not a sweep options"),
                          ("[1, 2]", "not a sweep options file"),
                          (b"\xff\xfe{}", "cannot read")):
        options.write_bytes(text if isinstance(text, bytes) else text.encode())
        assert run("resume", "broken", "--root", str(tmp_path)) == 2
        line = one_line_error(capsys)
        assert str(options) in line and problem in line, line
    options.write_text(json.dumps({"space": "space.yaml", "name": "broken"}))
    (folder / "space.yaml").write_bytes(b"\x80\x81 not text")
    assert run("resume", "broken", "--root", str(tmp_path)) == 2
    assert f"{folder / 'space.yaml'}: not UTF-8 text" in one_line_error(capsys)


# --- the lease ------------------------------------------------------------------------------

def _take_and_exit(url: str) -> None:
    """A driver that takes the lease and dies without releasing it (as SIGKILL would)."""
    assert Catalog(url).take_lease("alpha", "dead-driver") is None
    os._exit(0)


def _dead_holder(url: str) -> None:
    child = multiprocessing.get_context("fork").Process(target=_take_and_exit, args=(url,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0


def test_lease_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHAPESWEEP_LEASE_TIMEOUT_S", "3600")
    url = default_catalog_url(tmp_path)
    catalog = Catalog(url)
    catalog.register("alpha", "s", SPACE_TEXT, "h", 1)
    catalog.set_status("alpha", "running")
    assert catalog.get("alpha").status == "interrupted"  # running, but no driver holds it

    with sweep_lease(catalog, "alpha"):
        held = catalog.lease("alpha")
        assert (held.host, held.pid) == (socket.gethostname(), os.getpid())
        assert catalog.get("alpha").status == "running"
        assert [r.status for r in catalog.list()] == ["running"]
        with pytest.raises(UserError, match=rf"already being run by another driver \(host "
                           rf"{socket.gethostname()}, pid {os.getpid()}, since .* UTC, last "
                           r"heartbeat \d+ s ago\)"):
            with sweep_lease(catalog, "alpha"):
                pass
        assert catalog.lease("alpha") == held  # the refused one took nothing
    assert catalog.lease("alpha") is None  # released on exit

    _dead_holder(url)  # same host, dead pid: taken over at once despite the long timeout
    assert catalog.lease("alpha").token == "dead-driver"
    assert catalog.get("alpha").status == "interrupted"
    with sweep_lease(catalog, "alpha"):
        assert catalog.lease("alpha").pid == os.getpid()


def test_lease_with_a_stopped_heartbeat_is_taken_over_and_renewed(tmp_path, monkeypatch):
    url = default_catalog_url(tmp_path)
    catalog = Catalog(url)
    monkeypatch.setenv("SHAPESWEEP_LEASE_TIMEOUT_S", "3600")
    with sweep_lease(catalog, "alpha"):
        first = catalog.lease("alpha")
        monkeypatch.setenv("SHAPESWEEP_LEASE_TIMEOUT_S", "0.4")  # beats every 0.1 s now...
        time.sleep(0.6)  # ...but this thread beats at the interval it started with (5 s)
        assert not catalog.lease("alpha").alive()
        assert catalog.take_lease("alpha", "newcomer") is None  # a live pid, a dead heartbeat
        assert catalog.lease("alpha").token == "newcomer"
        assert not catalog.renew_lease("alpha", first.token)  # the old driver learns it lost
    assert catalog.lease("alpha").token == "newcomer"  # its release leaves the new lease alone
    catalog.release_lease("alpha", "newcomer")

    with sweep_lease(catalog, "alpha"):  # a heartbeat every 0.1 s keeps a 0.4 s lease alive
        since = catalog.lease("alpha").heartbeat_at
        time.sleep(1.0)
        lease = catalog.lease("alpha")
        assert lease.alive() and lease.heartbeat_at > since


def _race(url: str, token: str, results, barrier) -> None:
    catalog = Catalog(url)
    barrier.wait()  # all at once
    results.put((token, catalog.take_lease("alpha", token) is None))
    barrier.wait()  # alive until every racer has tried (a dead winner may be taken over)


def test_two_drivers_racing_for_a_dead_lease_one_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPESWEEP_LEASE_TIMEOUT_S", "3600")
    url = default_catalog_url(tmp_path)
    for _ in range(3):
        _dead_holder(url)
        context = multiprocessing.get_context("fork")
        results, barrier = context.Queue(), context.Barrier(3)
        racers = [context.Process(target=_race, args=(url, f"racer-{i}", results, barrier))
                  for i in range(3)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(timeout=60)
        won = [token for token, ok in (results.get(timeout=5) for _ in racers) if ok]
        assert len(won) == 1 and Catalog(url).lease("alpha").token == won[0]
        Catalog(url).release_lease("alpha", won[0])


# --- drivers end to end (real Ray) ------------------------------------------------------------

def driver(*argv: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", *argv, "--no-progress"],
                            env={**CHILD_ENV, **(env or {})}, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ray_sessions(ray_tmp: Path) -> set[Path]:
    """The session folders of local Rays started with RAY_TMPDIR=ray_tmp."""
    return set((ray_tmp / "ray").glob("session_2*"))


def _cmdline(process: Path) -> bytes:
    try:
        return (process / "cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def trained_trials(root: Path, sweep: str) -> int:
    """Trials Ray Tune started for this sweep, over every driver (one folder each)."""
    return sum(1 for experiment in (Path(sweep_dir(str(root), sweep)) / "_ray").iterdir()
               for p in experiment.iterdir() if p.is_dir())


@pytest.mark.slow
def test_concurrent_drivers_one_refused_then_a_moved_root_resumes(local_ray, tmp_path, capsys):
    space_path = write_space(tmp_path, name="race", train={**TINY_TRAIN, "tokens": 4096})
    root = tmp_path / "sweeps"
    ray_tmp = Path(tempfile.mkdtemp(prefix="ss-race-"))  # this test's alone (short: Ray's sockets)
    args = ("run", str(space_path), "--root", str(root), "--scheduler", "fifo",
            "--max-concurrent", "2")
    first, second = (driver(*args, env={"RAY_TMPDIR": str(ray_tmp)}) for _ in range(2))
    outcomes = {p.pid: (p.wait(timeout=300), *p.communicate()) for p in (first, second)}
    codes = sorted(code for code, _, _ in outcomes.values())
    assert codes == [0, 2], outcomes
    winner = next(pid for pid, (code, _, _) in outcomes.items() if code == 0)
    refused = next(err for code, _, err in outcomes.values() if code == 2).strip().splitlines()
    assert len(refused) == 1, refused
    assert (f"sweep 'race' is already being run by another driver (host {socket.gethostname()}, "
            f"pid {winner}, since ") in refused[0] and "last heartbeat" in refused[0]
    expected = pairs(space_path)
    trials = load_trials(str(root), ["race"])
    assert set(zip(trials["key"], trials["seed"], strict=True)) == expected
    assert (trials["status"] == "completed").all()
    assert trained_trials(root, "race") == len(expected)  # each trial trained once, in all
    record = Catalog(default_catalog_url(root)).get("race")
    assert record.status == "finished"
    assert Catalog(default_catalog_url(root)).lease("race") is None
    assert ray_sessions(ray_tmp) == set()  # the driver removed its local Ray's session folder
    shutil.rmtree(ray_tmp, ignore_errors=True)

    # Move the root (the old one is gone), edit nothing: resume reads the moved copy of the
    # space and finds nothing to train.
    saved = json.loads((Path(sweep_dir(str(root), "race")) / "sweep.json").read_text())
    assert saved["space"] == "space.yaml" and "root" not in saved  # no absolute path to the root
    # no file of Tune's names the interpreter (its grid state pickled argparse's module path)
    interpreter = os.path.dirname(argparse.__file__).encode()
    assert [p for p in (Path(sweep_dir(str(root), "race")) / "_ray").rglob("*")
            if p.is_file() and interpreter in p.read_bytes()] == []
    moved = tmp_path / "moved"
    shutil.move(root, moved)
    capsys.readouterr()
    assert run("resume", "race", "--root", str(moved)) == 0
    assert (f"finished - {len(expected)} completed, 0 stopped early, 0 failed (0 trials this "
            "run)") in capsys.readouterr().out
    assert not root.exists()
    assert trained_trials(moved, "race") == len(expected)


def _wait_for_rows(root: Path, sweep: str, process: subprocess.Popen) -> None:
    trials_dir = Path(sweep_dir(str(root), sweep)) / "trials"
    deadline = time.monotonic() + 240
    while not (trials_dir.is_dir() and list(trials_dir.glob("part-*.parquet"))):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no trial row appeared"
        time.sleep(0.2)


# trial N/TOTAL STATUS: NAME, seed S: val_loss=... tokens=... elapsed=...s key=KEY
TRIAL_LINE = re.compile(r"^trial (\d+)/(\d+) (completed|stopped_early|failed): (.+), seed (\d+): "
                        r"val_loss=(\S+) tokens=(\S+) elapsed=(\S+)s key=(\S+)")


def trial_lines(stdout: str) -> list[re.Match]:
    """The plain progress lines (stdout a pipe): one per trial that ended."""
    return [m for line in stdout.splitlines() if (m := TRIAL_LINE.match(line))]


def leftovers(root: Path) -> list[Path]:
    """Temp files a write interrupted halfway would leave (results, options file)."""
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") and "_ray" not in p.parts]


@pytest.mark.slow
def test_ctrl_c_interrupts_sigkill_leaves_a_dead_lease_resume_takes_it_over(tmp_path):
    """Ctrl-C, then SIGKILL mid-sweep, then the resume command Ctrl-C's message names, run as
    printed, on a root that needs quoting: each stop leaves the store whole, the resume takes
    the dead lease over, and each trial lands once. (test_sweep_more's Ctrl-C sweep, 58 s
    quiet, test_messages' SIGTERM one, 28 s, and test_sweep_run's SIGKILL-and-resume one,
    26 s, checked these on sweeps of their own; that SIGTERM and SIGHUP stop a sweep as
    Ctrl-C does is test_signals'.)"""
    tokens = 16384
    space_path = write_space(tmp_path, name="killed", train={**TINY_TRAIN, "tokens": tokens},
                             search={"n_layers": [1, 2, 3, 4, 5]})
    root = tmp_path / "my sweeps"  # a root that needs quoting
    catalog = Catalog(default_catalog_url(root))
    expected = pairs(space_path)
    args = ("--root", str(root), "--max-concurrent", "1")

    # Ctrl-C, as a terminal sends it (SIGINT to the whole foreground process group), while
    # most trials are still to run: the sweep is interrupted and the lease released.
    first = subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space_path),
                              *args, "--scheduler", "fifo"], env=CHILD_ENV, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_rows(root, "killed", first)
        os.killpg(first.pid, signal.SIGINT)
        sent = time.monotonic()
        stdout, err = first.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == 130, err[-2000:]
    assert took < 30, f"took {took:.0f}s to stop"
    assert "shapesweep run: interrupted" in err
    assert catalog.get("killed").status == "interrupted" and catalog.lease("killed") is None
    assert leftovers(root) == []
    options = json.loads((Path(sweep_dir(str(root), "killed")) / "sweep.json").read_text())
    assert options["name"] == "killed"
    # The exact command that finishes the sweep, its root quoted: the last step runs it.
    (hint,) = [line for line in err.splitlines() if line.startswith("interrupted; to finish the sweep: ")]
    command = hint.removeprefix("interrupted; to finish the sweep: ")
    assert re.fullmatch(rf"\S*shapesweep resume killed --root {re.escape(shlex.quote(str(root)))}",
                        command), command
    landed = load_trials(str(root), ["killed"])
    assert 1 <= len(landed) < len(expected)
    assert (landed["status"] == "completed").all(), landed[["trial_id", "status", "error"]]
    # Plain progress (stdout is a pipe): one line per trial that ended, then a summary.
    lines = trial_lines(stdout)
    assert sorted(m[9] for m in lines) == sorted(landed["key"])
    for m in lines:
        row = landed[landed["key"] == m[9]].iloc[0]
        assert m[4] == f"conventional 32×{row['n_layers']}L d_h={row['d_h']}"  # named, not keyed
        assert (m[2], m[3], int(m[5])) == (str(len(expected)), "completed", 0)
        assert float(m[6]) == pytest.approx(row["val_loss"], abs=1e-4)
        assert int(m[7]) == tokens and float(m[8]) > 0
    assert re.search(rf"^sweep interrupted: {len(landed)} of {len(expected)} trials ended",
                     stdout, re.M), stdout[-2000:]

    # SIGKILL mid-sweep, once the resume has landed a trial of its own (while the next one
    # trains): the lease stays behind, held by a dead pid; the sweep reads `interrupted`.
    # Its local Ray runs in a temp folder of this test's own: what it leaves is seen there.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ss-kill-"))  # short: Ray's socket paths must fit
    second = driver("resume", "killed", *args, env={"RAY_TMPDIR": str(ray_tmp)})
    deadline = time.monotonic() + 240
    while len(load_trials(str(root), ["killed"])) == len(landed):
        assert second.poll() is None and time.monotonic() < deadline, second.communicate()
        time.sleep(0.2)
    os.killpg(second.pid, signal.SIGKILL)  # the driver and the Ray it started
    second.wait()
    assert catalog.lease("killed").pid == second.pid
    assert catalog.get("killed").status == "interrupted"
    held = load_trials(str(root), ["killed"])
    assert len(landed) < len(held) < len(expected)  # some still to run
    (dead_session,) = ray_sessions(ray_tmp)  # what Ray cannot remove itself

    # The resume Ctrl-C named takes the dead lease over at once (the heartbeat timeout is an
    # hour here), removes the dead driver's Ray (its session folder and any process naming
    # it) and runs only the trials still missing, each once.
    third = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=300,
                           env={**CHILD_ENV, "SHAPESWEEP_LEASE_TIMEOUT_S": "3600",
                                "RAY_TMPDIR": str(ray_tmp)})
    assert third.returncode == 0, third.stderr[-2000:]
    assert ray_sessions(ray_tmp) == set()
    assert [p for p in Path("/proc").glob("[0-9]*")
            if str(dead_session).encode() in _cmdline(p)] == []
    shutil.rmtree(ray_tmp, ignore_errors=True)
    raw = raw_trial_rows(root, "killed")  # no dedupe: each (key, seed) ran and landed once
    assert sorted(zip(raw["key"], raw["seed"], strict=True)) == sorted(expected)
    assert (raw["status"] == "completed").all()
    assert catalog.get("killed").status == "finished" and catalog.lease("killed") is None
    missing = len(expected) - len(held)
    lines = trial_lines(third.stdout)
    assert sorted(m[9] for m in lines) == sorted({k for k, _ in expected} - set(held["key"]))
    assert [int(m[1]) for m in lines] == list(range(1, missing + 1))
    best = raw[~raw["key"].isin(held["key"])].sort_values("val_loss").iloc[0]
    assert re.search(rf"^sweep done: {missing} of {missing} trials ended this run \({missing} "
                     rf"completed, 0 stopped early, 0 failed\); best val_loss "
                     rf"{best['val_loss']:.4f} \(conventional 32×{best['n_layers']}L d_h={best['d_h']}, "
                     rf"seed 0\)", third.stdout, re.M), third.stdout[-2000:]
    # The closing report is one line (no wrapping at 80 columns in a log).
    assert re.search(rf"^sweep killed: finished - {len(expected)} completed, 0 stopped early, "
                     rf"0 failed \({missing} trials this run\); results in .+$", third.stdout, re.M)
