"""results: the Parquet results store (one atomic fragment per trial) and the SQLAlchemy sweep catalog."""

from shapesweep.results.schema import (
    CURVE_COLUMNS,
    LAYER_COLUMNS,
    STATUSES,
    TRIAL_COLUMNS,
    normalize_curve_row,
    normalize_layer_row,
    normalize_trial_row,
)
from shapesweep.results.store import (
    compact,
    completed_keys,
    list_sweeps,
    load_curves,
    load_layers,
    load_trials,
    local_folder,
    read_sweep_file,
    sweep_dir,
    validate_sweep_name,
    write_sweep_file,
    write_trial,
)

__all__ = [
    "SWEEP_STATUSES", "Catalog", "SweepRecord", "default_catalog_url",
    "CURVE_COLUMNS", "LAYER_COLUMNS", "STATUSES", "TRIAL_COLUMNS", "normalize_curve_row",
    "normalize_layer_row", "normalize_trial_row",
    "compact", "completed_keys", "list_sweeps", "load_curves", "load_layers", "load_trials", "local_folder",
    "read_sweep_file", "sweep_dir", "validate_sweep_name", "write_sweep_file", "write_trial",
]

_CATALOG = ("SWEEP_STATUSES", "Catalog", "SweepRecord", "default_catalog_url")


def __getattr__(name: str):
    """The catalog's names, imported when first asked for: SQLAlchemy takes a third of a second
    to import, and a reader of the store alone (the report) never needs it."""
    if name in _CATALOG:
        from shapesweep.results import catalog

        return getattr(catalog, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
