"""Damaged results stores: every reader names a bad fragment and goes on; compaction leaves
clean folders; the live server holds a burst and refuses foreign hosts.

Real Parquet files damaged the ways a fault campaign found (truncated, garbled, empty,
foreign schema), read through the store, the CLI verbs in-process and a real HTTP server.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml
from synthetic import synthetic_sweep
from test_object_store import bucket, s3_endpoint  # noqa: F401 - fixtures: a real S3 endpoint (moto)

from shapesweep.common import UserError
from shapesweep.dashboards.server import make_server
from shapesweep.results.store import (
    DamagedStore,
    FragmentCache,
    compact,
    completed_keys,
    load_curves,
    load_trials,
    write_trial,
)
from shapesweep.sweep.cli.main import main as shapesweep

N_TRIALS = 4


def rows(sweep: str = "s", n: int = N_TRIALS) -> list[tuple[dict, list[dict]]]:
    """Completed synthetic trials (real configs, exact accounting) with distinct losses."""
    out = []
    for i, (row, curve) in enumerate(synthetic_sweep(sweep, n, families=("conventional",),
                                                     budgets=(30e6,), seeds=1, curve_points=3,
                                                     tune=None)):
        row.update(status="completed", error=None, val_loss=2.5 + i / 100)
        out.append((row, curve))
    return out


@pytest.fixture
def store(tmp_path) -> Path:
    """A sweep `s` of four trials, one fragment pair each."""
    for row, curve in rows():
        write_trial(tmp_path / "root", "s", row, curve)
    return tmp_path / "root"


def fragment(root: Path, table: str, trial_id: str, sweep: str = "s") -> Path:
    (path,) = (root / sweep / table).glob(f"part-{trial_id}-*.parquet")
    return path


def truncate(path: Path) -> str:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "not a Parquet file (truncated?)"


def garble(path: Path) -> str:
    """Overwrite the footer's metadata, keeping its length and the magic bytes."""
    data = path.read_bytes()
    size = struct.unpack("<I", data[-8:-4])[0]
    path.write_bytes(data[: -8 - size] + bytes(range(256)) * (size // 256) + bytes(size % 256) + data[-8:])
    return "damaged Parquet file (Couldn't deserialize thrift"


def empty(path: Path) -> str:
    path.write_bytes(b"")
    return "empty file (0 bytes)"


def foreign(path: Path) -> str:
    pq.write_table(pa.table({"name": ["x"], "value": [1.0]}), path)
    return "not a trials fragment (no column sweep, trial_id, key, seed, status)"


def wrong_types(path: Path) -> str:
    table = pq.read_table(path)
    pq.write_table(table.set_column(1, "trial_id", pa.array([7], pa.int64())), path)
    return "column 'trial_id' is int64, not string"


DAMAGES = [truncate, garble, empty, foreign, wrong_types]


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def skipped(err: str) -> list[str]:
    """The files the warning lines name as skipped."""
    return [line.removeprefix("warning: skipping ").split(": ")[0] for line in warnings(err)]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_trials_fragment_is_named_once_and_skipped(store, damage, capsys):
    path = fragment(store, "trials", "t00001")
    problem = damage(path)
    trials, curves = load_trials(store, ["s"]), load_curves(store, ["s"])
    assert sorted(trials["trial_id"]) == ["t00000", "t00002", "t00003"]
    assert sorted(set(curves["trial_id"])) == ["t00000", "t00002", "t00003"]
    (line,) = warnings(capsys.readouterr().err)  # one line, however many readers met it
    assert line.startswith(f"warning: skipping {path}: {problem}")
    # resume runs what completed_keys lacks: the damaged trial, and only it
    assert len(completed_keys(store, "s")) == N_TRIALS - 1


def test_each_warning_names_file_and_problem(store, capsys):
    damaged = {}
    for i, damage in enumerate(DAMAGES[:4]):
        row, curve = rows(n=8)[4 + i]
        write_trial(store, "s", row, curve)
        path = fragment(store, "trials", row["trial_id"])
        damaged[str(path)] = damage(path)
    assert len(load_trials(store, ["s"])) == N_TRIALS
    lines = warnings(capsys.readouterr().err)
    assert sorted(skipped("\n".join(lines))) == sorted(damaged)
    for line, path in zip(lines, skipped("\n".join(lines)), strict=True):
        assert line.startswith(f"warning: skipping {path}: {damaged[path]}")
    load_curves(store, ["s"])  # reads the trials again: no second warning for the same file
    assert warnings(capsys.readouterr().err) == []


def test_a_damaged_curves_fragment_loses_only_that_curve(store, capsys):
    path = fragment(store, "curves", "t00002")
    truncate(path)
    assert len(load_trials(store, ["s"])) == N_TRIALS
    assert capsys.readouterr().err == ""  # trials alone never open curves
    curves = load_curves(store, ["s"])
    assert sorted(set(curves["trial_id"])) == ["t00000", "t00001", "t00003"]
    assert warnings(capsys.readouterr().err) == [
        f"warning: skipping {path}: not a Parquet file (truncated?)"]


def test_a_curves_fragment_deleted_by_hand_leaves_its_trial_without_a_curve(store, capsys):
    fragment(store, "curves", "t00003").unlink()
    curves = load_curves(store, ["s"])
    assert sorted(set(curves["trial_id"])) == ["t00000", "t00001", "t00002"]
    (line,) = warnings(capsys.readouterr().err)
    assert "s/curves/part-t00003-" in line and "missing" in line


def _copy(store: Path, tmp_path: Path, name: str) -> Path:
    """A fresh copy of the store: each verb meets the damage as a new process would."""
    return Path(shutil.copytree(store, tmp_path / name))


@pytest.mark.parametrize("damage", [truncate, foreign, garble])
def test_cli_verbs_warn_and_show_the_rest(store, tmp_path, damage, capsys):
    damage(fragment(store, "trials", "t00001"))
    truncate(fragment(store, "curves", "t00002"))

    root = _copy(store, tmp_path, "status")
    assert shapesweep(["status", "s", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "completed: 3" in out
    assert sorted(skipped(err)) == [str(fragment(root, "curves", "t00002")),  # rank fidelity
                                    str(fragment(root, "trials", "t00001"))]
    assert shapesweep(["status", "--root", str(root)]) == 0  # the table of sweeps too
    capsys.readouterr()

    root = _copy(store, tmp_path, "export")
    assert shapesweep(["export", "s", "--root", str(root), "--top", "9", "--out",
                       str(tmp_path / "best")]) == 0
    out, err = capsys.readouterr()
    exported = [yaml.safe_load(Path(p).read_text()) for p in out.split()]
    assert sorted(d["provenance"]["trial_id"] for d in exported) == ["t00000", "t00002", "t00003"]
    assert len(warnings(err)) == 1

    root = _copy(store, tmp_path, "dashboard")
    assert shapesweep(["dashboard", "s", "--root", str(root), "--out", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert sorted(skipped(err)) == [str(fragment(root, "curves", "t00002")),
                                    str(fragment(root, "trials", "t00001"))]
    html = (tmp_path / "r.html").read_text()
    assert '"t00000"' in html and '"t00001"' not in html


def test_a_wholly_unreadable_sweep_is_one_line_and_exit_2(store, tmp_path, capsys):
    for path in (store / "s" / "trials").iterdir():
        truncate(path)
    with pytest.raises(DamagedStore, match=f"none of its {N_TRIALS} trials fragment"):
        load_trials(store, ["s"])
    capsys.readouterr()
    for verb in (["status", "s"], ["status"], ["export", "s", "--top", "1", "--out", str(tmp_path / "o")],
                 ["dashboard", "s", "--out", str(tmp_path / "r.html")]):
        assert shapesweep([*verb, "--root", str(store)]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
        assert len(errors) == 1 and errors[0].startswith(f"shapesweep {verb[0]}: error: {store / 's'}: none of its")
    assert not (tmp_path / "o").exists() and not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------- unreadable, not damaged

DROP_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search", "--"]


def cli_without_access(*argv: str) -> subprocess.CompletedProcess:
    """`shapesweep ARGV` in a process that file modes bind: root reads a mode-000 file
    anyway, so as root it runs without the capabilities that let it (setpriv)."""
    prefix = DROP_DAC if os.geteuid() == 0 else []
    return subprocess.run([*prefix, sys.executable, "-m", "shapesweep.sweep.cli", *argv],
                          capture_output=True, text=True, timeout=300)


def one_error(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr[-2000:])
    return lines[0]


def test_an_unreadable_fragment_is_one_line_never_moved_or_run_again(store, tmp_path):
    path = fragment(store, "curves", "t00002")
    path.chmod(0)
    try:
        for verb in (["status", "s"], ["dashboard", "s", "--out", str(tmp_path / "r.html")]):
            line = one_error(cli_without_access(*verb, "--root", str(store)))
            assert f"{path}: cannot read (permission denied)" in line
        compacting = subprocess.run(
            [*(DROP_DAC if os.geteuid() == 0 else []), sys.executable, "-c",
             "import sys; from shapesweep.results.store import compact; compact(sys.argv[1], 's')",
             str(store)], capture_output=True, text=True, timeout=300)
        assert compacting.returncode != 0 and f"{path}: cannot read" in compacting.stderr
    finally:
        path.chmod(0o644)
    assert path.exists() and not (store / "s" / "damaged").exists()  # left where it was
    assert len(completed_keys(store, "s")) == N_TRIALS  # nothing for resume to run again


def test_an_unreadable_curves_folder_is_one_line(store, tmp_path):
    folder = store / "s" / "curves"
    folder.chmod(0)
    try:
        for verb in (["status", "s"], ["dashboard", "s", "--out", str(tmp_path / "r.html")]):
            line = one_error(cli_without_access(*verb, "--root", str(store)))
            assert f"{folder}: cannot read (permission denied)" in line
    finally:
        folder.chmod(0o755)
    assert not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------- compaction


def raw_ids(folder: Path) -> list[str]:
    """What DuckDB's or pyarrow's raw glob over a table folder returns: no dedupe."""
    return ds.dataset(folder, format="parquet").to_table(columns=["trial_id"])["trial_id"].to_pylist()


def test_compaction_leaves_one_file_each_and_a_raw_glob_sees_each_trial_once(store):
    retry, curve = rows()[0]
    retry.update(val_loss=1.0, finished_at=retry["finished_at"] + timedelta(hours=1))
    write_trial(store, "s", retry, curve[:2])
    before_t, before_c = load_trials(store, ["s"]), load_curves(store, ["s"])
    assert sorted(raw_ids(store / "s" / "trials")).count("t00000") == 2

    merged = compact(store, "s", grace_s=0, stale_s=0)
    assert [p.name for p in (store / "s" / "trials").iterdir()] == [Path(merged).name]
    assert [p.name for p in (store / "s" / "curves").iterdir()] == [Path(merged).name]
    ids = raw_ids(store / "s" / "trials")
    assert sorted(ids) == [f"t0000{i}" for i in range(N_TRIALS)]
    raw = ds.dataset(store / "s" / "trials", format="parquet").to_table().to_pandas()
    assert raw.set_index("trial_id").loc["t00000", "val_loss"] == 1.0  # the retry, one row
    assert load_trials(store, ["s"]).equals(before_t) and load_curves(store, ["s"]).equals(before_c)
    assert len(before_c[before_c["trial_id"] == "t00000"]) == 2


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_compaction_removes_stale_leftovers_only(store):
    leftovers = [store / "s" / "trials" / ".part-x-1.parquet.0a1b2c3d.tmp",
                 store / "s" / "curves" / ".part-x-1.parquet.0a1b2c3d.tmp",
                 store / "s" / ".sweep.json.0a1b2c3d.tmp"]
    for path in leftovers:
        path.write_bytes(b"")  # a writer killed right after opening its temporary file
    orphan = store / "s" / "curves" / "part-t00009-99999999999999999999-000000000000.parquet"
    shutil.copy(fragment(store, "curves", "t00000"), orphan)  # killed between the two renames

    curve_rows = len(load_curves(store, ["s"]))
    compact(store, "s", grace_s=0)  # all fresh: may be writes in flight
    assert all(p.exists() for p in [*leftovers, orphan])
    assert len(load_curves(store, ["s"])) == curve_rows  # the orphan is never read
    for path in (*leftovers[:2], orphan):
        _age(path, 2 * 3600)
    compact(store, "s", grace_s=0)
    assert not any(p.exists() for p in (*leftovers[:2], orphan)) and leftovers[2].exists()
    compact(store, "s", grace_s=0, stale_s=0)  # the driver, holding the sweep: nothing is in flight
    assert not leftovers[2].exists()
    assert len(list((store / "s" / "trials").iterdir())) == 1
    assert len(list((store / "s" / "curves").iterdir())) == 1


def test_compaction_sets_damaged_inputs_aside(store, capsys):
    bad_trial, bad_curves = fragment(store, "trials", "t00001"), fragment(store, "curves", "t00002")
    truncate(bad_trial)
    garble(bad_curves)
    stray = store / "s" / "trials" / "notes.parquet"
    foreign(stray)
    sibling = fragment(store, "curves", "t00001")
    held = fragment(store, "trials", "t00002")

    compact(store, "s", grace_s=0, stale_s=0)
    moved = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: moved")]
    assert len(moved) == 4
    damaged = store / "s" / "damaged"
    assert sorted(p.name for p in (damaged / "curves").iterdir()) == sorted([bad_curves.name, sibling.name])
    assert sorted(p.name for p in (damaged / "trials").iterdir()) == sorted([bad_trial.name, stray.name])
    # t00002's row stays where it was (quarantined one by one), unmerged, and resume runs it again
    assert held.exists() and sorted(raw_ids(store / "s" / "trials")) == ["t00000", "t00002", "t00003"]
    assert sorted(key for key, _, _ in completed_keys(store, "s")) == sorted(
        load_trials(store, ["s"]).query("trial_id != 't00002'")["key"])
    assert len(list((store / "s" / "curves").iterdir())) == 1
    assert sorted(set(load_curves(store, ["s"])["trial_id"])) == ["t00000", "t00003"]
    (line,) = warnings(capsys.readouterr().err)  # named once, as quarantined
    assert f"s/curves/{bad_curves.name}: damaged, moved to damaged/curves/" in line


def test_a_damaged_compacted_curves_file_is_quarantined_alone(store, capsys):
    """Merged curves hold every trial's: damaged, they go aside alone; the trials file stays
    (status shows every result), resume runs those trials again, and once it has they merge."""
    compact(store, "s", grace_s=0, stale_s=0)
    (merged,) = (store / "s" / "curves").iterdir()
    truncate(merged)
    compact(store, "s", grace_s=0, stale_s=0)
    assert [p.name for p in (store / "s" / "damaged" / "curves").iterdir()] == [merged.name]
    assert not (store / "s" / "damaged" / "trials").exists()
    assert len(load_trials(store, ["s"])) == N_TRIALS and completed_keys(store, "s") == {}
    for row, curve in rows():  # what resume does: each trial again, newer
        write_trial(store, "s", {**row, "finished_at": None}, curve)
    compact(store, "s", grace_s=0, stale_s=0)
    assert len(list((store / "s" / "trials").iterdir())) == 1
    assert len(completed_keys(store, "s")) == N_TRIALS
    assert sorted(set(load_curves(store, ["s"])["trial_id"])) == sorted(load_trials(store)["trial_id"])


def test_a_reader_during_compaction_sees_every_trial(store):
    """The merged pair lands before the inputs go; a reader in the window sees duplicates
    that resolve like retries, never nothing."""
    for row, curve in rows(n=40)[N_TRIALS:]:
        write_trial(store, "s", row, curve)
    done = threading.Event()
    seen = []

    def read_until_done():
        while not done.is_set():
            trials = load_trials(store, ["s"])
            seen.append((len(trials), trials["trial_id"].is_unique, len(load_curves(store, ["s"]))))

    curve_rows = len(load_curves(store, ["s"]))
    reader = threading.Thread(target=read_until_done)
    reader.start()
    for _ in range(3):
        compact(store, "s", grace_s=0.05)
        write_trial(store, "s", *rows(n=41)[40])
    done.set()
    reader.join()
    assert seen and all(n >= 40 and unique and c >= curve_rows for n, unique, c in seen)


# ---------------------------------------------------------------- live server


@pytest.fixture
def live(store):
    server = make_server(str(store), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    assert server.state.snapshots.wait_built(300)  # these tests read the built payload
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def get(port: int, path: str, host: str | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.putrequest("GET", path, skip_host=True)
    connection.putheader("Host", f"127.0.0.1:{port}" if host is None else host)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, body


def config(port: int, trial_id: str) -> dict:
    status, body = get(port, f"/api/config?sweep=s&trial_id={trial_id}")
    assert status == 200, body
    return yaml.safe_load(body)


def test_server_refuses_other_hosts(live):
    for host in (f"127.0.0.1:{live}", f"localhost:{live}", f"LOCALHOST:{live}", f"[::1]:{live}"):
        assert get(live, "/api/version", host)[0] == 200
    for host in ("evil.example", f"evil.example:{live}", "127.0.0.1:1", f"localhost.evil.example:{live}", ""):
        status, body = get(live, "/api/version", host)
        assert status == 421 and f"127.0.0.1:{live}" in body


def version(port: int) -> str:
    return json.loads(get(port, "/api/version")[1])["version"]


def refreshed(port: int, before: str) -> str:
    """The served version once the server has rebuilt its payload after the store changed."""
    deadline = time.monotonic() + 60
    while (now := version(port)) == before:
        assert time.monotonic() < deadline, "the server never saw the store change"
        time.sleep(0.05)
    return now


def test_server_refreshes_incrementally(store, live):
    assert config(live, "t00001")["provenance"]["trial_id"] == "t00001"
    # A fragment already read is not read again: same path, size and mtime pin its content.
    path = fragment(store, "trials", "t00001")
    stat = path.stat()
    path.write_bytes(bytes(stat.st_size))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # New fragments are read (the next payload has them); vanished ones (merged by compaction) forgotten.
    seen = version(live)
    row, curve = rows(n=N_TRIALS + 1)[N_TRIALS]
    write_trial(store, "s", row, curve)
    seen = refreshed(live, seen)
    assert config(live, row["trial_id"])["provenance"]["trial_id"] == row["trial_id"]
    assert config(live, "t00001")["provenance"]["seed"] == 0  # from the cache, not the zeros
    os.utime(path)  # now it looks changed: re-read, found damaged, skipped
    seen = refreshed(live, seen)
    status, body = get(live, "/api/config?sweep=s&trial_id=t00001")
    assert status == 404 and "no trial 't00001'" in body
    compact(store, "s", grace_s=0)
    assert sorted(p.name.split("-")[0] for p in (store / "s" / "trials").iterdir()) == ["compact"]
    refreshed(live, seen)
    for trial_id in ("t00000", "t00002", "t00003", row["trial_id"]):
        assert config(live, trial_id)["provenance"]["trial_id"] == trial_id
    assert get(live, "/api/dashboard")[0] == 200


def test_a_damaged_store_answers_500_with_the_line(store, live):
    for path in (store / "s" / "trials").iterdir():
        truncate(path)
    deadline = time.monotonic() + 60
    while get(live, "/api/dashboard")[0] != 500:  # a payload built before the damage is served until then
        assert time.monotonic() < deadline, "the server never saw the damage"
        time.sleep(0.05)
    for query in ("/api/dashboard", "/api/config?sweep=s&trial_id=t00000", "/api/version"):
        status, body = get(live, query)
        assert status == 500 and body.count("\n") == 1
        assert body.startswith(f"{store / 's'}: none of its {N_TRIALS} trials fragment")


def test_server_answers_a_burst(live):
    trial_ids = [f"t0000{i % N_TRIALS}" for i in range(48)]
    with ThreadPoolExecutor(8) as pool:
        docs = list(pool.map(lambda t: config(live, t), trial_ids))
    assert [d["provenance"]["trial_id"] for d in docs] == trial_ids


def test_fragment_cache_reads_like_the_store(store):
    cache = FragmentCache()
    write_trial(store, "other", *rows("other", 1)[0])
    for _ in range(2):
        assert load_trials(store, cache=cache).equals(load_trials(store))
        assert load_curves(store, ["s"], cache=cache).equals(load_curves(store, ["s"]))


def test_a_trial_row_whose_config_json_is_not_json_is_skipped_by_every_reader(store, capsys):
    """Sound Parquet, one value damaged: the row is left out by the plain readers, the
    live server's cache (checked once per fragment) and resume's keys alike; compaction
    holds its fragment until the trial has run again, then merges it away."""
    path = fragment(store, "trials", "t00001")
    table = pq.read_table(path)
    column = table.schema.get_field_index("config_json")
    pq.write_table(table.set_column(column, "config_json", pa.array(["{not json"])), path)
    cache = FragmentCache()
    for _ in range(2):
        assert load_trials(store, cache=cache).equals(load_trials(store))
        assert load_curves(store, ["s"], cache=cache).equals(load_curves(store, ["s"]))
    assert "t00001" not in set(load_trials(store)["trial_id"])
    assert len(completed_keys(store, "s")) == N_TRIALS - 1
    (line,) = set(warnings(capsys.readouterr().err))
    assert str(path) in line and "t00001" in line and "not a JSON object" in line
    compact(store, "s", grace_s=0, stale_s=0)
    assert path.exists()  # held: its row would otherwise go unseen
    retry, curve = rows()[1]
    write_trial(store, "s", {**retry, "finished_at": None}, curve)
    compact(store, "s", grace_s=0, stale_s=0)
    assert not path.exists() and len(list((store / "s" / "trials").iterdir())) == 1
    assert len(completed_keys(store, "s")) == N_TRIALS


def zero_fill(path: Path) -> str:
    """What a crash of the machine can leave: the file's length in zero bytes."""
    path.write_bytes(bytes(path.stat().st_size))
    return "not a Parquet file (truncated?)"


@pytest.fixture(scope="module")
def finished_sweep(shared_ray, tmp_path_factory) -> Path:
    """The root of one real grid sweep `copied` (4 trials, every one completed), which the
    end-to-end tests below copy and damage (the copy, never this root)."""
    from sweep_helpers import run, write_space

    tmp = tmp_path_factory.mktemp("finished")
    root = tmp / "sweeps"
    shared_ray.start()
    assert run("run", str(write_space(tmp, name="copied")), "--root", str(root),
               "--search", "grid", "--scheduler", "fifo", "--max-concurrent", "2") == 0
    return root


@pytest.mark.slow
@pytest.mark.parametrize("table,damage", [("trials", truncate), ("curves", zero_fill)])
def test_resume_reruns_the_trials_of_a_damaged_fragment(finished_sweep, local_ray, tmp_path, capsys,
                                                        table, damage):
    """A damaged trials fragment, or a damaged curves fragment (whose trial would otherwise
    keep its row and never get its curve back): resume runs those trials again."""
    from sweep_helpers import run

    root = Path(shutil.copytree(finished_sweep, tmp_path / "sweeps", symlinks=True))
    before = load_trials(root, ["copied"])
    assert len(before) == 4 and (before["status"] == "completed").all()
    # whichever file holds a trial (one per trial, or one after a compaction): damage one
    files = {p: pq.read_table(p, columns=["trial_id"])["trial_id"].to_pylist()
             for p in (root / "copied" / "trials").glob("*.parquet")}
    path, lost = min(files.items())
    path = path.parent.parent / table / path.name  # the curves of those trials, or their rows
    damage(path)
    capsys.readouterr()
    assert run("resume", "copied", "--root", str(root), "--max-concurrent", "2") == 0
    out, err = capsys.readouterr()
    assert f"({len(lost)} trials this run)" in out and str(path) in err
    after = load_trials(root, ["copied"])
    assert sorted(after["trial_id"]) == sorted(before["trial_id"])
    assert (after["status"] == "completed").all()
    curves = load_curves(root, ["copied"])
    assert set(curves["trial_id"]) == set(after["trial_id"])  # every trial has its curve again


# ---------------------------------------------------------------- version links lost


def _without_links(source: Path, target: Path) -> Path:
    """A copy that skips symbolic links (a zip, an object-store sync, some copy tools)."""
    return Path(shutil.copytree(source, target, ignore=lambda folder, names: [
        n for n in names if os.path.islink(os.path.join(folder, n))]))


def _fragment_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.rglob("*.parquet")}


def _unlink_current(root: Path) -> None:
    (root / "s" / ".current").unlink()


def _dangle_current(root: Path) -> None:
    (root / "s" / ".current").unlink()
    (root / "s" / ".current").symlink_to(".versions/gone")


@pytest.fixture
def compacted(store) -> Path:
    """Sweep `s` after a compaction, with two trials written since (two versions' worth)."""
    compact(store, "s", grace_s=0, stale_s=0)
    for row, curve in rows(n=N_TRIALS + 2)[N_TRIALS:]:
        write_trial(store, "s", row, curve)
    return store


@pytest.mark.parametrize("breakage", ["copied without links", "no .current", "dangling .current"])
def test_a_root_without_its_version_links_is_repaired_and_loses_nothing(compacted, tmp_path,
                                                                        breakage, capsys):
    if breakage == "copied without links":
        root = _without_links(compacted, tmp_path / "copy")
        assert not (root / "s" / "trials").exists()
    else:
        root = compacted
        (_unlink_current if breakage == "no .current" else _dangle_current)(root)
    expected = sorted(t["trial_id"] for t, _ in rows(n=N_TRIALS + 2))

    assert shapesweep(["status", "--root", str(root)]) == 0  # the list of sweeps sees it
    out, err = capsys.readouterr()
    (line,) = warnings(err)
    assert line.startswith(f"warning: {root / 's'}: .current ") and "pointed .current at .versions/" in line
    assert sorted(load_trials(root, ["s"])["trial_id"]) == expected
    assert len(completed_keys(root, "s")) == N_TRIALS + 2  # resume runs nothing again
    compact(root, "s", grace_s=0, stale_s=0)  # what resume does first: deletes nothing unmerged
    assert sorted(raw_ids(root / "s" / "trials")) == expected
    assert sorted(set(load_curves(root, ["s"])["trial_id"])) == expected
    assert not (root / "s" / "damaged").exists() and warnings(capsys.readouterr().err) == []


def test_a_writer_into_a_sweep_with_a_dangling_current_repairs_it_first(compacted, capsys):
    _dangle_current(compacted)
    extra, curve = rows(n=N_TRIALS + 3)[-1]
    write_trial(compacted, "s", extra, curve)  # was: FileExistsError, '.../trials' is no folder
    assert len(load_trials(compacted, ["s"])) == N_TRIALS + 3
    assert "leads nowhere (.versions/gone)" in capsys.readouterr().err


def test_versions_none_marked_complete_are_refused_in_one_line(compacted, tmp_path, capsys):
    """Two versions, neither marked (a root from before the mark, and a killed compaction's
    leftover beside it), and no `.current` to say which: one line naming the repair, and
    nothing deleted by any verb."""
    _unlink_current(compacted)
    kept = compacted / "s" / ".versions"
    (only,) = kept.iterdir()
    (only / ".complete").unlink()
    shutil.copytree(only, kept / "00000000000000000001-leftover")
    before = _fragment_bytes(kept)
    for verb in (["status", "s"], ["resume", "s"], ["export", "s", "--top", "1", "--out", str(tmp_path / "o")]):
        assert shapesweep([*verb, "--root", str(compacted)]) == 2
        named = [ln for ln in capsys.readouterr().err.splitlines() if "ln -sfn" in ln]
        assert len(set(named)) == 1 and f"{compacted / 's'}: .current leads to no version" in named[0]
    with pytest.raises(UserError, match="none of 2 in .versions"):
        completed_keys(compacted, "s")
    with pytest.raises(UserError, match="none of 2 in .versions"):
        compact(compacted, "s", grace_s=0, stale_s=0)
    assert _fragment_bytes(kept) == before
    (compacted / "s" / ".current").symlink_to(f".versions/{only.name}")  # the repair it names
    assert len(load_trials(compacted, ["s"])) == N_TRIALS + 2


# ---------------------------------------------------------------- the object-store root


def _s3(bucket_root: str, tmp_path: Path) -> tuple[str, object, str]:
    """A fresh root in the test bucket: (URI, its file system, its path there)."""
    import pyarrow.fs as pafs

    root = f"{bucket_root}/{tmp_path.name}"
    fs, path = pafs.FileSystem.from_uri(root)
    return root, fs, path


def _upload_without_links(local: Path, fs, path: str) -> None:
    """What a sync that skips symbolic links leaves in a bucket: the regular files only."""
    for folder, dirs, files in os.walk(local, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in files:
            source = Path(folder) / name
            if source.is_symlink() or name == ".lock":
                continue
            with fs.open_output_stream(f"{path}/{source.relative_to(local).as_posix()}") as out:
                out.write(source.read_bytes())


def _objects(fs, path: str) -> dict[str, int]:
    import pyarrow.fs as pafs

    found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return {info.path.removeprefix(path + "/"): info.size for info in found
            if info.type == pafs.FileType.File}


def test_an_object_store_root_uploaded_without_links_is_restored_from_its_versions(
        compacted, bucket, tmp_path, capsys):  # noqa: F811 - the fixture imported above
    from shapesweep.results.store import list_sweeps

    root, fs, path = _s3(bucket, tmp_path)
    _upload_without_links(compacted, fs, path)
    stored = {k: v for k, v in _objects(fs, path).items() if k.startswith("s/.versions/")}
    assert stored and not any(k.startswith("s/trials/") for k in _objects(fs, path))
    expected = sorted(t["trial_id"] for t, _ in rows(n=N_TRIALS + 2))

    assert list_sweeps(root) == ["s"]
    (line,) = warnings(capsys.readouterr().err)
    assert "no table folders beside .versions (uploaded without links?): copied the" in line
    assert sorted(load_trials(root, ["s"])["trial_id"]) == expected
    assert len(completed_keys(root, "s")) == N_TRIALS + 2
    compact(root, "s", grace_s=0, stale_s=0)
    assert sorted(load_trials(root, ["s"])["trial_id"]) == expected
    assert sorted(set(load_curves(root, ["s"])["trial_id"])) == expected
    after = _objects(fs, path)
    assert {k: v for k, v in after.items() if k.startswith("s/.versions/")} == stored  # left as it is
    assert len([k for k in after if k.startswith("s/trials/")]) == 1
    assert warnings(capsys.readouterr().err) == []  # restored once


def test_a_damaged_compacted_curves_file_on_an_object_store_is_quarantined_alone(
        bucket, tmp_path, capsys):  # noqa: F811 - the fixture imported above
    root, fs, path = _s3(bucket, tmp_path)
    for row, curve in rows():
        write_trial(root, "s", row, curve)
    compact(root, "s", grace_s=0, stale_s=0)
    (merged,) = [k for k in _objects(fs, path) if k.startswith("s/curves/")]
    with fs.open_input_stream(f"{path}/{merged}") as stream:
        data = stream.read()
    with fs.open_output_stream(f"{path}/{merged}") as out:
        out.write(data[: len(data) // 2])
    compact(root, "s", grace_s=0, stale_s=0)
    objects = _objects(fs, path)
    assert [k for k in objects if k.startswith("s/damaged/")] == [merged.replace("s/", "s/damaged/", 1)]
    assert len([k for k in objects if k.startswith("s/trials/")]) == 1  # the intact table stays
    assert len(load_trials(root, ["s"])) == N_TRIALS and completed_keys(root, "s") == {}
    for row, curve in rows():  # what resume does: each trial again
        write_trial(root, "s", {**row, "finished_at": None}, curve)
    compact(root, "s", grace_s=0, stale_s=0)
    assert len(completed_keys(root, "s")) == N_TRIALS
    assert sorted(set(load_curves(root, ["s"])["trial_id"])) == sorted(load_trials(root)["trial_id"])
    capsys.readouterr()


@pytest.mark.slow
@pytest.mark.parametrize("search", ["grid", "optuna"])
def test_resume_after_a_copy_without_links_and_a_damaged_merged_curves_file(finished_sweep, local_ray,
                                                                            tmp_path, capsys, search):
    """End to end: a sweep's root copied without its links resumes with every result and
    runs nothing; then its merged curves damaged, resume runs exactly the trials that lost
    their curves again (an Optuna sweep too), and status counts every trial."""
    from sweep_helpers import run, write_space

    root = finished_sweep  # grid: only its copy is changed
    if search == "optuna":
        root = tmp_path / "sweeps"
        assert run("run", str(write_space(tmp_path, name="copied")), "--root", str(root),
                   "--search", "optuna", "--num-samples", "3", "--scheduler", "fifo",
                   "--max-concurrent", "2") == 0
    before = load_trials(root, ["copied"])
    assert len(before) >= 3 and (before["status"] == "completed").all()

    copy = _without_links(root, tmp_path / "copy")
    capsys.readouterr()
    assert run("resume", "copied", "--root", str(copy), "--max-concurrent", "2") == 0
    out, err = capsys.readouterr()
    assert "(0 trials this run)" in out and "pointed .current at .versions/" in err
    assert sorted(load_trials(copy, ["copied"])["trial_id"]) == sorted(before["trial_id"])

    (merged,) = (copy / "copied" / "curves").glob("*.parquet")
    truncate(merged)
    assert run("resume", "copied", "--root", str(copy), "--max-concurrent", "2") == 0
    out, err = capsys.readouterr()
    assert f"({len(before)} trials this run)" in out and str(merged) in err
    after = load_trials(copy, ["copied"])
    assert sorted(after["trial_id"]) == sorted(before["trial_id"]) and (after["status"] == "completed").all()
    assert set(load_curves(copy, ["copied"])["trial_id"]) == set(after["trial_id"])
    assert run("status", "copied", "--root", str(copy)) == 0
    assert f"completed: {len(before)}" in capsys.readouterr().out


def test_links_that_lead_nowhere_with_no_versions_left_are_one_line(compacted, capsys):
    shutil.rmtree(compacted / "s" / ".versions")
    assert shapesweep(["status", "s", "--root", str(compacted)]) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert f"{compacted / 's'}: its table links lead nowhere and .versions holds no version" in error
    assert shapesweep(["status", "--root", str(compacted)]) == 0  # the list names it, and goes on
    assert "warning: skipping" in capsys.readouterr().err
