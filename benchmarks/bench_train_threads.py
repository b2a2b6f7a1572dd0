"""`shapesweep train` on busy cores: torch's default threads (what `train` did before it took
`--threads`) against its default now (the free cores), side by side in one run.

A load holds some cores the whole time: `busy` (Python busy loops, one per `--load-procs`)
or `train` (a second `shapesweep train` of the same config on torch's default threads, as a
user's other run would). It runs `--warmup` seconds first, so the 1-minute load average that
`train`'s default reads has risen to it. Then the two sides alternate, `--pairs` times, each
a real `shapesweep train CONFIG --steps N --json` process; its tokens/s is the loop's own.

    .venv/bin/python benchmarks/bench_train_threads.py [--load busy|train] [--pairs 3]

Prints each run, the median tokens/s of each side and the paired ratio (new / old) with its
spread. The config is the demo's baseline (64 x 4, d_h 256, muP, 2048-token steps).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

SHAPESWEEP = [sys.executable, "-m", "shapesweep.sweep.cli"]
BUSY = "while True: pass"


def baseline_config(folder: Path) -> Path:
    """The demo space's baseline candidate as a file `train` reads."""
    from shapesweep.search_spaces.solver import candidate_document, plan
    from shapesweep.search_spaces.space import load_space

    space = load_space("demo-ucurve")
    (candidate,) = [c for c in plan(space).candidates if c.variant == "baseline"]
    path = folder / "baseline.yaml"
    path.write_text(yaml.safe_dump(candidate_document(candidate, space.train_for(candidate=candidate))))
    return path


def torch_default_threads() -> int:
    """The threads torch picks on its own in a fresh process (what `train` used before)."""
    code = "import torch; print(torch.get_num_threads())"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env=env).stdout)


@contextmanager
def load(kind: str, procs: int, config: Path, warmup: float):
    """Keep `procs` cores busy (busy loops, or `train` runs one after another) for the block."""
    if kind == "busy":
        command = [sys.executable, "-c", BUSY]
    else:  # a second training on torch's default threads, restarted as it ends
        train = " ".join([*SHAPESWEEP, "train", str(config), "--steps", "100000", "--threads",
                          str(torch_default_threads()), "--json"])
        command = ["bash", "-c", f"while true; do {train} >/dev/null 2>&1; done"]
    running = [subprocess.Popen(command, start_new_session=True) for _ in range(procs)]
    try:
        print(f"load: {procs} x {kind}; {warmup:.0f} s for the load average to rise to it", flush=True)
        time.sleep(warmup)
        yield
    finally:
        for process in running:
            os.killpg(process.pid, 9)
            process.wait()


def timed_train(config: Path, steps: int, threads: int | None) -> dict:
    """One `shapesweep train` process; its JSON summary (tokens_per_s, threads) and wall time."""
    extra = [] if threads is None else ["--threads", str(threads)]
    started = time.monotonic()
    run = subprocess.run([*SHAPESWEEP, "train", str(config), "--steps", str(steps), "--json", *extra],
                         capture_output=True, text=True, check=True)
    summary = json.loads(run.stdout)
    return {"tokens_per_s": summary["tokens_per_s"], "threads": summary.get("threads"),
            "wall_s": time.monotonic() - started, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", choices=("busy", "train"), default="busy")
    parser.add_argument("--load-procs", type=int, default=1, help="cores the load holds (default 1)")
    parser.add_argument("--warmup", type=float, default=75.0, help="seconds of load before measuring")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a `kill` stops the load too

    old_threads = torch_default_threads()
    with tempfile.TemporaryDirectory() as tmp:
        config = baseline_config(Path(tmp))
        print(f"cores {os.cpu_count()}, load average before {os.getloadavg()[0]:.2f}; "
              f"torch's default threads {old_threads}", flush=True)
        pairs = []
        with load(args.load, args.load_procs, config, args.warmup):
            for i in range(args.pairs):
                sides = [("old", old_threads), ("new", None)]
                pair = {}
                for side, threads in sides if i % 2 == 0 else sides[::-1]:  # alternate the order
                    pair[side] = timed_train(config, args.steps, threads)
                    run = pair[side]
                    print(f"pair {i + 1} {side}: {run['threads']} threads, {run['tokens_per_s']:,.0f} "
                          f"tokens/s, {run['wall_s']:.1f} s wall, load average {run['load']:.2f}",
                          flush=True)
                pairs.append(pair)
    ratios = [p["new"]["tokens_per_s"] / p["old"]["tokens_per_s"] for p in pairs]
    old = statistics.median(p["old"]["tokens_per_s"] for p in pairs)
    new = statistics.median(p["new"]["tokens_per_s"] for p in pairs)
    spread = f" (min {min(ratios):.2f}, max {max(ratios):.2f})" if len(ratios) > 1 else ""
    print(f"\nunder {args.load_procs} x {args.load} load, {args.steps} steps, {args.pairs} pairs:")
    print(f"  old (torch's default, {old_threads} threads): median {old:,.0f} tokens/s")
    print(f"  new (train's default, the free cores):  median {new:,.0f} tokens/s")
    print(f"  new / old: median {statistics.median(ratios):.2f}{spread}")


if __name__ == "__main__":
    main()
