"""Compaction while a sweep runs: a real tiny sweep (real Ray Tune, real training, real
Parquet) whose driver compacts every second row lands each trial once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_helpers import pairs as planned
from sweep_helpers import raw_trial_rows, run, write_space

from shapesweep.results import compaction
from shapesweep.results.store import compact, load_curves
from shapesweep.sweep.driver.runner import ResultsWriter

pytestmark = pytest.mark.slow


def test_a_sweep_compacts_while_it_runs_and_lands_each_trial_once(local_ray, tmp_path, monkeypatch):
    """A real tiny sweep compacting every second row: the mid-run compactions happen (each
    merges what landed so far) and the sweep ends with every trial once, curve and all."""
    compactions = []

    def counted(root, sweep, **options):  # the real compaction, each call's inputs counted
        compactions.append(len(list(Path(root, sweep, "trials").glob("*.parquet"))))
        return compact(root, sweep, **options)

    monkeypatch.setattr(ResultsWriter, "compact_every", 2)
    monkeypatch.setattr(compaction, "compact", counted)  # what ParquetStore.compact calls
    space = write_space(tmp_path, name="compacting", search={"n_layers": [1, 2, 3, 4]})
    root = tmp_path / "sweeps"
    assert run("run", str(space), "--root", str(root), "--scheduler", "fifo", "--max-concurrent", "2",
               "--seeds", "2") == 0
    # Before the run (nothing yet), after every second of the 8 rows (those two, and from the
    # second on the file the last one wrote) and at the end (that file alone).
    assert compactions == [0, 2, 3, 3, 3, 1]
    raw = raw_trial_rows(root, "compacting")
    assert sorted(zip(raw["key"], raw["seed"], strict=True)) == sorted(planned(space, seeds=(0, 1)))
    curves = load_curves(str(root), ["compacting"])
    assert sorted(curves["trial_id"].unique()) == sorted(raw["trial_id"])
    assert [p.name[:8] for p in Path(root, "compacting", "trials").iterdir()] == ["compact-"]
    assert not list(Path(root, "compacting", "live").glob("*"))
