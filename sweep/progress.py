"""Live sweep progress in the terminal: a Ray Tune callback feeding a rich table."""

from __future__ import annotations

import time
from typing import Any

from ray.tune import Callback
from rich.console import Console
from rich.live import Live
from rich.table import Table


class SweepProgress(Callback):
    """Counts trials running / done / stopped / failed and the best validation loss so far."""

    def __init__(self, total: int, console: Console | None = None, enabled: bool = True):
        self.total, self.enabled = total, enabled
        self.console = console or Console(stderr=True)
        self.running: set[str] = set()
        self.done = self.stopped = self.failed = 0
        self.best: tuple[float, str] | None = None
        self.started = time.monotonic()
        self.live: Live | None = None

    def __getstate__(self) -> dict:
        # Tune pickles callbacks for experiment restore (unused here); the terminal stays.
        return {k: v for k, v in self.__dict__.items() if k not in ("console", "live")}

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            self.live = Live(self.render(), console=self.console, refresh_per_second=2,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(*exc)
            self.live = None

    def render(self) -> Table:
        table = Table(title="shapesweep", show_header=True, header_style="bold")
        for column in ("running", "completed", "stopped early", "failed", "of", "best val_loss",
                       "elapsed"):
            table.add_column(column, justify="right")
        best = f"{self.best[0]:.4f} ({self.best[1]})" if self.best else "-"
        table.add_row(str(len(self.running)), str(self.done), str(self.stopped),
                      f"[red]{self.failed}[/]" if self.failed else "0", str(self.total), best,
                      f"{time.monotonic() - self.started:.0f}s")
        return table

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())

    def _name(self, trial: Any) -> str:
        spec = trial.config.get("spec") or {}
        return spec.get("trial_id", trial.trial_id)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self._refresh()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        loss = result.get("val_loss")
        if loss is not None and loss == loss and (self.best is None or loss < self.best[0]):
            self.best = (float(loss), self._name(trial))
        self._refresh()

    def finished(self, trial_id: str, status: str, name: str = "", error: str | None = None) -> None:
        """Called by the results writer once it has filed the trial under `status`."""
        if error:
            self.console.print(f"[red]trial {name or trial_id} failed:[/] {error}")
        self.running.discard(trial_id)
        if status == "completed":
            self.done += 1
        elif status == "stopped_early":
            self.stopped += 1
        else:
            self.failed += 1
        self._refresh()
