"""The driver's side of a trial's end: its row, curve and layers filed once in the results
store (`ResultsWriter`, a Tune callback), the live curve `status` shows meanwhile, how a trial
ended (`ended_as`) and why it failed (`error_text`), and the merge of a sweep's fragments."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from ray.tune import Callback
from ray.tune.experiment import Trial

from shapesweep.common import printable
from shapesweep.results import live
from shapesweep.results.compaction import STALE_S
from shapesweep.results.interface import ResultsStore, TrialKeys
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.rows import CURVE_FIELDS, TrialRecord, final_metrics
from shapesweep.search_spaces.cadence import token_budget
from shapesweep.sweep.driver.trainable import FINAL_FLAG, LAYERS_FIELD
from shapesweep.sweep.search.trials import reached_budget

if TYPE_CHECKING:
    from shapesweep.sweep.driver.progress import SweepProgress


def code_version() -> str:
    """`git describe` of the checkout this package runs from, else the package version."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"],
                             cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return version("shapesweep")
    except PackageNotFoundError:
        return "unknown"


def error_text(trial: Trial) -> str:
    """The failed trial's exception as `Type: message` (the traceback's last line)."""
    text = ""
    for folder in (getattr(trial, "local_path", None), getattr(trial, "path", None)):
        if folder and (Path(folder) / "error.txt").is_file():
            text = (Path(folder) / "error.txt").read_text()
            break
    if not text:
        try:
            text = str(trial.get_error() or "")
        except Exception:  # noqa: BLE001 - no error text is not worth failing the sweep for
            text = ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error (see Ray's logs)"
    # "shapesweep.common.UserError: ..." -> "UserError: ..." (the type says enough)
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*: )", "", lines[-1])


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C until the block ends, then raise it: a trial's row, curve and catalog
    counts are filed together or not at all. Only the main thread may set handlers."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):  # a handler Python cannot restore
        yield
        return
    caught: list[tuple] = []
    previous = signal.signal(signal.SIGINT, lambda *args: caught.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(*caught[0])
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt


class ResultsWriter(Callback):
    """Writes each trial's row and curve to the results store exactly once, when it ends,
    and compacts the sweep every `compact_every` rows, so a reader of a long sweep (`status`,
    `serve`) opens a few files, not one per trial landed."""

    compact_every = 256

    def __init__(self, store: ParquetStore, sweep: str, data_hash: str,
                 progress: SweepProgress | None = None):
        self.progress = progress
        self.store, self.sweep, self.data_hash = store, sweep, data_hash
        self.code_version = code_version()
        self.curves: dict[str, list[dict]] = {}
        self.written: set[str] = set()

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks for experiment restore, which we never use (resume
        # reads the results store); the live display stays behind.
        return {k: v for k, v in self.__dict__.items() if k != "progress"}

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict,
                        **info: object) -> None:
        if not result.get(FINAL_FLAG):
            point = {name: result.get(name) for name in CURVE_FIELDS}
            live.add_point(self.curves.setdefault(trial.trial_id, []), point)
            spec = trial.config["spec"]  # the live curve `status` and `serve` show meanwhile
            live.append_point(self.store.root, self.sweep, spec, point,
                              token_budget(spec["document"]["train"], spec["row"]["family"]))

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial,
                          **info: object) -> None:
        self._write(trial, ended_as(trial), None)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial,
                       **info: object) -> None:
        self._write(trial, "failed", error_text(trial))

    def _write(self, trial: Trial, status: str, error: str | None) -> None:
        with sigint_deferred():
            self._file(trial, status, error)

    def _file(self, trial: Trial, status: str, error: str | None) -> None:
        spec = trial.config["spec"]
        if spec["trial_id"] in self.written:
            return
        last = trial.last_result or {}
        curve = self.curves.pop(trial.trial_id, [])
        record = TrialRecord(
            sweep=self.sweep, trial_id=spec["trial_id"], key=spec["key"], seed=spec["seed"],
            status=status, candidate=spec["row"], document=spec["document"],
            budget_tokens=token_budget(spec["document"]["train"], spec["row"]["family"]),
            metrics=final_metrics(last, curve, status), curve=curve,
            layers=json.loads(last.get(LAYERS_FIELD) or "[]"), tuned_json=spec["tuned_json"],
            error=error, code_version=self.code_version,
            data_hash=last.get("data_hash") or self.data_hash, finished_at=datetime.now(UTC))
        self.store.write_trial(self.sweep, record.trial_row(), record.curve_rows(), record.layers)
        live.remove(self.store.root, self.sweep, spec["trial_id"])
        self.written.add(spec["trial_id"])
        if len(self.written) % self.compact_every == 0:
            # Under the lease this driver is the only writer and compactor, and it writes
            # nothing meanwhile; running trials' live curves are fresh, so they stay.
            compact_quietly(self.store, self.sweep, stale_s=STALE_S)
        if self.progress is not None:
            self.progress.finished(trial.trial_id, status, spec["trial_id"], error,
                                   record.trial_row())


def ended_as(trial: Trial) -> str:
    """A trial that ended without error: `completed` (it reached its token budget) or
    `stopped_early` (the scheduler stopped it)."""
    spec = trial.config["spec"]
    budget = token_budget(spec["document"]["train"], spec["row"]["family"])
    return "completed" if reached_budget(trial.last_result or {}, budget) else "stopped_early"


def count_statuses(statuses: TrialKeys) -> dict[str, int]:
    counts = {"completed": 0, "stopped_early": 0, "failed": 0}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return counts


def compact_quietly(store: ResultsStore, name: str, stale_s: float = 0.0) -> None:
    """Merge the sweep's result fragments; a failure is a warning, never a failed sweep.
    The lease makes this driver the sweep's only writer, and so its only compactor."""
    try:
        store.compact(name, stale_s=stale_s)  # 0: no other writer while the lease is held
    except Exception as error:  # noqa: BLE001 - the results are intact either way
        print(printable(f"warning: could not compact the results of sweep {name!r}: {error}",
                        one_line=True), file=sys.stderr, flush=True)
