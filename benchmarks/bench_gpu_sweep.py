"""`bench_gpu.py`'s sweeps: a full-size space swept as a user would, a
few steps a trial (`e2e`); one timed sweep (`sweep`); three trials packed on a GPU (`packed`).

`shapesweep plan`, `run`, `status` and `export` of `hourglass-fixed-attention-113m` (its
five candidates, one seed, its lr without the lr choice, 4 steps of its 524,288-token batch,
`micro_batch_size: auto`, one trial at a time on one GPU), each a real command in its own
process; then each candidate's predicted step time and peak memory set beside the measured
ones. Predicted: the plan's `memory_peak_bytes`, and a step's FLOPs (`flops_per_token` x
`batch_tokens`) over the device's peak at the project's measured MFU for the family
(`gpu-figures.json`; eager trials at `compile_policy.EAGER_MFU`). Measured: the trial row's
`memory_peak_bytes_measured` and `batch_tokens / tokens_per_s`. On CPU (`--quick` or
`--device cpu`) a tiny two-candidate space runs the same four commands: the code path, no
figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml
from bench_sweep_overhead import DEPTHS, overhead_space

from shapesweep import search_spaces
from shapesweep.results.store import load_trials
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import make_config
from shapesweep.search_spaces.safe_yaml import read_yaml
from shapesweep.sweep.cli.main import main as cli_main
from shapesweep.trainers import gpu_figures
from shapesweep.trainers.compile_policy import EAGER_MFU

TOKENS_PER_MICRO_BATCH = 16384  # 8 x 2048 or 4 x 4096: the first H200 run's micro-batch
STEPS = 4  # optimizer steps a trial: compile, a few steps and one evaluation
GIB = 2**30


def e2e_space(small: bool) -> dict:
    """The full-size space cut to a few steps a trial (a tiny stand-in when `small`)."""
    if small:
        space = tiny_space(4096)
        space["train"]["eval_every"] = 4
    else:
        space = read_yaml(Path(search_spaces.__file__).parent / "builtin"
                          / "hourglass-fixed-attention-113m.yaml")
        batch = space["train"]["batch_tokens"]
        space.pop("tune", None)  # the lr as given: no lr-choosing trials
        space["train"].update(tokens=STEPS * batch, warmup_tokens=batch, eval_tokens=65536,
                              eval_every=STEPS, micro_batch_size="auto")
    space["name"] = "bench-gpu-e2e"
    return space


def shapesweep(*args: str) -> subprocess.CompletedProcess:
    """One `shapesweep` command in its own process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", *args],
                          capture_output=True, text=True)


def label(row: dict) -> str:
    """A candidate's name in figure keys: baseline, k5 (hourglass) or L2 (a depth)."""
    return "baseline" if row.get("variant") == "baseline" else (
        f"k{row['k']}" if row.get("k") else f"L{row['n_layers']}")


def predicted_step_s(row: dict, peak: float | None) -> float | None:
    """The plan's step seconds: a step's FLOPs at the family's measured MFU (eager: EAGER_MFU)."""
    if not peak:
        return None
    compiled = (row.get("compile_on_cuda") or {}).get("compile", False)
    measured = gpu_figures.mfu(row["family"])
    mfu = float(measured[1]["value"]) if compiled and measured else EAGER_MFU
    return row["flops_per_token"] * row["train"]["batch_tokens"] / (peak * mfu)


def e2e_sweep(device: str, quick: bool, peak: float | None,
              record: Callable[..., None]) -> list[str]:
    """plan -> run -> status -> export; each candidate's predicted against measured step and
    peak. `record(key, value, format, unit, what)` keeps a figure (bench_gpu's figures file)."""
    cuda = device == "cuda" and not quick
    with tempfile.TemporaryDirectory(prefix="bench-gpu-e2e-") as tmp:
        space_path, root = Path(tmp) / "space.yaml", str(Path(tmp) / "sweeps")
        space_path.write_text(yaml.safe_dump(e2e_space(not cuda)))
        memory = ["--device", "cuda", "--gpus-per-trial", "1"] if cuda else ["--device", "cpu"]
        planned = shapesweep("plan", str(space_path), "--format", "json", *memory)
        if planned.returncode:
            return [f"plan failed (exit {planned.returncode}): {planned.stderr.strip()[-300:]}"]
        rows = {row["key"]: row for row in json.loads(planned.stdout)}
        started = time.perf_counter()
        ran = shapesweep("run", str(space_path), "--root", root, "--seeds", "1", "--no-progress",
                         "--scheduler", "fifo", "--max-concurrent", "1",
                         "--gpus-per-trial", "1" if cuda else "0")
        wall = time.perf_counter() - started
        status = shapesweep("status", "bench-gpu-e2e", "--root", root, "--format", "json")
        exported = shapesweep("export", "bench-gpu-e2e", "--root", root, "--top", "1",
                              "--out", str(Path(tmp) / "best"))
        files = sorted(p.name for p in (Path(tmp) / "best").glob("*")) if exported.returncode == 0 else []
        trials = load_trials(root) if Path(root).exists() else None
        lines = [f"plan {len(rows)} candidates; run exit {ran.returncode} in {wall:.1f} s; status "
                 f"exit {status.returncode}; export exit {exported.returncode}, {len(files)} files"]
        if ran.returncode or trials is None or trials.empty:
            return lines + [f"  run: {ran.stderr.strip()[-300:]}"]
    record("e2e_wall_s", wall, ".1f", "s", f"end-to-end sweep of {len(rows)} candidates, "
           f"{STEPS} steps each: `shapesweep run` wall seconds")
    for t in trials.sort_values("key").to_dict("records"):
        row = rows[t["key"]]
        name, plan_step = label(row), predicted_step_s(row, peak)
        step = (row["train"]["batch_tokens"] / t["tokens_per_s"]
                if pd.notna(t.get("tokens_per_s")) and t["tokens_per_s"] else None)
        measured_peak = t.get("memory_peak_bytes_measured")
        measured_peak = float(measured_peak) if pd.notna(measured_peak) else None
        for key, value, fmt, unit, what in (
                (f"e2e_step_s_predicted_{name}", plan_step, ".2f", "s", "the plan's step seconds"),
                (f"e2e_step_s_measured_{name}", step, ".2f", "s", "batch_tokens / tokens_per_s"),
                (f"e2e_peak_gib_predicted_{name}", row["memory_peak_bytes"] / GIB, ".1f", "GiB",
                 "the plan's memory_peak_bytes"),
                (f"e2e_peak_gib_measured_{name}", measured_peak and measured_peak / GIB, ".1f", "GiB",
                 "the trial's memory_peak_bytes_measured")):
            if value is not None:
                record(key, value, fmt, unit, f"end-to-end sweep, {name}: {what}")
        lines.append(
            f"  {name}: {t['status']}, micro-batch {t.get('micro_batch_size')}, step "
            + (f"predicted {plan_step:.2f} s, " if plan_step else "predicted n/a (no peak), ")
            + (f"measured {step:.2f} s" if step else "measured n/a")
            + (f" ({plan_step / step - 1:+.1%})" if plan_step and step else "")
            + f"; peak predicted {row['memory_peak_bytes'] / GIB:.2f} GiB, measured "
            + (f"{measured_peak / GIB:.2f} GiB ({row['memory_peak_bytes'] / measured_peak - 1:+.1%})"
               if measured_peak else "n/a"))
    return lines


def tiny_space(tokens: int) -> dict:
    """Two depths of the overhead benchmark's d_model-32 LM at its one parameter budget."""
    space = overhead_space(DEPTHS, tokens)
    space["search"] = {"n_layers": [1, 2], "n_heads": [2]}
    return space


def sweep_space(quick: bool, steps: int) -> dict:
    """Two shapes at one budget, short trials, evaluated every `steps // 4` steps."""
    if quick:
        space = tiny_space(4096)
        space["train"]["eval_every"] = 2
        return space
    space = tiny_space(steps * TOKENS_PER_MICRO_BATCH)
    conventional = make_config(dict(family="conventional", d_model=768, n_layers=12, n_heads=12,
                                    d_h=3072, vocab_size=50304))
    space.update(name="bench-gpu-sweep", budget={
        "non_embedding_params": account(conventional).params_non_embedding, "tolerance": 0.05},
        fixed={"d_model": 768, "n_heads": 12, "vocab_size": 50304}, search={"n_layers": [11, 12]})
    space["train"].update(seq_len=2048, batch_tokens=TOKENS_PER_MICRO_BATCH,
                          micro_batch_size=TOKENS_PER_MICRO_BATCH // 2048, lr=1e-3,
                          eval_tokens=2048, eval_every=max(1, steps // 4), compile=True)
    return space


def packed_space(quick: bool) -> dict:
    """The issue's packed sweep: the 113M baseline and hourglass k 5 and k 10, 40 steps of
    65,536 tokens, evaluated at the end on 65,536 tokens, micro-batch chosen by the memory
    model; a tiny stand-in with --quick."""
    if quick:
        space = tiny_space(4096)
        space["train"].update(eval_every=2, micro_batch_size="auto")
        return space
    space = read_yaml(Path(search_spaces.__file__).parent / "builtin"
                      / "hourglass-fixed-attention-113m.yaml")
    space["name"] = "bench-gpu-packed"
    space["variants"][1]["search"] = {"k": [5, 10]}
    batch = 65536
    space["train"].update(tokens=40 * batch, batch_tokens=batch, micro_batch_size="auto",
                          warmup_tokens=4 * batch, eval_tokens=batch, eval_every=20,
                          compile=True)
    return space


def run_space(space: dict, args: list[str]):
    """`shapesweep run` of one space in a temporary root: (exit code, wall seconds, trials)."""
    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.yaml"
        space_path.write_text(yaml.safe_dump(space))
        root = str(Path(tmp) / "sweeps")
        start = time.perf_counter()
        code = cli_main(["run", str(space_path), "--root", root, "--seeds", "1",
                           "--no-progress", *args])
        wall = time.perf_counter() - start
        trials = load_trials(root) if Path(root).exists() else None
    return code, wall, trials


def packed_sweep(device: str, quick: bool) -> list[str]:
    """Three candidates packed on one GPU with an automatic micro-batch: every trial's fate."""
    cuda = device == "cuda"
    code, wall, trials = run_space(packed_space(quick or not cuda), [  # CPU: the stand-in
        "--scheduler", "fifo", "--max-concurrent", "3",
        "--gpus-per-trial", "0.33" if cuda else "0"])
    if trials is None or trials.empty:
        return [f"shapesweep run exit {code}, no trials stored ({wall:.0f} s)"]
    counts = trials["status"].value_counts().to_dict()
    lines = [f"exit {code}, {len(trials)} trials in {wall:.1f} s wall: "
             + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))]
    gib = 2**30
    for t in trials.sort_values("key").itertuples():
        measured = getattr(t, "memory_peak_bytes_measured", None)
        lines.append(
            f"  {t.family} k={getattr(t, 'k', None)} d_h={t.d_h}: {t.status}, micro-batch "
            f"{t.micro_batch_size}, predicted {t.memory_peak_bytes / gib:.1f} GiB, measured "
            f"{measured / gib:.1f} GiB, {t.oom_retries} OOM retries, compile {t.compile_s:.1f} s, "
            f"{t.tokens_per_s:,.0f} tok/s, val_loss {t.val_loss:.4f}, wall {t.wall_time_s:.1f} s"
            if t.status == "completed" else
            f"  {t.family} k={getattr(t, 'k', None)}: {t.status}: {str(t.error)[:300]}")
    return lines


def time_sweep(device: str, quick: bool) -> list[str]:
    """One real sweep (FIFO, one trial at a time): the timings read back from its store."""
    code, wall, trials = run_space(sweep_space(quick, 40), [
        "--scheduler", "fifo", "--max-concurrent", "1",
        "--gpus-per-trial", "1" if device == "cuda" else "0"])
    if code != 0 or trials is None:
        return [f"shapesweep run failed (exit {code})"]
    lines = [f"{len(trials)} trials in {wall:.1f} s wall"]
    lines += [f"  trial n_layers={t.n_layers}: {t.wall_time_s:.1f} s, compile {t.compile_s:.1f} s, "
              f"{t.tokens_per_s:,.0f} tok/s, {t.graph_breaks} graph breaks, {t.recompiles} "
              "recompiles" for t in trials.sort_values("finished_at").itertuples()]
    return lines
