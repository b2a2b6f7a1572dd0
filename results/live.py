"""Live curves: the evaluation points of trials still running, beside the results store.

A trial's rows land in the store only when it ends (`store.write_trial`); until then its
curve lives here, so `status` and `serve` can show it grow:

    ROOT/SWEEP/live/<trial_id>.jsonl    line 1 {"trial": row, "budget": tokens}, then one
                                        {"point": {step, tokens, val_loss, ...}} per evaluation

Only the driver writes (one appended line per evaluation, one `write` each), so a reader
sees whole lines plus at most one partial last line, which it skips. The driver removes a
trial's file once its row has landed; `store.compact` removes files a killed driver left.
Local roots only: an object store has no append, and its sweeps show rows as they land.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa

from shapesweep.common import UserError
from shapesweep.results.schema import CURVE_COLUMNS, TRIAL_COLUMNS, normalize_trial_row
from shapesweep.results.store import local_folder, validate_sweep_name

LIVE_FOLDER = "live"
RUNNING = "running"  # the status a live trial shows with (never stored in a trials row)


def _folder(root, sweep: str) -> str | None:
    base = local_folder(root)
    return None if base is None else os.path.join(base, validate_sweep_name(sweep), LIVE_FOLDER)


def _file(folder: str, trial_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in trial_id)
    return os.path.join(folder, f"{safe}.jsonl")


def append_point(root, sweep: str, spec: dict, point: dict, budget: int | None = None) -> None:
    """Add one evaluation point of the running trial `spec` (`sweep.search.trials.trial_spec`);
    the first point also writes the trial's row (its shape and accounting) and token budget."""
    folder = _folder(root, sweep)
    if folder is None:
        return
    path = _file(folder, spec["trial_id"])
    try:
        os.makedirs(folder, exist_ok=True)
        lines = []
        if not os.path.exists(path):
            row = {k: v for k, v in spec["row"].items() if k in TRIAL_COLUMNS.names}
            row.update(sweep=sweep, trial_id=spec["trial_id"], key=spec["key"], seed=spec["seed"],
                       tuned_json=spec.get("tuned_json"), config_json=spec.get("document"))
            lines.append({"trial": row, "budget": budget, "started": time.time()})
        lines.append({"point": point, "at": time.time()})
        text = "".join(json.dumps(line, default=str) + "\n" for line in lines)
        with open(path, "a", encoding="utf-8") as handle:  # one write: a reader sees whole lines
            handle.write(text)
    except OSError as error:  # a full disk costs the live view, never the sweep
        if path not in _warned:
            _warned.add(path)
            print(f"warning: no live curve for {path}: {error}", file=sys.stderr, flush=True)


_warned: set[str] = set()


def add_point(points: list[dict], point: dict) -> None:
    """Append `point` to `points`, a curve in step order. A trial retried from an earlier
    checkpoint evaluates the steps since then again: its new point replaces those from its
    step on."""
    step = point.get("step")
    while step is not None and points and (points[-1].get("step") or 0) >= step:
        points.pop()
    points.append(point)


def remove(root, sweep: str, trial_id: str) -> None:
    """Forget a trial's live curve (its row and curve have landed in the store)."""
    folder = _folder(root, sweep)
    if folder is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_file(folder, trial_id))


def _read(path: str) -> tuple[dict, list[dict], float] | None:
    """(header, points, time of the last point) of one live file; None when it has no
    header yet or vanished (its trial landed meanwhile). A partial last line is skipped."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    header: dict | None = None
    points: list[dict] = []
    last = 0.0
    for line in text.split("\n")[:-1]:  # the text after the last newline is still being written
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if header is None and isinstance(item, dict) and isinstance(item.get("trial"), dict):
            header, last = item, float(item.get("started") or 0)
        elif isinstance(item, dict) and isinstance(item.get("point"), dict):
            add_point(points, item["point"])
            last = float(item.get("at") or last)
    return (header, points, last) if header is not None else None


def _row(header: dict, points: list[dict], last: float) -> dict:
    """The running trial as a trials row: its latest loss and tokens, `finished_at` the
    time of its latest point (what tells a newer live file from a landed row)."""
    row = {k: v for k, v in header["trial"].items() if k in TRIAL_COLUMNS.names}
    latest: dict = next((p for p in reversed(points) if p.get("val_loss") is not None), {})
    newest = points[-1] if points else {}
    try:
        row = normalize_trial_row({
            **row, "status": None, "val_loss": latest.get("val_loss"),
            "train_loss": newest.get("train_loss"), "tokens": newest.get("tokens"),
            "steps": newest.get("step"), "wall_time_s": newest.get("elapsed_s"),
            "train_tokens_budget": header.get("budget"),
            "finished_at": datetime.fromtimestamp(last, tz=UTC)})
    except ValueError:
        return {}
    return {**row, "status": RUNNING}


def live_sweeps(root) -> list[str]:
    """Sweeps with a running trial: a new sweep has live curves before any trials row."""
    base = local_folder(root)
    if base is None or not os.path.isdir(base):
        return []
    return sorted(name for name in os.listdir(base)
                  if os.path.isdir(os.path.join(base, name, LIVE_FOLDER)) and _valid(name))


def _valid(name: str) -> bool:
    try:
        validate_sweep_name(name)
    except UserError:
        return False
    return True


def load_live(root, sweeps: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows, curves) of the trials running now: rows in TRIAL_COLUMNS with status `running`
    (val_loss and tokens their latest), curves in CURVE_COLUMNS. Reading creates nothing."""
    rows, curves = [], []
    for sweep in live_sweeps(root) if sweeps is None else sweeps:
        folder = _folder(root, sweep)
        if not folder or not os.path.isdir(folder):
            continue
        for name in (n for n in sorted(os.listdir(folder)) if n.endswith(".jsonl") and not n.startswith(".")):
            found = _read(os.path.join(folder, name))
            row = _row(*found) if found else {}
            if not row or found is None:
                continue
            rows.append(row)
            curves += [{**{k: p.get(k) for k in CURVE_COLUMNS.names}, "sweep": sweep,
                        "trial_id": row["trial_id"]} for p in found[1] if p.get("step") is not None]
    return (_frame(rows, TRIAL_COLUMNS), _frame(curves, CURVE_COLUMNS))


def _frame(rows: list[dict], schema: pa.Schema) -> pd.DataFrame:
    """Rows in the store's column types, so they concatenate with what `load_trials` gives."""
    safe = schema.set(schema.get_field_index("status"), pa.field("status", pa.string())) \
        if "status" in schema.names else schema
    try:
        return pa.Table.from_pylist(rows, schema=safe).to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # a point of the wrong type: show none rather than fail
        return safe.empty_table().to_pandas()


def with_running(trials: pd.DataFrame, curves: pd.DataFrame, live_rows: pd.DataFrame,
                 live_curves: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The store's trials and curves plus the running ones. A live trial newer than its
    stored row (a retry of a failed trial) replaces that row; one whose row landed after
    its last point (it ended between two reads) is dropped."""
    if live_rows.empty:
        return trials, curves
    ids = ["sweep", "trial_id"]
    stored = trials.set_index(ids)["finished_at"] if len(trials) else pd.Series(dtype=object)
    landed = [key in stored.index and stored[key] >= at
              for key, at in zip(map(tuple, live_rows[ids].to_numpy()), live_rows["finished_at"], strict=True)]
    running = live_rows[~pd.Series(landed, index=live_rows.index)]
    if running.empty:
        return trials, curves
    replaced = pd.MultiIndex.from_frame(running[ids])
    keep = ~pd.MultiIndex.from_frame(trials[ids]).isin(replaced) if len(trials) else []
    keep_curves = ~pd.MultiIndex.from_frame(curves[ids]).isin(replaced) if len(curves) else []
    running_curves = live_curves.merge(running[ids], on=ids)
    return (pd.concat([trials[keep], running], ignore_index=True) if len(trials) else running.reset_index(drop=True),
            pd.concat([curves[keep_curves], running_curves], ignore_index=True) if len(curves)
            else running_curves)
