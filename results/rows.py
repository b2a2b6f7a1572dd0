"""The trial-row contract: one trial's row, curve rows and layer rows, built in one place.

The driver (`shapesweep.sweep.driver.runner.ResultsWriter`), the synthetic sweeps of the tests and
benchmarks, and the tests all describe a trial as a `TrialRecord` and let it build the rows
`write_trial` stores, so what goes in which column is said once, here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from shapesweep.results.schema import CURVE_COLUMNS, TRIAL_COLUMNS
from shapesweep.results.store import write_trial

# What one evaluation reports (a curve row without its sweep and trial id).
CURVE_FIELDS = tuple(name for name in CURVE_COLUMNS.names if name not in ("sweep", "trial_id"))
# How a trial's step ran: the loop's final report has them (`TrainResult`), a curve does not.
COMPILE_FIELDS = ("compiled", "graph_breaks", "recompiles", "compile_s", "autocast_dtype",
                  "blocks_per_region")
# How a trial used memory (shapesweep.trainers.fitting): its micro-batch at the end, the
# out-of-memory retries before it, the predicted and the measured peak.
MEMORY_FIELDS = ("micro_batch_size", "oom_retries", "memory_peak_bytes",
                 "memory_peak_bytes_measured")
# Where a trial ran (shapesweep.trainers.machine): its losses repeat bit for bit only there.
MACHINE_FIELDS = ("cpu_model", "torch_version", "device_name", "torch_threads")
# A trial's final metrics (`final_metrics`).
METRIC_FIELDS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "psnr", "ssim", "tokens",
                 "steps", "wall_time_s", "tokens_per_s", "val_loss_se", "train_loss_tail",
                 "cooldown_tokens", *COMPILE_FIELDS, *MEMORY_FIELDS, *MACHINE_FIELDS)


@dataclass
class TrialRecord:
    """One trial as the results store keeps it."""

    sweep: str
    trial_id: str
    key: str  # the candidate's config key
    seed: int
    status: str  # one of shapesweep.results.schema.STATUSES
    candidate: dict[str, Any]  # family, variant, shape and accounting columns (Candidate.to_row())
    document: dict[str, Any]  # what was trained: {"family", "model", "train"}
    budget_tokens: int  # what the trial trains on when it runs to the end
    metrics: dict[str, Any] = field(default_factory=dict)  # METRIC_FIELDS (`final_metrics`)
    curve: list[dict[str, Any]] = field(default_factory=list)  # evaluations, CURVE_FIELDS each
    layers: list[dict[str, Any]] = field(default_factory=list)  # LAYER_COLUMNS rows, if any
    tuned_json: str = "{}"  # the `tune:` values it ran with
    error: str | None = None  # `Type: message` of a failed trial
    code_version: str | None = None
    data_hash: str | None = None
    finished_at: datetime | None = None  # None: when it is written

    def trial_row(self) -> dict[str, Any]:
        """The TRIAL_COLUMNS row: the candidate's columns (others it carries are not stored),
        the metrics, the ids, and what the recipe says (budget, seq_len, lr)."""
        unknown = sorted(set(self.metrics) - set(METRIC_FIELDS))
        if unknown:
            raise ValueError(f"unknown metrics: {', '.join(unknown)}")
        train = self.document.get("train") or {}
        row = {k: v for k, v in self.candidate.items() if k in TRIAL_COLUMNS.names}
        row.update(self.metrics)
        row.update(
            sweep=self.sweep, trial_id=self.trial_id, key=self.key, seed=self.seed,
            tuned_json=self.tuned_json, status=self.status, error=self.error,
            train_tokens_budget=self.budget_tokens, seq_len=train.get("seq_len"),
            lr=train.get("lr"), config_json=json.dumps(self.document, sort_keys=True),
            code_version=self.code_version, data_hash=self.data_hash,
            finished_at=self.finished_at,
        )
        return row

    def curve_rows(self) -> list[dict[str, Any]]:
        """One CURVE_COLUMNS row per evaluation that has a step."""
        return [{"sweep": self.sweep, "trial_id": self.trial_id,
                 **{name: point.get(name) for name in CURVE_FIELDS}}
                for point in self.curve if point.get("step") is not None]

    def write(self, root: str) -> str:
        """File the trial in the results store (`write_trial`); returns its fragment path."""
        return write_trial(root, self.sweep, self.trial_row(), self.curve_rows(), self.layers)


def final_metrics(last: Mapping[str, object], curve: Sequence[Mapping[str, object]],
                  status: str) -> dict[str, Any]:
    """Final metrics: the loop's own summary (`last`) when it got to report one, else the
    curve's; none for a trial that failed before its first evaluation. Both are Tune reports
    (the loop's `TrainResult` and its evaluations): the losses, tokens and times in them are
    numbers where set."""
    if not curve and status == "failed":
        return {}
    val_losses = [cast(float, p["val_loss"]) for p in curve if p.get("val_loss") is not None]
    val_loss = cast("float | None", last.get("val_loss", val_losses[-1] if val_losses else None))
    elapsed = cast("float | None", last.get("wall_time_s") or last.get("elapsed_s"))
    tokens = cast("float | None", last.get("tokens"))
    finite = [v for v in val_losses if math.isfinite(v)]
    return {
        "val_loss": val_loss,
        "best_val_loss": last.get("best_val_loss", min(finite) if finite else None),
        "val_ppl": last.get("val_ppl", math.exp(min(val_loss, 700)) if val_loss else None),
        "train_loss": last.get("train_loss"),
        "val_loss_se": last.get("val_loss_se"),
        "train_loss_tail": last.get("train_loss_tail"),  # only a finished run's final report has it
        "psnr": last.get("psnr"),
        "ssim": last.get("ssim"),
        "tokens": tokens,
        "steps": last.get("steps", last.get("step")),
        "wall_time_s": elapsed,
        "tokens_per_s": last.get("tokens_per_s", tokens / elapsed if tokens and elapsed else None),
        **{name: last.get(name) for name in (*COMPILE_FIELDS, *MEMORY_FIELDS, *MACHINE_FIELDS)},
        "cooldown_tokens": last.get("cooldown_tokens"),
    }
