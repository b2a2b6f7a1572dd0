"""The results store's contract: what every backend promises, checked by one test suite.

`ResultsStore` is the one way into a sweep's results and the lease on it, after Optuna's
`BaseStorage`: an abstract class whose docstrings are the contract, implemented by the
Parquet store with its SQL catalog (`parquet_store.ParquetStore`, what every command uses)
and by an in-memory store (`memory_store.MemoryStore`, for tests and one process), and
checked against both by `tests/test_store_contract.py`. The contract:

- **Atomic trial fragments.** `write_trial` files one attempt of a trial (its row, curve
  and layer rows) whole or not at all: a reader, or a crash at any point, never sees part
  of one. The trial row is the commit record: curve or layer rows without it do not exist.
- **Exactly-once reads.** `load_trials` gives one row per (sweep, trial_id), the newest
  attempt (latest `finished_at`, then the later write); `load_curves` and `load_layers`
  give the rows written with that attempt only. A trial is never counted twice, whether a
  reader meets it in a fragment, in a compacted copy, or both while a compaction runs.
- **Compaction.** `compact` may merge a sweep's fragments at any time, also while writers
  and readers run; what every reader returns is the same before and after it, and a second
  compaction changes nothing a reader sees (idempotent).
- **The lease.** At most one live holder per sweep (the driver writing it): `take_lease`
  succeeds for exactly one of several racing callers; a lease lives while its holder renews
  its heartbeat within `lease_record.lease_timeout_s()`, after which any caller may take it
  over and the old holder's `renew_lease` says False.
- **Several processes.** Every method is safe from several threads; the Parquet store's
  also from several processes and machines on one root (writers of different trials, any
  number of readers, one compactor at a time: the lease holder). The in-memory store lives
  in one process.
- **Bad input.** A sweep name that is not one (`layout.validate_sweep_name`) is one
  `UserError` before anything is written; a damaged stored file is one line naming it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from shapesweep.common import UserError
from shapesweep.results.layout import decode_json
from shapesweep.results.lease_record import LeaseRecord

TrialKeys = dict[tuple[str, str, int], str]  # (key, tuned_json, seed) -> status, for resume
Row = Mapping[str, object]


class ResultsStore(ABC):
    """A sweep's trials, curves, layers, small files and lease (the module docstring's contract)."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is, as a user names it (the root folder or URI)."""

    # ---- sweeps and their trials

    @abstractmethod
    def sweeps(self) -> list[str]:
        """Names of the sweeps holding anything written by `write_trial`, sorted."""

    @abstractmethod
    def write_trial(self, sweep: str, trial_row: Row, curve_rows: Sequence[Row],
                    layer_rows: Sequence[Row] = ()) -> str:
        """File one attempt of a trial atomically (row, curve, layers: all or nothing);
        returns an id of what was written (the Parquet store: the trials fragment's path).
        Rows are normalised (`schema.normalize_*_row`); a row naming another sweep or trial,
        or a trial row without `trial_id` or `status`, is a ValueError and nothing is written."""

    @abstractmethod
    def load_trials(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        """One row per (sweep, trial_id), its newest attempt, `schema.TRIAL_COLUMNS` in order;
        `sweeps` None: every sweep. A sweep asked for that holds nothing gives no rows."""

    @abstractmethod
    def load_curves(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        """The curve rows of each trial's newest attempt, sorted by sweep, trial_id, step."""

    @abstractmethod
    def load_layers(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        """The layer rows of each trial's newest attempt, sorted by sweep, trial_id, layer,
        threshold; a trial that was not analysed has none."""

    @abstractmethod
    def completed_keys(self, sweep: str) -> TrialKeys:
        """(key, tuned_json, seed) -> status of the trials the sweep holds, for `resume`: a
        completed or stopped_early trial wins over a failed one of the same triple; a trial
        the store holds only in part (`quarantined_trials`) is not held."""

    @abstractmethod
    def quarantined_trials(self, sweep: str) -> set[str]:
        """Trial ids whose row is held but whose curve or layers were set aside as damaged:
        `resume` runs them again."""

    @abstractmethod
    def compact(self, sweep: str, stale_s: float | None = None) -> str | None:
        """Merge the sweep's trials (readers see no change; a second call, none either);
        returns an id of the merged trials (None: nothing held). `stale_s`: leftovers of
        writers older than this are deleted (0 from the lease holder, which knows none runs;
        None: the store's default)."""

    # ---- a sweep's small files (its space, how it was run)

    @abstractmethod
    def write_file(self, sweep: str, name: str, text: str) -> None:
        """Keep a small text file of the sweep, replaced whole (a reader sees old or new)."""

    @abstractmethod
    def read_file(self, sweep: str, name: str) -> str | None:
        """The text `write_file` kept, or None when there is none."""

    @abstractmethod
    def file_location(self, sweep: str, name: str = "") -> str:
        """Where a sweep's file (or, with no name, the sweep) is, as a user can find it."""

    def file_repair(self, sweep: str, name: str) -> str:
        """How a user repairs a damaged file of the sweep, in words they can follow."""
        return "to repair, delete it"

    def read_json(self, sweep: str, name: str, kind: type,
                  check: Callable[[object], str | None] | None = None) -> object:
        """A JSON file of the sweep, or None when there is none; damaged (not JSON, not a
        `kind`, or `check(value)` says why not) it is one UserError naming the file."""
        text = self.read_file(sweep, name)
        if text is None:
            return None
        value, problem = decode_json(text, kind, check)
        if problem:
            raise UserError(f"damaged ({problem}); {self.file_repair(sweep, name)}",
                            file=self.file_location(sweep, name))
        return value

    # ---- the lease: one driver per sweep

    @abstractmethod
    def take_lease(self, sweep: str, token: str) -> LeaseRecord | None:
        """Take the sweep's lease under `token`: None when taken (also a dead holder's, taken
        over), else the live holder. Of several callers racing, exactly one gets None."""

    @abstractmethod
    def lease(self, sweep: str) -> LeaseRecord | None:
        """The sweep's lease as held now, live or dead; None when none is held."""

    @abstractmethod
    def renew_lease(self, sweep: str, token: str) -> bool:
        """Renew the heartbeat; False when the lease is no longer `token`'s (taken over)."""

    @abstractmethod
    def release_lease(self, sweep: str, token: str) -> None:
        """Give the lease up (nothing happens when `token` does not hold it)."""

    def live_lease(self, sweep: str) -> LeaseRecord | None:
        """The lease while its holder lives (`LeaseRecord.alive`), else None: the one test of
        whether a sweep is running."""
        held = self.lease(sweep)
        return held if held is not None and held.alive() else None
