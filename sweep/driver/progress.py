"""Sweep progress: a live rich table on a terminal, plain log lines anywhere else.

A live table redraws itself with cursor codes, which a log file (CI, `> log`, a pipe)
cannot show: there it would arrive as one final table with no line end, and the next
line would be glued to it. So when stdout or the display's stream is not a terminal,
each trial that ends prints one plain, flushed line to stdout, and the sweep ends with
a one-line summary; while trials run, a plain `progress:` line every `every_s` seconds
says how far the sweep is (tokens trained, the rate, the ETA).

The ETA is the tokens still to train (every trial to its budget: an upper bound when ASHA
stops some) over the token rate so far. Trials and candidates are named as a person reads
them (`shapesweep.families.base.candidate_label`: variant and shape, then the seed); the
live table lists each candidate with its seeds done and running and the tokens it trained.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO, cast

from ray.tune import Callback
from ray.tune.experiment import Trial
from rich.console import Console, Group, JustifyMethod
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from shapesweep.common import duration, human, is_tty, printable, terminal_console
from shapesweep.families.base import candidate_label

if TYPE_CHECKING:  # search imports the driver: its spec type is read, not imported
    from shapesweep.sweep.search.trials import TrialSpec as SweepTrialSpec

MAX_CANDIDATE_ROWS = 12  # the live table's candidates: running ones first, then the rest


def trial_name(row: dict[str, object], seed: object) -> str:
    """A trial as the progress names it: its candidate's name and its seed."""
    return f"{candidate_label(row)}, seed {seed}"


@dataclass
class CandidateProgress:
    """One candidate's trials in this run: seeds planned, running, ended; tokens; losses."""

    name: str
    planned: int = 0
    running: set[str] = field(default_factory=set)
    done: int = 0
    stopped: int = 0
    failed: int = 0
    losses: list[float] = field(default_factory=list)  # completed seeds' val_loss
    tokens: dict[str, int] = field(default_factory=dict)  # latest tokens of each of its trials

    def seeds_text(self) -> str:
        ended = self.done + self.stopped + self.failed
        parts = [f"{self.done}/{max(self.planned, ended + len(self.running))} done"]
        parts += [f"{len(self.running)} running"] if self.running else []
        parts += [f"{self.stopped} stopped"] if self.stopped else []
        parts += [f"[red]{self.failed} failed[/]"] if self.failed else []
        return ", ".join(parts)


def _num(value: object, fmt: str) -> str:
    """`value` (a row's number) formatted, or `-` where there is none (missing, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(int(cast(float, value)) if fmt == "d" else value, fmt)


class SweepProgress(Callback):
    """Counts trials running / done / stopped / failed and the best validation loss so far.

    `mode` is `live` (rich table, on a terminal), `plain` (a line per ended trial to
    `out`) or `off` (`--no-progress`: only failures, on the display console).
    """

    def __init__(self, total: int, console: Console | None = None, enabled: bool = True,
                 out: TextIO | None = None, budget: int | None = None, every_s: float = 30.0,
                 planned: list[SweepTrialSpec] | None = None) -> None:
        """`planned`: the trial specs this run launches (`shapesweep.sweep.search.trials.trial_spec`),
        when known up front (a grid), so each candidate shows how many seeds it has."""
        self.total, self.budget, self.every_s = total, budget, every_s
        self.console = console or terminal_console(stderr=True)
        self.out = out
        if not enabled:
            self.mode = "off"
        elif self.console.is_terminal and is_tty(out or sys.stdout):
            self.mode = "live"
        else:
            self.mode = "plain"
        self.running: set[str] = set()
        self.done = self.stopped = self.failed = 0
        self.best: tuple[float, str] | None = None  # best val_loss reported by any trial
        self.best_completed: tuple[float, str] | None = None
        self.started = self.last_line = time.monotonic()
        self.live: Live | None = None
        self.tokens: dict[str, int] = {}  # the latest tokens of every trial of this run
        self.candidates: dict[tuple[str, str], CandidateProgress] = {}  # by (key, tuned_json)
        self.trial_candidate: dict[str, CandidateProgress] = {}  # by Tune's trial id
        self.oom_retries: dict[str, int] = {}  # by Tune's trial id, those that ran out of memory
        for spec in planned or []:
            self._candidate(spec["key"], spec.get("tuned_json"), spec["row"]).planned += 1

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def _candidate(self, key: str, tuned_json: str | None, row: dict[str, object]) -> CandidateProgress:
        which = (key, tuned_json or "{}")
        if which not in self.candidates:
            self.candidates[which] = CandidateProgress(candidate_label({**row, "tuned_json": tuned_json}))
        return self.candidates[which]

    def __getstate__(self) -> dict[str, object]:
        # Tune pickles callbacks for experiment restore (unused here); the terminal stays.
        return {k: v for k, v in self.__dict__.items() if k not in ("console", "live", "out")}

    def __enter__(self) -> SweepProgress:
        if self.mode == "live":
            self.live = Live(self.render(), console=self.console, refresh_per_second=2,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(exc_type, exc, traceback)
            self.live = None
        elif self.mode == "plain":
            self._line(self.summary(interrupted=exc_type is not None))

    def _line(self, text: str) -> None:
        print(printable(text), file=self.out or sys.stdout, flush=True)

    def _say(self, text: str) -> None:
        """A notice in any mode: a plain line, or above the live box."""
        if self.mode == "plain":
            self._line(text)
        elif self.mode == "live":
            self.console.print(escape(text), highlight=False)

    def summary(self, interrupted: bool = False) -> str:
        ended = self.done + self.stopped + self.failed
        best = (f"best val_loss {self.best_completed[0]:.4f} ({self.best_completed[1]})"
                if self.best_completed else "best val_loss -")
        state = "interrupted" if interrupted else "done"
        return (f"sweep {state}: {ended} of {self.total} trials ended this run "
                f"({self.done} completed, {self.stopped} stopped early, {self.failed} failed); "
                f"{best}; {time.monotonic() - self.started:.0f}s")

    def eta(self) -> tuple[int, int | None, float | None, float | None]:
        """(tokens trained, tokens planned, token rate per s, seconds left): the plan is
        every trial to its budget, so the ETA is an upper bound when ASHA stops trials."""
        done = sum(self.tokens.values())
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if done and elapsed > 0 else None
        planned = self.budget * self.total if self.budget else None
        left = max(planned - done, 0) / rate if planned and rate else None
        return done, planned, rate, left

    def progress_line(self) -> str:

        done, planned, rate, left = self.eta()
        ended = self.done + self.stopped + self.failed
        best = f"{self.best[0]:.4f} ({self.best[1]})" if self.best else "-"
        tokens = f"{human(done)}/{human(planned)}" if planned else human(done)
        return (f"progress: {ended}/{self.total} trials ended, {len(self.running)} running; "
                f"tokens {tokens} at {human(rate or 0)}/s; ETA {duration(left)}; "
                f"best val_loss {best}; elapsed {duration(time.monotonic() - self.started)}")

    def render(self) -> Group:
        """A narrow layout (label, value), then one row per candidate: it fits 80 columns."""
        done, planned, rate, left = self.eta()
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        table.title = "shapesweep"
        failed = f"[red]{self.failed} failed[/]" if self.failed else "0 failed"
        table.add_row("trials", f"{len(self.running)} running, {self.done} completed, "
                      f"{self.stopped} stopped early, {failed} (of {self.total})")
        table.add_row("best val_loss", f"{self.best[0]:.4f} ({self.best[1]})" if self.best else "-")
        tokens = f"{human(done)} of {human(planned)}" if planned else human(done)
        table.add_row("tokens", f"{tokens} at {human(rate or 0)}/s")
        table.add_row("elapsed", f"{duration(time.monotonic() - self.started)}, ETA {duration(left)}")
        return Group(table, self._candidates_table()) if self.candidates else Group(table)

    def _candidates_table(self) -> Table:
        """Each candidate by name: its seeds done and running, tokens trained, mean val_loss of
        its completed seeds; running ones first, at most MAX_CANDIDATE_ROWS."""
        table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("candidate", "left"), ("seeds", "left"), ("tokens", "right"), ("val_loss", "right"))
        for column, justify in columns:
            table.add_column(column, justify=justify, overflow="fold", no_wrap=column != "candidate")
        order = sorted(self.candidates.items(), key=lambda item: (not item[1].running,
                                                                   not (item[1].done or item[1].stopped
                                                                        or item[1].failed)))
        for _, c in order[:MAX_CANDIDATE_ROWS]:
            trained = sum(c.tokens.values())
            loss = f"{sum(c.losses) / len(c.losses):.4f}" if c.losses else "-"
            table.add_row(escape(c.name), c.seeds_text(), human(trained) if trained else "-", loss)
        if len(order) > MAX_CANDIDATE_ROWS:
            table.add_row(f"... and {len(order) - MAX_CANDIDATE_ROWS} more", "", "", "")
        return table

    def _count(self, trial_id: str, status: str, row: dict[str, object]) -> None:
        """The trial's candidate: one seed more ended as `status`, its loss and tokens."""
        candidate = self._candidate(cast(str, row["key"]), cast("str | None", row.get("tuned_json")), row)
        candidate.running.discard(trial_id)
        self.trial_candidate[trial_id] = candidate
        tokens = row.get("tokens")
        if isinstance(tokens, int | float):
            self.tokens[trial_id] = candidate.tokens[trial_id] = int(tokens)
        loss = cast("float | None", row.get("val_loss"))  # the row's: a float or None
        if status == "completed":
            candidate.done += 1
            if loss is not None and math.isfinite(loss):
                candidate.losses.append(float(loss))
        elif status == "stopped_early":
            candidate.stopped += 1
        else:
            candidate.failed += 1

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())

    def _spec(self, trial: Trial) -> dict[str, Any]:
        return trial.config.get("spec") or {}

    def _name(self, trial: Trial) -> str:
        spec = self._spec(trial)
        if "row" not in spec:
            return spec.get("trial_id", trial.trial_id)
        return trial_name({**spec["row"], "tuned_json": spec.get("tuned_json")}, spec.get("seed"))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        spec = self._spec(trial)
        if "row" in spec:
            candidate = self._candidate(spec["key"], spec.get("tuned_json"), spec["row"])
            candidate.running.add(trial.trial_id)
            self.trial_candidate[trial.trial_id] = candidate
        self._refresh()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        retries = result.get("oom_retries") or 0
        if retries > self.oom_retries.get(trial.trial_id, 0):  # shapesweep.trainers.fitting
            self.oom_retries[trial.trial_id] = retries
            self._say(f"trial {self._name(trial)}: out of memory, retry {retries} at micro-batch "
                      f"{result.get('micro_batch_size')}")
        loss = result.get("val_loss")
        if loss is not None and loss == loss and (self.best is None or loss < self.best[0]):
            self.best = (float(loss), self._name(trial))
        if isinstance(result.get("tokens"), int | float):
            self.tokens[trial.trial_id] = int(result["tokens"])
            if trial.trial_id in self.trial_candidate:
                self.trial_candidate[trial.trial_id].tokens[trial.trial_id] = int(result["tokens"])
        self._refresh()
        if self.mode == "plain" and time.monotonic() - self.last_line >= self.every_s:
            self.last_line = time.monotonic()
            self._line(self.progress_line())

    def finished(self, trial_id: str, status: str, name: str = "", error: str | None = None,
                 row: dict[str, object] | None = None) -> None:
        """Called by the results writer once it has filed the trial under `status`.

        `row` is the trial's results row (key, seed, variant and shape, val_loss, tokens,
        wall_time_s); `name` what to call the trial without one.
        """
        self.running.discard(trial_id)
        if status == "completed":
            self.done += 1
        elif status == "stopped_early":
            self.stopped += 1
        else:
            self.failed += 1
        row = row or {}
        loss = cast("float | None", row.get("val_loss"))  # the row's: a float or None
        if "key" in row:
            name = trial_name(row, row.get("seed", "-"))
            self._count(trial_id, status, row)
        if (status == "completed" and loss is not None and math.isfinite(loss)
                and (self.best_completed is None or loss < self.best_completed[0])):
            self.best_completed = (float(loss), name or trial_id)
        if self.mode == "plain":
            ended = self.done + self.stopped + self.failed
            line = (f"trial {ended}/{self.total} {status}: {name or trial_id}: "
                    f"val_loss={_num(loss, '.4f')} tokens={_num(row.get('tokens'), 'd')} "
                    f"elapsed={_num(row.get('wall_time_s'), '.1f')}s key={row.get('key', '-')}")
            retries = row.get("oom_retries")
            line += (f" oom_retries={retries} micro_batch={row.get('micro_batch_size')}"
                     if retries else "")
            self._line(line + (f" error={error}" if error else ""))
        elif error:
            self.console.print(f"[red]trial {escape(name or trial_id)} failed:[/] {escape(error)}")
        self._refresh()
