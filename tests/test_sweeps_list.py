"""The sweeps list (`status` without a NAME) after a crash (issue 57): `running` only while a
driver holds the sweep's live lease, `finished` only where the store holds the trials the
catalog planned. A real store: Parquet files, the SQLite catalog and its lease table, a lease
held by a process that has exited. No Ray starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from synthetic import synthetic_sweep

from shapesweep.results import live
from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.sweep.cli.main import main as shapesweep


def _listed(capsys, root: str) -> dict:
    """The sweep `s` as `status --format json` lists it."""
    assert shapesweep(["status", "--root", root, "--format", "json"]) == 0
    (record,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "s"]
    return record


@pytest.fixture
def sweep(tmp_path):
    """Sweep `s` as a driver leaves it: two trials landed and compacted, in a catalog that
    planned two and says `finished`."""
    root = str(tmp_path / "sweeps")
    store = ParquetStore(root)
    pairs = synthetic_sweep("s", 2, families=("conventional",), seed=3, tune=None)
    for row, curve in pairs:
        store.write_trial("s", {**row, "status": "completed"}, curve)
    store.compact("s", stale_s=0)
    catalog = Catalog(default_catalog_url(root))
    catalog.register("s", "tiny", "name: tiny\n", "hash", n_candidates=2)
    catalog.set_status("s", "finished")
    return root, store, catalog, pairs


def test_a_finished_claim_the_store_does_not_hold_reads_interrupted(sweep, tmp_path, capsys):
    root, store, _, _ = sweep
    assert _listed(capsys, root)["status"] == "finished"
    # The merged trials file garbled, then set aside by the next driver's compaction, which
    # died in Ray's start: the catalog keeps the earlier run's `finished`.
    (merged,) = [p for p in (tmp_path / "sweeps" / "s").rglob("*.parquet") if p.parent.name == "trials"]
    merged.write_bytes(merged.read_bytes()[: merged.stat().st_size // 2])
    store.compact("s", stale_s=0)
    capsys.readouterr()  # the warning naming the file set aside
    assert store.load_trials(["s"]).empty
    record = _listed(capsys, root)
    assert record["completed"] == 0 and record["trials"] == 2
    assert record["status"] == "interrupted"  # never `finished` with none of its trials held


def _lease_of_an_exited_process(root: str) -> None:
    """A driver killed while it held the lease: its pid is gone, its heartbeat recent."""
    code = ("import sys; from shapesweep.results.parquet_store import ParquetStore; "
            "assert ParquetStore(sys.argv[1]).take_lease('s', 'dead-driver') is None")
    subprocess.run([sys.executable, "-c", code, root], check=True)


def test_a_dead_drivers_live_curves_and_running_state_are_not_running(sweep, capsys):
    root, store, catalog, pairs = sweep
    # A resume was training a third trial when the disk filled and the driver died.
    catalog.set_status("s", "running")
    row, curve = pairs[0]
    spec = {"trial_id": "s-3", "key": row["key"], "seed": 9, "tuned_json": "{}",
            "row": {k: v for k, v in row.items() if k not in ("trial_id", "status", "sweep")},
            "document": json.loads(row["config_json"])}
    live.append_point(root, "s", spec, {k: curve[0].get(k) for k in ("step", "tokens", "val_loss")})
    _lease_of_an_exited_process(root)
    held = store.lease("s")
    assert held is not None and not held.alive()
    record = _listed(capsys, root)
    assert record["running"] == 0 and record["status"] == "interrupted" and record["completed"] == 2
    # The same leftovers with a live driver holding the lease: it runs, one trial training.
    assert store.take_lease("s", "live-driver") is None  # the dead holder's, taken over
    record = _listed(capsys, root)
    assert record["running"] == 1 and record["status"] == "running"
    store.release_lease("s", "live-driver")
    assert _listed(capsys, root)["running"] == 0
