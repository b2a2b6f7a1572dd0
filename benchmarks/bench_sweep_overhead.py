"""Orchestration cost of `shapesweep run`: a fixed cost per sweep and an overhead per trial,
each above a plain script that trains the same candidates back to back.

    .venv/bin/python -m benchmarks.bench_sweep_overhead [--sizes 8 32] [--tokens 8192] [--repeats 1]
                                                        [--running-ray] [--fresh-workers]

For each size N, side by side (the order alternated between repeats): a fresh process that
trains N candidates back to back with the torch threads a trial gets (Ray gives a 1-CPU
trial OMP_NUM_THREADS=1), and `shapesweep run` of a space of exactly those N candidates, one
at a time (FIFO, `--max-concurrent 1`), also a fresh process. Both sides pay their imports;
the sweep also pays ray.init, its first actor, the worker's imports, the catalog and store
writes and ray.shutdown. Two estimates, sweep minus plain:
- from the trials' own timestamps (a sweep trial's row: finished_at - wall_time_s to
  finished_at): fixed cost = start-up (launch to the first trial's training) + wind-down
  (last trial's end to exit); overhead per trial = the median start-to-start period. The
  sweep's process also times its phases (ray.init, ray.shutdown, ...). Load that drifts
  between the sides hardly moves these.
- wall = fixed + N x per-trial on each side, fitted over the sizes.
`--running-ray`: the sweeps join one
local Ray started beforehand (`shapesweep run --address`, as after `ray start --head`), so
they pay no ray.init or shutdown of their own. `--fresh-workers`: a third side, the same
sweep with `run --fresh-workers` (a new worker process per trial, as Tune does without
actor reuse), to measure what warm workers save per trial.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import yaml

HEADS = [1, 2, 4, 8, 16, 32]  # head counts d_model 32 divides into
DEPTHS = 8


def overhead_space(trials: int, tokens: int) -> dict:
    """`trials` (a multiple of 8, at most 48) tiny conventional LMs at one parameter budget:
    depths 1..8 x the first trials/8 head counts, each with the d_h that meets the budget."""
    if trials % DEPTHS or not 0 < trials <= DEPTHS * len(HEADS):
        raise SystemExit(f"--sizes: {trials} is not a multiple of {DEPTHS} up to {DEPTHS * len(HEADS)}")
    return {
        "name": f"bench-overhead-{trials}",
        "family": "conventional",
        "budget": {"non_embedding_params": 41216, "tolerance": 0.05},
        "fixed": {"d_model": 32, "vocab_size": 256, "activation": "swiglu"},
        "search": {"n_layers": list(range(1, DEPTHS + 1)), "n_heads": HEADS[:trials // DEPTHS]},
        "solve": "d_h",
        "train": {"tokens": tokens, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
                  "eval_tokens": 2048},
    }


def plain_loop(space_path: str, threads: int) -> None:
    """The baseline, run in its own process: every candidate of the space, seed 0, trained
    by `train()` back to back, as the sweep's trials are. Prints when each trial started
    and ended (JSON) for the parent, both sides' way: its end less the loop's own clock
    (`wall_time_s`, which starts once the data is loaded and the model built)."""
    import torch

    from shapesweep.search_spaces.configs import TrainConfig, make_config
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space
    from shapesweep.sweep.search.trials import trial_spec
    from shapesweep.trainers.loop import train

    torch.set_num_threads(threads)
    space = load_space(space_path)
    spans = []
    for candidate in plan(space).candidates:
        doc = trial_spec(candidate, space, 0, None)["document"]
        result = train(make_config(doc["model"] | {"family": doc["family"]}),
                       TrainConfig(**doc["train"]))
        end = time.time()
        spans.append((end - result.wall_time_s, end))
    print(json.dumps({"spans": spans}))


def timed_sweep(argv: list[str]) -> None:
    """`shapesweep ARGV` in this process, timing Ray's start and shutdown; prints the
    marks (JSON) for the parent."""
    from shapesweep.sweep.cli.main import main as shapesweep
    from shapesweep.sweep.cli.main import quick_exit
    from shapesweep.sweep.driver import runner

    marks = {"imported": time.time()}

    def timed(name, call):
        def wrapper(*args, **kwargs):
            marks[name] = time.time()
            try:
                return call(*args, **kwargs)
            finally:
                marks[f"{name}_end"] = time.time()
        return wrapper

    runner.init_ray = timed("init", runner.init_ray)  # runner's own names for them
    runner.stop_ray = timed("shutdown", runner.stop_ray)
    code = shapesweep(argv)
    print(json.dumps(marks | {"returned": time.time(), "torch_in_driver": "torch" in sys.modules}))
    quick_exit(code)  # as the `shapesweep` command ends


def launch(argv: list[str]) -> tuple[float, float, dict]:
    """Run `python -m ARGV` as a fresh process: its start and end on the wall clock and
    the JSON it printed last."""
    start = time.time()
    out = subprocess.run([sys.executable, "-m", *argv], check=True, capture_output=True,
                         text=True).stdout
    return start, time.time(), json.loads(out.strip().splitlines()[-1])


def trial_spans(root: str, name: str) -> list[tuple[float, float]]:
    """When each of a sweep's trials trained, from its row: finished_at - wall_time_s to
    finished_at (the loop's clock starts after the model is built and the data loaded)."""
    from shapesweep.results.store import load_trials

    trials = load_trials(root, [name])
    ends = [t.timestamp() for t in trials["finished_at"]]
    return sorted((end - wall, end) for end, wall in zip(ends, trials["wall_time_s"], strict=True))


def period(spans: list[tuple[float, float]]) -> float:
    """Median time from one trial's start to the next's: a trial plus what comes between."""
    starts = [start for start, _ in spans]
    return statistics.median(np.diff(starts)) if len(starts) > 1 else math.nan


def gap(spans: list[tuple[float, float]]) -> float:
    """Median time from one trial's end to the next's start."""
    gaps = [start - end for (_, end), (start, _) in zip(spans[:-1], spans[1:], strict=True)]
    return statistics.median(gaps) if gaps else math.nan


@contextmanager
def running_ray(cpus: int) -> Iterator[str]:
    """A local Ray kept running in a child process (its address), as `ray start --head`
    would keep one, for sweeps that join it with `--address`; shut down by that child."""
    keeper = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, ray\n"
         f"ray.init(address='local', num_cpus={cpus}, include_dashboard=False)\n"
         "print(ray.get_runtime_context().gcs_address, flush=True)\n"
         "sys.stdin.read()\n"
         "ray.shutdown()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield keeper.stdout.readline().strip()
    finally:
        keeper.stdin.close()
        keeper.wait(timeout=60)


def measure(size: int, tokens: int, threads: int, folder: Path, sweep_first: bool,
            address: str | None = None, fresh: bool = False) -> dict:
    """One side-by-side pair (a triple with `fresh`) at `size` trials: each side's wall,
    start-up (launch to first trial), period per trial and wind-down (last trial's end to
    exit), and the sweep's phases (seconds)."""
    space_path = folder / f"space-{size}.yaml"
    space_path.write_text(yaml.safe_dump(overhead_space(size, tokens)))
    root = str(folder / f"sweeps-{time.monotonic_ns()}")
    me = "benchmarks.bench_sweep_overhead"

    def sweep(sweep_root: str, *options: str) -> list[str]:
        return [me, "--sweep", "run", str(space_path), "--root", sweep_root, "--scheduler", "fifo",
                "--max-concurrent", "1", "--cpus-per-trial", str(threads), "--no-progress",
                *(["--address", address] if address else []), *options]

    arms = [("sweep", sweep(root)), ("plain", [me, "--plain", str(space_path), "--threads", str(threads)])]
    if fresh:
        arms.append(("fresh", sweep(f"{root}-fresh", "--fresh-workers")))
    sides = {}
    for side, argv in arms[:: 1 if sweep_first else -1]:
        sides[side] = launch(argv)
    if fresh:
        fresh_start, fresh_end, _ = sides["fresh"]
        fresh_spans = trial_spans(f"{root}-fresh", f"bench-overhead-{size}")
    (p_start, p_end, p_out), (s_start, s_end, marks) = sides["plain"], sides["sweep"]
    p_spans, s_spans = p_out["spans"], trial_spans(root, f"bench-overhead-{size}")
    first, last = s_spans[0][0], s_spans[-1][1]
    return {
        "plain": p_end - p_start, "sweep": s_end - s_start,
        "plain_startup": p_spans[0][0] - p_start, "plain_period": period(p_spans),
        "plain_winddown": p_end - p_spans[-1][1],
        "sweep_startup": first - s_start, "sweep_period": period(s_spans), "sweep_gap": gap(s_spans),
        "sweep_winddown": s_end - last,
        "cli_imports": marks["imported"] - s_start, "checks": marks["init"] - marks["imported"],
        "ray_init": marks["init_end"] - marks["init"], "first_trial": first - marks["init_end"],
        "to_shutdown": marks["shutdown"] - last,
        "ray_shutdown": marks["shutdown_end"] - marks["shutdown"],
        "to_return": marks["returned"] - marks["shutdown_end"], "exit": s_end - marks["returned"],
        "torch_in_driver": marks["torch_in_driver"],
    } | ({"fresh": fresh_end - fresh_start, "fresh_period": period(fresh_spans)} if fresh else {})


PHASES = {  # the sweep's start-up and wind-down, in order
    "cli_imports": "CLI imports (process start to `run`)",
    "checks": "checks, catalog, plan (to ray.init)",
    "ray_init": "ray.init",
    "first_trial": "first actor, worker imports, data, model",
    "to_shutdown": "last trial's end to ray.shutdown",
    "ray_shutdown": "ray.shutdown",
    "to_return": "compaction, summary",
    "exit": "interpreter exit",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=1, help="pairs per size (median taken)")
    parser.add_argument("--threads", type=int, default=1, help="CPUs (and torch threads) per trial")
    parser.add_argument("--running-ray", action="store_true",
                        help="the sweeps join a Ray started once beforehand (--address)")
    parser.add_argument("--fresh-workers", action="store_true",
                        help="also time the sweep with a new worker process per trial")
    parser.add_argument("--plain", metavar="SPACE", help=argparse.SUPPRESS)  # the baseline's process
    parser.add_argument("--sweep", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # the sweep's
    args = parser.parse_args()
    if args.plain:
        return plain_loop(args.plain, args.threads)
    if args.sweep:
        return timed_sweep(args.sweep)
    if len(set(args.sizes)) < 2:
        raise SystemExit("--sizes: give two or more sizes to separate fixed and per-trial costs")

    runs: dict[int, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        address = stack.enter_context(running_ray(os.cpu_count())) if args.running_ray else None
        for repeat in range(args.repeats):
            for i, size in enumerate(args.sizes):
                pair = measure(size, args.tokens, args.threads, Path(tmp), (repeat + i) % 2 == 1,
                               address, args.fresh_workers)
                runs.setdefault(size, []).append(pair)
    med = {size: {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
           for size, pairs in runs.items()}
    report(med, args)


def evaluations_per_trial(tokens: int) -> int:
    """How often a trial of the benchmark's recipe evaluates (each a report to Tune)."""
    from shapesweep.search_spaces.cadence import eval_steps, total_steps
    from shapesweep.search_spaces.configs import TrainConfig

    train = TrainConfig(**overhead_space(DEPTHS, tokens)["train"])
    return len(eval_steps(train, total_steps(train, train.batch_tokens), train.batch_tokens))


def report(med: dict[int, dict], args: argparse.Namespace) -> None:
    """Per size: both walls, the sweep's phases; then fixed and per-trial costs two ways."""
    sizes = sorted(med)
    print(f"{args.tokens} tokens per trial, one at a time, {args.threads} torch thread(s) on both "
          f"sides; median of {args.repeats} pair(s) per size"
          + ("; the sweeps join a running Ray" if args.running_ray else ""))
    print(f"{'trials':>6} {'plain s':>8} {'sweep s':>8} {'ratio':>6}  "
          f"{'s/trial plain':>13} {'sweep':>6} {'(between trials)':>16}")
    for n in sizes:
        m = med[n]
        print(f"{n:>6} {m['plain']:8.1f} {m['sweep']:8.1f} {m['sweep'] / m['plain']:6.2f}  "
              f"{m['plain_period']:13.3f} {m['sweep_period']:6.3f} {m['sweep_gap']:16.3f}")
    print("sweep start-up and wind-down, s: " + "  ".join(f"{n} trials" for n in sizes))
    for key, label in PHASES.items():
        print(f"  {label:<42}" + "".join(f"{med[n][key]:10.2f}" for n in sizes))
    print(f"  the sweep's driver imported torch: {any(med[n]['torch_in_driver'] for n in sizes)}")
    evaluations = evaluations_per_trial(args.tokens)
    for n in sizes:
        m = med[n]
        fixed = (m["sweep_startup"] + m["sweep_winddown"]
                 - m["plain_startup"] - m["plain_winddown"])
        per_trial = m["sweep_period"] - m["plain_period"]
        print(f"from timestamps, {n} trials: fixed cost per sweep {fixed:6.2f} s, overhead per "
              f"trial {per_trial:6.3f} s: {m['sweep_gap']:.3f} s between trials, "
              f"{(per_trial - m['sweep_gap']) / evaluations * 1e3:.0f} ms in each of its "
              f"{evaluations} evaluations (a report; these trials are too short to checkpoint)")
    (plain_slope, plain_fixed), (sweep_slope, sweep_fixed) = (
        np.polyfit(sizes, [med[n][side] for n in sizes], 1) for side in ("plain", "sweep"))
    print(f"fit over sizes: plain {plain_fixed:5.1f} s + N x {plain_slope:.3f} s, "
          f"sweep {sweep_fixed:5.1f} s + N x {sweep_slope:.3f} s")
    print(f"  fixed cost per sweep {sweep_fixed - plain_fixed:6.2f} s (target <= 6), "
          f"overhead per trial {sweep_slope - plain_slope:6.3f} s (target <= 0.2)")
    if args.fresh_workers:
        for n in sizes:
            m = med[n]
            print(f"a new worker per trial, {n} trials: {m['fresh']:.1f} s vs {m['sweep']:.1f} s "
                  f"warm (warm/fresh x{m['sweep'] / m['fresh']:.2f}); per trial "
                  f"{m['fresh_period']:.3f} s vs {m['sweep_period']:.3f} s")


if __name__ == "__main__":
    main()
