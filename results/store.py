"""The Parquet results store: one folder per sweep, one atomic fragment per trial.

Layout (plain Parquet; DuckDB `read_parquet('ROOT/*/trials/*.parquet')` and Polars read it):

    ROOT/SWEEP/trials/part-<trial_id>-<stamp>.parquet     one trial row
    ROOT/SWEEP/curves/part-<trial_id>-<stamp>.parquet     that attempt's curve rows
    ROOT/SWEEP/layers/part-<trial_id>-<stamp>.parquet     its per-layer analysis rows (xformer
                                                          §4), only for a trial that has them

A fragment is written under a hidden temporary name and renamed into place, so a reader
(or a crash) never sees half a file. The trials fragment is the commit record: it is
renamed last, and curves or layers files without a trials sibling of the same name are
ignored. A retried trial writes a new set; readers keep the newest row per (sweep, trial_id)
by `finished_at` and the curves and layers of that same attempt. `compact` merges the
fragments into one `compact-<stamp>.parquet` set with the same semantics; on a local root
the table folders are links into one version folder that a compaction replaces whole
(`shapesweep.results.versions`), so a raw glob never sees a row twice.

The store is split by job: `layout` (names, paths, atomic writes, the sweep's small files),
`fragments` (reading a table folder), `sweep_folders` (listing, repair, `write_trial`),
`readers` (`load_trials` and friends), `compaction`; `parquet_store.ParquetStore` is this
store behind the `interface.ResultsStore` contract. This module keeps the functions' old
names importable.
"""

from __future__ import annotations

from shapesweep.results.compaction import STALE_S, compact
from shapesweep.results.fragments import BULK, DamagedStore, FragmentCache
from shapesweep.results.layout import (
    SWEEP_NAME,
    local_folder,
    probe,
    read_sweep_file,
    read_sweep_json,
    sweep_dir,
    sweep_file_repair,
    validate_sweep_name,
    write_sweep_file,
)
from shapesweep.results.readers import (
    completed_keys,
    load_curves,
    load_layers,
    load_trials,
    quarantined_trials,
)
from shapesweep.results.sweep_folders import list_sweeps, unknown_sweep, write_trial

__all__ = [
    "BULK", "STALE_S", "SWEEP_NAME", "DamagedStore", "FragmentCache", "compact", "completed_keys",
    "list_sweeps", "load_curves", "load_layers", "load_trials", "local_folder", "probe",
    "quarantined_trials", "read_sweep_file", "read_sweep_json", "sweep_dir", "sweep_file_repair",
    "unknown_sweep", "validate_sweep_name", "write_sweep_file", "write_trial",
]
