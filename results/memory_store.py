"""A results store in one process's memory: the `ResultsStore` contract at its smallest.

It keeps each attempt as one record (the row, its curve and layer rows) appended under one
lock, so a write is atomic and a reader sees whole attempts; compaction keeps each trial's
newest attempt and drops the rest. Nothing outlives the process, and nothing is shared with
another: for tests of code that takes a store, and as the contract's second reading.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import count

import pandas as pd
import pyarrow as pa

from shapesweep.results.interface import ResultsStore, Row, TrialKeys
from shapesweep.results.layout import validate_sweep_name
from shapesweep.results.lease_record import LeaseRecord, utc_now
from shapesweep.results.schema import CURVE_COLUMNS, LAYER_COLUMNS, TRIAL_COLUMNS
from shapesweep.results.sweep_folders import prepare_trial


@dataclass(frozen=True)
class _Attempt:
    """One `write_trial`: its order of writing breaks a tie between equal `finished_at`."""

    order: int
    row: dict
    curves: list[dict]
    layers: list[dict]


class MemoryStore(ResultsStore):
    """Sweeps, files and leases in dictionaries, every access under one lock."""

    def __init__(self, name: str = "memory") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._attempts: dict[str, list[_Attempt]] = {}
        self._files: dict[tuple[str, str], str] = {}
        self._leases: dict[str, LeaseRecord] = {}
        self._order = count()

    @property
    def location(self) -> str:
        return f"memory:{self._name}"

    def sweeps(self) -> list[str]:
        with self._lock:
            return sorted(s for s, attempts in self._attempts.items() if attempts)

    def write_trial(self, sweep: str, trial_row: Row, curve_rows: Sequence[Row],
                    layer_rows: Sequence[Row] = ()) -> str:
        row, curves, layers = prepare_trial(sweep, dict(trial_row), [dict(r) for r in curve_rows],
                                            [dict(r) for r in layer_rows])
        with self._lock:
            attempt = _Attempt(next(self._order), row, curves, layers)
            self._attempts.setdefault(sweep, []).append(attempt)
        return f"{self.location}/{sweep}/{row['trial_id']}/{attempt.order}"

    def _held(self, sweeps: Sequence[str] | None) -> list[_Attempt]:
        """Each trial's newest attempt (latest `finished_at`, then the later write)."""
        with self._lock:
            names = sorted(self._attempts) if sweeps is None else [validate_sweep_name(s) for s in sweeps]
            return _newest([a for s in names for a in self._attempts.get(s, [])])

    def load_trials(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        return _frame([a.row for a in self._held(sweeps)], TRIAL_COLUMNS, ())

    def load_curves(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        return _frame([r for a in self._held(sweeps) for r in a.curves], CURVE_COLUMNS, ("step",))

    def load_layers(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        return _frame([r for a in self._held(sweeps) for r in a.layers], LAYER_COLUMNS,
                      ("layer", "threshold"))

    def completed_keys(self, sweep: str) -> TrialKeys:
        rows = sorted((a.row for a in self._held([sweep])),
                      key=lambda r: (r["status"] != "failed", r["finished_at"]))
        return {(r["key"], r["tuned_json"] or "{}", r["seed"]): r["status"] for r in rows}

    def quarantined_trials(self, sweep: str) -> set[str]:
        validate_sweep_name(sweep)
        return set()  # nothing is ever damaged in memory

    def compact(self, sweep: str, stale_s: float | None = None) -> str | None:
        with self._lock:
            kept = self._attempts[validate_sweep_name(sweep)] = _newest(self._attempts.get(sweep, []))
        return f"{self.location}/{sweep}" if kept else None

    def write_file(self, sweep: str, name: str, text: str) -> None:
        with self._lock:
            self._files[(validate_sweep_name(sweep), name)] = text

    def read_file(self, sweep: str, name: str) -> str | None:
        with self._lock:
            return self._files.get((validate_sweep_name(sweep), name))

    def file_location(self, sweep: str, name: str = "") -> str:
        return f"{self.location}/{validate_sweep_name(sweep)}" + (f"/{name}" if name else "")

    def take_lease(self, sweep: str, token: str) -> LeaseRecord | None:
        with self._lock:
            holder = self._leases.get(validate_sweep_name(sweep))
            if holder is not None and holder.alive():
                return holder
            now = utc_now()
            self._leases[sweep] = LeaseRecord(sweep, socket.gethostname(), os.getpid(), token, now, now)
            return None

    def lease(self, sweep: str) -> LeaseRecord | None:
        with self._lock:
            return self._leases.get(sweep)

    def renew_lease(self, sweep: str, token: str) -> bool:
        with self._lock:
            holder = self._leases.get(sweep)
            if holder is None or holder.token != token:
                return False
            self._leases[sweep] = replace(holder, heartbeat_at=utc_now())
            return True

    def release_lease(self, sweep: str, token: str) -> None:
        with self._lock:
            if sweep in self._leases and self._leases[sweep].token == token:
                del self._leases[sweep]


def _newest(attempts: list[_Attempt]) -> list[_Attempt]:
    """Each trial's newest attempt (latest `finished_at`, then the later write), by trial."""
    newest: dict[tuple[str, str], _Attempt] = {}
    for attempt in sorted(attempts, key=lambda a: (a.row["finished_at"], a.order)):
        newest[(attempt.row["sweep"], attempt.row["trial_id"])] = attempt
    return [newest[k] for k in sorted(newest)]


def _frame(rows: list[dict], schema: pa.Schema, order: tuple[str, ...]) -> pd.DataFrame:
    """Rows as the Parquet store's readers give them: its schema's columns and types, sorted."""
    table = pa.Table.from_pylist(rows, schema=schema)
    keys = ["sweep", "trial_id", *order]
    return table.sort_by([(k, "ascending") for k in keys]).to_pandas()
