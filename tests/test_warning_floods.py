"""No warning floods: the report, `serve`'s payload and `status` of a sweep with trials
running (live rows beside the stored ones) run with pandas' PerformanceWarning as an error.

A frame built a column at a time (or converted with `astype` by column) holds a block per
column, and pandas warns at every later insert: `serve` printed 190 such lines in 5 minutes
while a sweep ran. The frames are now built in one step; this runs their code paths.
"""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
from synthetic import synthetic_sweep

from shapesweep.dashboards.frames import with_derived
from shapesweep.dashboards.report import build_payload, load_frames
from shapesweep.results.live import append_point
from shapesweep.results.stats import compare, with_planned
from shapesweep.results.store import write_trial
from shapesweep.sweep.cli.main import main as shapesweep


@pytest.fixture
def running_root(tmp_path):
    """60 stored trials and 30 running ones (3 live points each) of one sweep."""
    root = str(tmp_path / "sweeps")
    trials = synthetic_sweep("s", 90)
    for row, curve in trials[:60]:
        write_trial(root, "s", row, curve)
    for row, curve in trials[60:]:
        spec = {"trial_id": row["trial_id"], "key": row["key"], "seed": row["seed"], "row": row,
                "tuned_json": row.get("tuned_json"), "document": row.get("config_json")}
        for point in curve[:3]:
            append_point(root, "s", spec, {k: point[k] for k in ("step", "tokens", "val_loss", "train_loss")})
    return root


def test_report_and_status_of_a_running_sweep_warn_of_no_fragmented_frame(running_root, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        payload = build_payload(running_root, ["s"])
        assert '"running"' in payload
        assert shapesweep(["status", "s", "--root", running_root]) in (0, None)
        trials, _ = load_frames(running_root, ["s"])
        running = trials[trials["status"] == "running"]
        assert len(running) == 30
        planned = running.drop_duplicates("key").assign(key=lambda f: f["key"] + "-planned")
        rows = with_planned(compare(trials[trials["status"] != "running"]), planned, [0, 1, 2])
        assert (rows["state"] == "pending").sum() == len(planned)
    # the derived frame stays in few blocks, far from pandas' 100 (its warning's threshold)
    assert with_derived(trials)._mgr.nblocks < 60
    assert "PerformanceWarning" not in capsys.readouterr().err
