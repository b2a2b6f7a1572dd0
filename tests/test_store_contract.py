"""The `ResultsStore` contract (`shapesweep.results.interface`), checked against every
implementation: the Parquet store with its SQLite catalog (real files, real processes) and
the in-memory store. A new backend joins by adding itself to `STORES`."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from shapesweep.common import UserError
from shapesweep.results.interface import ResultsStore
from shapesweep.results.memory_store import MemoryStore
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.schema import CURVE_COLUMNS, LAYER_COLUMNS, TRIAL_COLUMNS

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STORES = ("parquet", "memory")


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> ResultsStore:
    if request.param == "parquet":
        return ParquetStore(tmp_path / "root")
    return MemoryStore()


def row(trial_id: str, seed: int = 0, at: int = 0, status: str = "completed", loss: float = 2.0,
        key: str = "k1") -> dict:
    return {"trial_id": trial_id, "key": key, "seed": seed, "family": "conventional", "status": status,
            "val_loss": loss, "config_json": {"model": {"d_model": 64}}, "tuned_json": "{}",
            "finished_at": T0 + timedelta(seconds=at)}


def curve(n: int, scale: float = 1.0) -> list[dict]:
    return [{"step": s, "tokens": 64 * s, "val_loss": scale * (3 - s / 10)} for s in range(1, n + 1)]


def layers(n: int) -> list[dict]:
    return [{"layer": i, "threshold": 0.9, "width": 64, "matrix_entropy": 0.5 + i} for i in range(n)]


def test_trials_read_back_exactly_once_newest_attempt_with_its_own_curve(store):
    store.write_trial("s", row("a", loss=3.0, at=1), curve(3, scale=2.0))
    store.write_trial("s", row("a", loss=2.5, at=2), curve(5))  # the retry: it wins
    store.write_trial("s", row("b", seed=1), curve(4), layers(2))
    store.write_trial("t", row("a"), curve(2))  # another sweep's trial of the same id
    trials = store.load_trials(["s"])
    assert list(trials.columns) == TRIAL_COLUMNS.names
    assert sorted(trials["trial_id"]) == ["a", "b"]
    assert trials.set_index("trial_id").loc["a", "val_loss"] == 2.5
    curves = store.load_curves(["s"])
    assert list(curves.columns) == CURVE_COLUMNS.names
    assert curves.groupby("trial_id").size().to_dict() == {"a": 5, "b": 4}
    assert curves["step"].tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 4]  # sorted by trial, step
    found = store.load_layers(["s"])
    assert list(found.columns) == LAYER_COLUMNS.names and found["trial_id"].tolist() == ["b", "b"]
    assert len(store.load_trials()) == 3 and store.sweeps() == ["s", "t"]
    assert store.load_trials(["nothing-here"]).empty


def test_a_row_of_another_trial_or_sweep_is_refused_with_nothing_written(store):
    with pytest.raises(ValueError, match="curve row for trial 'b'"):
        store.write_trial("s", row("a"), [{"trial_id": "b", "step": 1}])
    with pytest.raises(ValueError, match="says sweep 'x'"):
        store.write_trial("s", {**row("a"), "sweep": "x"}, [])
    with pytest.raises(UserError, match="not allowed"):
        store.write_trial("../up", row("a"), [])
    assert store.sweeps() == [] and store.load_trials().empty


def test_compaction_changes_nothing_a_reader_sees_and_is_idempotent(store):
    for i in range(6):
        store.write_trial("s", row(f"t{i}", seed=i % 2, at=i, status="failed" if i == 5 else "completed"),
                          curve(3 + i), layers(1) if i % 3 == 0 else [])
    store.write_trial("s", row("t1", seed=1, at=10, loss=1.5), curve(2))
    before = [store.load_trials(["s"]), store.load_curves(["s"]), store.load_layers(["s"])]
    keys = store.completed_keys("s")
    assert store.compact("s", stale_s=0) is not None
    once = [store.load_trials(["s"]), store.load_curves(["s"]), store.load_layers(["s"])]
    store.compact("s", stale_s=0)
    twice = [store.load_trials(["s"]), store.load_curves(["s"]), store.load_layers(["s"])]
    for a, b, c in zip(before, once, twice, strict=True):
        pd.testing.assert_frame_equal(a, b)
        pd.testing.assert_frame_equal(b, c)
    assert store.completed_keys("s") == keys
    assert len(before[0]) == 6 and before[0].set_index("trial_id").loc["t1", "val_loss"] == 1.5


def test_written_after_a_compaction_reads_beside_the_merged_trials(store):
    store.write_trial("s", row("a"), curve(2))
    store.write_trial("s", row("b"), curve(2))
    store.compact("s", stale_s=0)
    store.write_trial("s", row("a", at=5, loss=1.0), curve(3))  # a retry after the merge wins
    trials = store.load_trials(["s"]).set_index("trial_id")
    assert sorted(trials.index) == ["a", "b"] and trials.loc["a", "val_loss"] == 1.0
    assert store.load_curves(["s"]).groupby("trial_id").size().to_dict() == {"a": 3, "b": 2}


def test_completed_keys_prefer_a_completed_trial_over_a_failed_one(store):
    store.write_trial("s", row("a", at=1, status="completed"), [])
    store.write_trial("s", row("b", at=2, status="failed"), [])  # same triple, newer, failed
    store.write_trial("s", row("c", seed=1, at=3, status="failed"), [])
    assert store.completed_keys("s") == {("k1", "{}", 0): "completed", ("k1", "{}", 1): "failed"}
    assert store.quarantined_trials("s") == set()


def test_small_files_round_trip_replaced_whole(store):
    assert store.read_file("s", "sweep.json") is None
    store.write_file("s", "sweep.json", '{"a": 1}')
    store.write_file("s", "sweep.json", '{"a": 2}')
    assert store.read_file("s", "sweep.json") == '{"a": 2}'
    assert store.read_json("s", "sweep.json", dict) == {"a": 2}
    store.write_file("s", "sweep.json", "[1]")
    with pytest.raises(UserError, match="not a dict") as error:
        store.read_json("s", "sweep.json", dict)
    assert error.value.file == store.file_location("s", "sweep.json")
    assert store.file_location("s", "x").startswith(store.file_location("s"))
    # the damaged file's line ends in its repair, in words a user can follow
    assert store.file_repair("s", "sweep.json").startswith("to repair")
    assert str(error.value).endswith(store.file_repair("s", "sweep.json"))


def test_the_lease_is_taken_once_renewed_and_taken_over_when_its_heartbeat_stops(store, monkeypatch):
    assert store.lease("s") is None and store.live_lease("s") is None
    assert store.take_lease("s", "one") is None
    holder = store.take_lease("s", "two")
    assert holder is not None and holder.token == "one"  # a live holder is never taken over
    assert store.live_lease("s").token == "one"
    assert store.renew_lease("s", "one") and not store.renew_lease("s", "two")
    monkeypatch.setenv("SHAPESWEEP_LEASE_TIMEOUT_S", "0.3")
    time.sleep(0.6)  # no heartbeat: the lease is dead
    assert store.lease("s").token == "one" and store.live_lease("s") is None
    assert store.take_lease("s", "two") is None  # taken over
    assert not store.renew_lease("s", "one") and store.renew_lease("s", "two")
    store.release_lease("s", "one")  # not its lease: nothing happens
    assert store.lease("s").token == "two"
    store.release_lease("s", "two")
    assert store.lease("s") is None


def test_of_callers_racing_for_the_lease_exactly_one_gets_it(store):
    results: dict[str, object] = {}
    start = threading.Barrier(4)

    def take(token: str) -> None:
        start.wait()
        results[token] = store.take_lease("race", token)

    threads = [threading.Thread(target=take, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [token for token, holder in results.items() if holder is None]
    assert len(results) == 4 and len(winners) == 1
    assert {holder.token for holder in results.values() if holder is not None} == set(winners)


def _write_many(root: str, worker: int, n: int) -> None:
    store = ParquetStore(root)
    for i in range(n):
        store.write_trial("par", row(f"w{worker}-{i}", seed=worker, at=i), curve(4))


def test_parquet_two_writer_processes_and_a_compactor_land_each_trial_once(tmp_path):
    """Only the Parquet store is shared between processes: two real writers at once while
    this process compacts and reads; no trial lost, none seen twice."""
    root = str(tmp_path / "root")
    store = ParquetStore(root)
    context = multiprocessing.get_context("fork")  # pyarrow re-creates its thread pools after fork
    writers = [context.Process(target=_write_many, args=(root, w, 12)) for w in range(2)]
    for process in writers:
        process.start()
    seen = 0
    while any(p.is_alive() for p in writers):
        store.compact("par", stale_s=60)
        trials = store.load_trials(["par"]) if store.sweeps() else pd.DataFrame({"trial_id": []})
        assert trials["trial_id"].is_unique and len(trials) >= seen
        seen = len(trials)
    for process in writers:
        process.join(timeout=60)
        assert process.exitcode == 0
    trials = store.load_trials(["par"])
    assert sorted(trials["trial_id"]) == sorted(f"w{w}-{i}" for w in range(2) for i in range(12))
    assert len(store.load_curves(["par"])) == 24 * 4


def test_both_stores_read_the_same_writes_as_the_same_frames(tmp_path):
    """The in-memory store is a faithful second reading: equal frames, column types and all."""
    stores = [ParquetStore(tmp_path / "root"), MemoryStore()]
    for store in stores:
        for i in range(4):
            store.write_trial("s", row(f"t{i}", seed=i, at=i, loss=2 + i / 10), curve(i + 1), layers(i % 2))
        store.write_trial("s", row("t0", at=9, loss=1.0), curve(2), layers(1))
    for read in ("load_trials", "load_curves", "load_layers"):
        parquet, memory = (getattr(store, read)(["s"]) for store in stores)
        pd.testing.assert_frame_equal(parquet, memory, check_dtype=True)


def test_a_parquet_store_pickles_without_its_open_catalog(tmp_path):
    """A Tune callback holding the store is pickled by Tune: the copy opens its own catalog."""
    store = ParquetStore(tmp_path / "root")
    store.write_trial("s", row("t1"), curve(2))
    assert store.take_lease("s", "mine") is None  # the catalog is open now
    copy = pickle.loads(pickle.dumps(store))
    assert "catalog" not in copy.__dict__
    pd.testing.assert_frame_equal(copy.load_trials(["s"]), store.load_trials(["s"]))
    assert copy.lease("s").token == "mine"


def test_parquet_paths_that_are_not_results_live_in_a_local_root_only(tmp_path):
    """Ray's trial logs and the demo's report go beside the results on a local root; an
    object store has no such folder (the callers then choose one of this machine)."""
    local = ParquetStore(tmp_path / "root")
    assert local.local_path("demo-report.html") == str(tmp_path / "root" / "demo-report.html")
    assert local.scratch_folder("s", "_ray") == local.local_path("s", "_ray")
    assert not local.has_own_catalog()
    local.take_lease("s", "mine")
    assert local.has_own_catalog()  # the lease opened (created) ROOT/shapesweep.db
    remote = ParquetStore("s3://bucket/root?region=us-east-1&endpoint_override=127.0.0.1:9")  # asks nothing
    assert remote.local_path("x") is None and remote.scratch_folder("s", "_ray") is None
    assert not remote.has_own_catalog()
