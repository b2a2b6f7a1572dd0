"""The Parquet results store: real files through pyarrow, real processes writing at once."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from shapesweep.common import UserError
from shapesweep.results import (
    CURVE_COLUMNS,
    TRIAL_COLUMNS,
    compact,
    completed_keys,
    list_sweeps,
    load_curves,
    load_trials,
    local_folder,
    normalize_trial_row,
    read_sweep_file,
    sweep_dir,
    write_sweep_file,
    write_trial,
)
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import make_config

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONFIGS = [
    {"family": "conventional", "d_model": 64, "n_layers": 2, "n_heads": 2, "d_h": 256,
     "activation": "gelu", "bias": True},
    {"family": "hourglass", "d_model": 64, "n_layers": 3, "n_heads": 4, "d_h": 32, "k": 3},
    {"family": "variable_width", "d_model": 64, "n_layers": 4, "n_heads": 2, "d_h": 256,
     "shape": "bottleneck", "beta": 0.5, "alpha": 0.5},
    {"family": "vision_mlp", "d_x": 64, "d_z": 32, "d_h": 128, "n_layers": 2,
     "input_projection": "fixed"},
]


def trial_row(fields: dict, trial_id: str, seed: int = 0, **extra) -> dict:
    """A trial row as the sweep writes it: shape, accounting and metrics of a real config."""
    config = make_config(fields)
    shape = {k: v for k, v in config.model_dump().items() if k in TRIAL_COLUMNS.names}
    shape |= {"ffn_ratio": config.ffn_ratio, "width_depth_ratio": config.width_depth_ratio}
    return {
        **shape, **account(config, seq_len=64).to_dict(), "trial_id": trial_id, "seed": seed,
        "key": f"key-{fields['family']}", "status": "completed", "val_loss": 2.5 + seed,
        "best_val_loss": 2.4 + seed, "tokens": np.int64(4096), "steps": 8, "wall_time_s": 1.25,
        "config_json": {"model": fields, "train": {"tokens": 4096}}, "code_version": "abc123",
        "data_hash": "d" * 16, "seq_len": 64, "lr": 3e-3, "finished_at": T0, **extra,
    }


def curve(n_steps: int, scale: float = 1.0) -> list[dict]:
    return [{"step": s, "tokens": 512 * s, "train_loss": scale * (3 - s / 10),
             "val_loss": scale * (3.1 - s / 10), "lr": 1e-3, "elapsed_s": 0.1 * s}
            for s in range(1, n_steps + 1)]


def test_round_trip_row_by_row(tmp_path):
    written = {}
    for i, fields in enumerate(CONFIGS):
        row = trial_row(fields, f"trial_{i}", seed=i, finished_at=T0 + timedelta(seconds=i))
        write_trial(tmp_path, "rt", row, curve(i + 2, scale=i + 1))
        written[f"trial_{i}"] = normalize_trial_row({**row, "sweep": "rt"})
    trials = load_trials(tmp_path, ["rt"])
    assert list(trials.columns) == TRIAL_COLUMNS.names
    assert sorted(trials["trial_id"]) == sorted(written)
    for record in trials.to_dict("records"):
        expected = written[record["trial_id"]]
        for column, value in expected.items():
            got = record[column]
            if value is None:
                assert got is None or (isinstance(got, float) and math.isnan(got)), column
            elif column == "widths":
                assert list(got) == value
            else:
                assert got == value, (column, got, value)
    vision = trials.set_index("trial_id").loc["trial_3"]
    assert vision["family"] == "vision_mlp" and math.isnan(vision["n_heads"])
    assert vision["params_frozen"] == 64 * 32
    variable = trials.set_index("trial_id").loc["trial_2"]
    assert list(variable["widths"]) != [64] * 4 and variable["avg_layer_width"] < 64

    curves = load_curves(tmp_path, ["rt"])
    assert list(curves.columns) == CURVE_COLUMNS.names
    for i in range(len(CONFIGS)):
        rows = curves[curves["trial_id"] == f"trial_{i}"]
        expected = curve(i + 2, scale=i + 1)
        assert rows["step"].tolist() == [c["step"] for c in expected]
        assert rows["val_loss"].tolist() == pytest.approx([c["val_loss"] for c in expected])
        assert set(rows["sweep"]) == {"rt"}


def test_normalize_coerces_and_refuses():
    row = normalize_trial_row({"trial_id": "t", "seed": np.int32(3), "tokens": 4096.0,
                               "val_loss": float("nan"), "train_loss": np.float32(1.5),
                               "bias": np.bool_(True), "widths": np.array([64, 32]),
                               "config_json": {"b": 1, "a": 2}, "finished_at": "2026-01-01T00:00:00"})
    assert row["seed"] == 3 and type(row["seed"]) is int and row["tokens"] == 4096
    assert row["val_loss"] is None and row["train_loss"] == 1.5 and row["bias"] is True
    assert row["widths"] == [64, 32] and row["config_json"] == '{"a": 2, "b": 1}'
    assert row["finished_at"] == T0 and row["psnr"] is None and set(row) == set(TRIAL_COLUMNS.names)
    with pytest.raises(ValueError, match="unknown trial columns: bogus, width_multiple"):
        normalize_trial_row({"trial_id": "t", "bogus": 1, "width_multiple": 4})
    with pytest.raises(ValueError, match="'steps'"):
        normalize_trial_row({"steps": 2.5})
    with pytest.raises(ValueError, match="'d_model'"):
        normalize_trial_row({"d_model": "64"})
    with pytest.raises(ValueError, match="status"):
        normalize_trial_row({"status": "done"})


def test_empty_store_has_every_column(tmp_path):
    for root in (tmp_path / "nothing", f"file://{tmp_path}"):
        assert list_sweeps(root) == []
        trials, curves = load_trials(root), load_curves(root)
        assert trials.empty and list(trials.columns) == TRIAL_COLUMNS.names
        assert curves.empty and list(curves.columns) == CURVE_COLUMNS.names
    assert completed_keys(tmp_path, "none") == {}


def test_a_fragment_written_before_a_column_existed_reads_it_as_null(tmp_path):
    # a store an older shapesweep wrote (here without `blocks_per_region`, `compile_s` and
    # `cpu_model`) loads beside today's rows, the columns it predates null, before and after
    # compaction
    write_trial(tmp_path, "s", trial_row(CONFIGS[0], "new", compile_s=3.5, blocks_per_region=4,
                                         cpu_model="AMD EPYC"), [])
    write_trial(tmp_path, "s", trial_row(CONFIGS[0], "old"), [])
    (old,) = [p for p in (tmp_path / "s" / "trials").glob("*.parquet") if "old" in p.name]
    pq.write_table(pq.read_table(old).drop_columns(["blocks_per_region", "compile_s", "cpu_model"]), old)
    assert "blocks_per_region" not in pq.read_schema(old).names
    for _ in range(2):
        trials = load_trials(tmp_path).set_index("trial_id")
        assert trials.loc["new", "blocks_per_region"] == 4 and trials.loc["new", "compile_s"] == 3.5
        assert trials.loc["new", "cpu_model"] == "AMD EPYC" and pd.isna(trials.loc["old", "cpu_model"])
        assert pd.isna(trials.loc["old", "blocks_per_region"]) and pd.isna(trials.loc["old", "compile_s"])
        compact(tmp_path, "s")


def test_sweep_names_cannot_escape_root(tmp_path):
    for bad in ("../evil", "a/b", "", ".hidden", "x y", "/abs"):
        with pytest.raises(UserError, match="not allowed"):
            write_trial(tmp_path, bad, trial_row(CONFIGS[0], "t"), [])
        with pytest.raises(UserError):
            sweep_dir(tmp_path, bad)
    assert not any(tmp_path.parent.glob("evil")) and list(tmp_path.iterdir()) == []
    assert sweep_dir(tmp_path, "ok-1.a_b") == os.path.join(tmp_path, "ok-1.a_b")


def test_write_refuses_inconsistent_rows(tmp_path):
    with pytest.raises(ValueError, match="sweep"):
        write_trial(tmp_path, "a", {**trial_row(CONFIGS[0], "t"), "sweep": "b"}, [])
    with pytest.raises(ValueError, match="status"):
        write_trial(tmp_path, "a", {**trial_row(CONFIGS[0], "t"), "status": None}, [])
    with pytest.raises(ValueError, match="curve row for trial"):
        write_trial(tmp_path, "a", trial_row(CONFIGS[0], "t"), [{"trial_id": "u", "step": 1}])
    assert load_trials(tmp_path).empty


def test_retried_trial_keeps_newest_attempt_and_its_curve(tmp_path):
    first = trial_row(CONFIGS[1], "t0", status="failed", error="RuntimeError: loss is nan",
                      val_loss=float("nan"), finished_at=T0)
    write_trial(tmp_path, "retry", first, curve(2))
    write_trial(tmp_path, "retry", trial_row(CONFIGS[1], "t1"), curve(3))
    retry = trial_row(CONFIGS[1], "t0", finished_at=T0 + timedelta(minutes=5), val_loss=2.0)
    write_trial(tmp_path, "retry", retry, curve(5, scale=2))
    # A stale copy of the first attempt written last still loses on finished_at.
    write_trial(tmp_path, "retry", first, curve(2))

    trials = load_trials(tmp_path, ["retry"]).set_index("trial_id")
    assert sorted(trials.index) == ["t0", "t1"]
    assert trials.loc["t0", "status"] == "completed" and trials.loc["t0", "val_loss"] == 2.0
    assert trials.loc["t0", "error"] is None or pd.isna(trials.loc["t0", "error"])
    curves = load_curves(tmp_path, ["retry"])
    t0 = curves[curves["trial_id"] == "t0"]
    assert t0["step"].tolist() == [1, 2, 3, 4, 5]
    assert t0["train_loss"].tolist() == pytest.approx([c["train_loss"] for c in curve(5, 2)])
    assert len(curves[curves["trial_id"] == "t1"]) == 3


def test_completed_keys_prefers_finished_over_failed(tmp_path):
    write_trial(tmp_path, "s", trial_row(CONFIGS[0], "a", seed=0), [])
    write_trial(tmp_path, "s", trial_row(CONFIGS[0], "b", seed=1, status="failed", error="x"), [])
    write_trial(tmp_path, "s", trial_row(CONFIGS[1], "c", seed=0, status="stopped_early"), [])
    # a later failed retry under a new trial id does not hide the earlier completed one
    write_trial(tmp_path, "s", trial_row(CONFIGS[0], "d", seed=0, status="failed",
                                         finished_at=T0 + timedelta(hours=1)), [])
    # the same candidate and seed with tuned values is another trial
    write_trial(tmp_path, "s", trial_row(CONFIGS[0], "e", seed=0, status="failed",
                                         tuned_json='{"lr": 0.01}'), [])
    assert completed_keys(tmp_path, "s") == {
        ("key-conventional", "{}", 0): "completed", ("key-conventional", "{}", 1): "failed",
        ("key-hourglass", "{}", 0): "stopped_early",
        ("key-conventional", '{"lr": 0.01}', 0): "failed",
    }


def test_compact_keeps_the_same_rows(tmp_path):
    root = f"file://{tmp_path}"  # URIs work the same as local folders
    for i in range(6):
        write_trial(root, "c", trial_row(CONFIGS[i % 4], f"t{i}", seed=i), curve(i + 1))
    write_trial(root, "c", trial_row(CONFIGS[0], "t0", finished_at=T0 + timedelta(1)), curve(9))
    write_trial(tmp_path, "other", trial_row(CONFIGS[0], "x"), curve(1))
    before_t, before_c = load_trials(root, ["c"]), load_curves(root, ["c"])
    assert len(before_t) == 6 and len(before_c) == 9 + 2 + 3 + 4 + 5 + 6

    merged = compact(root, "c", grace_s=0)
    folder = tmp_path / "c"
    assert [p.name for p in (folder / "trials").iterdir()] == [os.path.basename(merged)]
    assert [p.name for p in (folder / "curves").iterdir()] == [os.path.basename(merged)]
    pd.testing.assert_frame_equal(load_trials(root, ["c"]), before_t)
    pd.testing.assert_frame_equal(load_curves(root, ["c"]), before_c)

    # fragments after a compaction, and a second compaction, keep the semantics
    write_trial(root, "c", trial_row(CONFIGS[1], "t1", finished_at=T0 + timedelta(2)), curve(1))
    assert load_trials(root, ["c"]).set_index("trial_id").loc["t1", "family"] == "hourglass"
    compact(root, "c", grace_s=0)
    after = load_curves(root, ["c"])
    assert len(after) == len(before_c) - 2 + 1 and len(load_trials(root, ["c"])) == 6
    assert list_sweeps(root) == ["c", "other"] and len(load_trials(tmp_path)) == 7


def test_pyarrow_dataset_reads_the_folder_directly(tmp_path):
    for i in range(3):
        write_trial(tmp_path, "direct", trial_row(CONFIGS[i], f"t{i}"), curve(4))
    trials = ds.dataset(tmp_path / "direct" / "trials", format="parquet").to_table()
    assert trials.schema.equals(TRIAL_COLUMNS) and sorted(trials["trial_id"].to_pylist()) == [
        "t0", "t1", "t2"]
    curves = ds.dataset(tmp_path / "direct" / "curves", format="parquet").to_table()
    assert curves.num_rows == 12 and curves.schema.equals(CURVE_COLUMNS)


def test_unrenamed_temp_file_is_invisible(tmp_path):
    write_trial(tmp_path, "crash", trial_row(CONFIGS[0], "good"), curve(2))
    full = tmp_path / "crash" / "trials" / "good.bytes"
    pq.write_table(pq.read_table(next((tmp_path / "crash" / "trials").glob("*.parquet"))), full)
    data = full.read_bytes()
    full.unlink()
    # what a writer killed before its rename leaves: half a file under the temporary name
    for table in ("trials", "curves"):
        (tmp_path / "crash" / table / ".part-bad-1.parquet.0123abcd.tmp").write_bytes(data[: len(data) // 2])
    assert load_trials(tmp_path)["trial_id"].tolist() == ["good"]
    assert len(load_curves(tmp_path)) == 2
    assert ds.dataset(tmp_path / "crash" / "trials", format="parquet").count_rows() == 1


def test_orphan_curves_without_trial_are_ignored(tmp_path):
    """A writer killed between its curves and trials renames leaves curves nobody reads."""
    write_trial(tmp_path, "o", trial_row(CONFIGS[0], "t"), curve(2))
    orphan = tmp_path / "o" / "curves" / "part-t-99999999999999999999-000000000000.parquet"
    pq.write_table(pq.read_table(next((tmp_path / "o" / "curves").glob("*.parquet"))), orphan)
    fresh = orphan.with_name("part-u-99999999999999999999-000000000001.parquet")
    fresh.write_bytes(orphan.read_bytes())
    assert len(load_curves(tmp_path)) == 2
    compact(tmp_path, "o", grace_s=0)  # one trials file: nothing to merge, still readable
    assert len(load_curves(tmp_path)) == 2
    write_trial(tmp_path, "o", trial_row(CONFIGS[0], "v"), curve(3))
    stale = time.time() - 2 * 3600
    os.utime(orphan, (stale, stale))
    compact(tmp_path, "o", grace_s=0)
    # the stale orphan is a crash leftover; a fresh one may be a write in flight
    assert not orphan.exists() and fresh.exists()
    assert len(load_curves(tmp_path)) == 5 and len(list((tmp_path / "o" / "curves").iterdir())) == 2


KILL_WRITER = """
import sys
from shapesweep.results import write_trial
root, i = sys.argv[1], 0
curve = [{"step": s, "tokens": s, "train_loss": 1.0, "val_loss": 1.0} for s in range(50000)]
while True:
    write_trial(root, "killed", {"trial_id": f"t{i}", "key": "k", "seed": i,
                                 "status": "completed"}, curve)
    print(i, flush=True)
    i += 1
"""


def _temp_files(folder) -> set:
    """Temporary files with some bytes in them: a write truly under way."""
    found = set()
    for path in folder.rglob(".*.tmp") if folder.exists() else []:
        try:
            if path.stat().st_size > 0:
                found.add(path)
        except FileNotFoundError:  # renamed into place meanwhile
            pass
    return found


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_writer_killed_mid_write_leaves_nothing_half_written(tmp_path):
    """SIGKILL a writer while its temporary file exists: readers see whole trials only."""
    folder, leftovers = tmp_path / "killed", 0
    for _ in range(2):
        before = _temp_files(folder)
        writer = subprocess.Popen([sys.executable, "-c", KILL_WRITER, str(tmp_path)],
                                  stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()  # one trial is written; wait for the next one's temp file
        deadline = time.monotonic() + 60
        while not _temp_files(folder) - before and time.monotonic() < deadline:
            time.sleep(0.001)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        leftovers += len(_temp_files(folder) - before)
        trials, curves = load_trials(tmp_path), load_curves(tmp_path)
        assert len(trials) >= 1 and trials["trial_id"].is_unique
        assert (curves.groupby("trial_id").size() == 50000).all()
        assert set(curves["trial_id"]) == set(trials["trial_id"])
    assert leftovers >= 1  # at least one kill really landed mid-write
    for path in folder.rglob("*.parquet"):  # every visible file is whole
        pq.read_table(path)


def _write_many(root: str, worker: int, n_trials: int) -> None:
    for i in range(n_trials):
        write_trial(root, "par", trial_row(CONFIGS[i % 4], f"w{worker}-{i}", seed=worker), curve(7))


def _compact_until(root: str, stop_file: str) -> None:
    while not os.path.exists(stop_file):
        compact(root, "par", grace_s=0.05)
        time.sleep(0.05)


def test_concurrent_writers_readers_and_compaction(tmp_path):
    context = multiprocessing.get_context("fork")  # pyarrow re-creates its thread pools after fork
    root, stop = str(tmp_path), str(tmp_path / "stop")
    writers = [context.Process(target=_write_many, args=(root, w, 15)) for w in range(3)]
    compactor = context.Process(target=_compact_until, args=(root, stop))
    for process in (*writers, compactor):
        process.start()
    seen = 0
    while any(w.is_alive() for w in writers):
        curves = load_curves(root)  # then trials: a trial may land in between, never vanish
        trials = load_trials(root)
        assert trials["trial_id"].is_unique and len(trials) >= seen
        counts = curves.groupby("trial_id").size()
        assert set(counts.index) <= set(trials["trial_id"]) and (counts == 7).all()
        seen = len(trials)
    open(stop, "w").close()
    for process in (*writers, compactor):
        process.join(timeout=60)
        assert process.exitcode == 0
    trials = load_trials(root)
    assert sorted(trials["trial_id"]) == sorted(f"w{w}-{i}" for w in range(3) for i in range(15))
    assert len(load_curves(root)) == 45 * 7
    compact(root, "par", grace_s=0)
    assert len(load_trials(root)) == 45 and len(list((tmp_path / "par" / "trials").iterdir())) == 1


@pytest.mark.parametrize("uri", [False, True])
def test_sweep_files_round_trip_atomically_under_a_path_or_file_uri(tmp_path, uri):
    root = f"file://{tmp_path}" if uri else str(tmp_path)
    assert local_folder(root) == str(tmp_path)
    assert read_sweep_file(root, "s1", "sweep.json") is None
    write_sweep_file(root, "s1", "sweep.json", '{"a": 1}')
    write_sweep_file(root, "s1", "sweep.json", '{"a": 2}')  # replaced whole
    assert read_sweep_file(root, "s1", "sweep.json") == '{"a": 2}'
    assert sorted(p.name for p in (tmp_path / "s1").iterdir()) == ["sweep.json"]  # no temp left
    with pytest.raises(UserError):
        write_sweep_file(root, "../escape", "sweep.json", "{}")
