"""The Parquet columns of the results store, and the row normaliser every writer goes through.

One fixed schema for every family (columns a family lacks are null) keeps every fragment
of every sweep readable as one table by pyarrow, DuckDB or Polars.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, SupportsFloat, SupportsInt, cast, get_type_hints

import pyarrow as pa

from shapesweep.families.base import stored_fields
from shapesweep.search_spaces.accounting import Accounting

STATUSES = ("completed", "stopped_early", "failed")

_INT, _FLOAT, _STR, _BOOL = pa.int64(), pa.float64(), pa.string(), pa.bool_()
TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_TYPES = {int: _INT, float: _FLOAT, str: _STR, bool: _BOOL}

# `Accounting`'s scalar fields (its per-layer widths are a shape column), then the budget error.
ACCOUNTING_COLUMNS: list[tuple[str, pa.DataType]] = [
    *((name, ARROW_TYPES[kind]) for name, kind in get_type_hints(Accounting).items() if name != "widths"),
    ("budget_error", _FLOAT),
]

# Every family's config fields marked `Stored` (shapesweep.families.base), then what every
# candidate row derives: a field marked there cannot be left out of the store. A family must
# be registered before this module is imported to add a new column (the built-ins are).
SHAPE_COLUMNS: list[tuple[str, pa.DataType]] = [
    *((name, ARROW_TYPES[kind]) for name, kind in stored_fields()),
    ("ffn_ratio", _FLOAT), ("width_depth_ratio", _FLOAT), ("widths", pa.list_(_INT)),
]

TRIAL_COLUMNS = pa.schema(
    [
        ("sweep", _STR), ("trial_id", _STR), ("key", _STR), ("family", _STR), ("seed", _INT),
        # `variant`: the space variant the candidate came from (`baseline` anchors the
        # statistics); `tuned_json`: the `tune:` values this trial ran with, as a JSON object.
        ("variant", _STR), ("tuned_json", _STR),
        ("status", _STR), ("error", _STR),
        ("val_loss", _FLOAT), ("best_val_loss", _FLOAT), ("val_ppl", _FLOAT),
        ("train_loss", _FLOAT), ("psnr", _FLOAT), ("ssim", _FLOAT),
        # `val_loss_se`: the final val_loss's standard error over its held-out sequences (images);
        # `train_loss_tail`: xformer's reported loss, the training loss over the last steps.
        ("val_loss_se", _FLOAT), ("train_loss_tail", _FLOAT),
        ("tokens", _INT), ("steps", _INT), ("wall_time_s", _FLOAT), ("tokens_per_s", _FLOAT),
        # how the step ran (shapesweep.trainers.compiled): torch.compile's counts and seconds,
        # and the most alike blocks one compiled region held, are null when the trial ran
        # eagerly; autocast_dtype is bfloat16 | none
        ("compiled", _BOOL), ("graph_breaks", _INT), ("recompiles", _INT), ("compile_s", _FLOAT),
        ("autocast_dtype", _STR), ("blocks_per_region", _INT),
        ("cooldown_tokens", _INT),  # trained by cooldown evaluations' branches, not in `tokens`
        # memory (shapesweep.trainers.fitting): the micro-batch it ended with, the out-of-memory
        # retries (each halving it) before that, the predicted and the measured peak in bytes
        ("micro_batch_size", _INT), ("oom_retries", _INT), ("memory_peak_bytes", _INT),
        ("memory_peak_bytes_measured", _INT),
        # where it ran (shapesweep.trainers.machine): null in rows written before 2026-11-30
        ("cpu_model", _STR), ("torch_version", _STR), ("device_name", _STR), ("torch_threads", _INT),
        *ACCOUNTING_COLUMNS,
        *SHAPE_COLUMNS,
        ("train_tokens_budget", _INT), ("seq_len", _INT), ("lr", _FLOAT),
        ("config_json", _STR), ("code_version", _STR), ("data_hash", _STR),
        ("finished_at", TIMESTAMP),
    ]
)

CURVE_COLUMNS = pa.schema(
    [
        ("sweep", _STR), ("trial_id", _STR), ("step", _INT), ("tokens", _INT),
        ("train_loss", _FLOAT), ("val_loss", _FLOAT), ("lr", _FLOAT), ("elapsed_s", _FLOAT),
        ("psnr", _FLOAT), ("ssim", _FLOAT),
        ("val_loss_cooled", _FLOAT),  # after a cooldown branched here (trainers/cooldown.py)
        ("psnr_cooled", _FLOAT),  # the same branch's PSNR (denoising tasks)
    ]
)

# xformer §4's representation analysis (`shapesweep.trainers.analysis`): one row per (layer, threshold);
# `matrix_entropy` (the residual stream's) and the logit lens's `lens_*` (Fig. 8: the target's log
# probability, the decoded entropy, the symmetrized KL to the layer before) repeat across a
# layer's threshold rows.
LAYER_COLUMNS = pa.schema(
    [
        ("sweep", _STR), ("trial_id", _STR), ("layer", _INT), ("width", _INT),
        ("matrix_entropy", _FLOAT), ("activation_density", _FLOAT), ("threshold", _FLOAT),
        ("lens_logprob", _FLOAT), ("lens_entropy", _FLOAT), ("lens_kl", _FLOAT),
    ]
)


def _to_int(value: object) -> int | None:
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if not value.is_integer():
            raise ValueError(f"{value!r} is not a whole number")
    if isinstance(value, str):
        raise ValueError(f"{value!r} is a string, not a whole number")
    return int(cast(SupportsInt, value))  # numpy integers and bools included; else a TypeError


def _to_float(value: object) -> float | None:
    if isinstance(value, str):
        raise ValueError(f"{value!r} is a string, not a number")
    number = float(cast(SupportsFloat, value))  # else a TypeError
    # NaN/inf losses mean a failed trial: status and error say so; null keeps sorts and plots sane.
    return number if math.isfinite(number) else None


def _to_bool(value: object) -> bool:
    if value in (0, 1):  # True/False, 0/1 and numpy bools
        return bool(value)
    raise ValueError(f"{value!r} is not a boolean")


def _to_str(value: object) -> str:
    if isinstance(value, dict | list):  # config_json given as the document itself
        return json.dumps(value, sort_keys=True)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _to_timestamp(value: object) -> datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    to_pydatetime = getattr(value, "to_pydatetime", None)  # pandas Timestamp
    if to_pydatetime is not None:
        value = to_pydatetime()
    if not isinstance(value, datetime):
        raise ValueError(f"{value!r} is not a timestamp")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _coerce(kind: pa.DataType, value: object) -> object:
    if value is None:
        return None
    if pa.types.is_list(kind):
        return [_to_int(v) for v in cast(Iterable[object], value)]  # else a TypeError
    if pa.types.is_timestamp(kind):
        return _to_timestamp(value)
    if pa.types.is_integer(kind):
        return _to_int(value)
    if pa.types.is_floating(kind):
        return _to_float(value)
    if pa.types.is_boolean(kind):
        return _to_bool(value)
    return _to_str(value)


def _normalize(row: Mapping[str, object], schema: pa.Schema, what: str) -> dict[str, Any]:
    unknown = sorted(set(row) - set(schema.names))
    if unknown:
        raise ValueError(f"unknown {what} columns: {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for field in schema:
        try:
            out[field.name] = _coerce(field.type, row.get(field.name))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{what} column {field.name!r}: {error}") from None
    return out


def normalize_trial_row(row: Mapping[str, object]) -> dict[str, Any]:
    """Every TRIAL_COLUMNS name, coerced to its type; missing ones null, unknown ones refused.

    Non-finite floats (a NaN loss) become null; `config_json` may be given as a dict.
    """
    out = _normalize(row, TRIAL_COLUMNS, "trial")
    if out["status"] is not None and out["status"] not in STATUSES:
        raise ValueError(f"trial column 'status': {out['status']!r} is not one of {', '.join(STATUSES)}")
    return out


def normalize_curve_row(row: Mapping[str, object]) -> dict[str, Any]:
    """Every CURVE_COLUMNS name, coerced to its type; missing ones null, unknown ones refused."""
    return _normalize(row, CURVE_COLUMNS, "curve")


def normalize_layer_row(row: Mapping[str, object]) -> dict[str, Any]:
    """Every LAYER_COLUMNS name, coerced to its type; missing ones null, unknown ones refused."""
    return _normalize(row, LAYER_COLUMNS, "layer")
