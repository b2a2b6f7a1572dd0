"""Latency of the live dashboard's `/api/config` under a burst, on a store of a sweep in flight.

Run: .venv/bin/python benchmarks/bench_server.py [--trials 3000] [--requests 200] [--threads 8]
     [--code DIR] [--landing N] [--budget-s 120] [--root DIR]

The store holds `--trials` schema-valid synthetic trials (`tests/synthetic.py`), one
fragment pair each, as a sweep in flight has them (not compacted); it is written once under
--root and reused. `shapesweep serve` runs in its own process from the source tree `--code`
(default: this checkout), so one store and one client time two versions of the server, e.g.
`--code /tmp/main-checkout`. One request is timed first (a cold cache), then `--requests`
requests from `--threads` client threads, each asking for a random trial's config. With
`--landing N`, a writer process lands N new trials per second during the burst. Threads stop
starting requests after `--budget-s`; the answered ones are reported.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the synthetic sweeps: tests/synthetic.py

SWEEP = "bench-live"
LANDER = """
import sys, time
from tests.synthetic import synthetic_sweep
from shapesweep.results.store import write_trial
root, rate, sweep, i = sys.argv[1], float(sys.argv[2]), sys.argv[3], 0
while True:
    for row, curve in synthetic_sweep(sweep, 20, seed=1000 + i):
        row["trial_id"] = f"landed-{i:05d}"
        write_trial(root, sweep, row, [{**c, "trial_id": row["trial_id"]} for c in curve])
        i += 1
        time.sleep(1 / rate)
"""


def make_store(root: str, trials: int) -> list[str]:
    """The sweep's trial ids, after writing it when the store lacks it."""
    from shapesweep.results.store import list_sweeps, load_trials

    from tests.synthetic import write_synthetic

    for landed in Path(root, SWEEP).glob("*/part-landed-*"):  # a previous --landing run's
        landed.unlink()
    have = load_trials(root, [SWEEP]) if SWEEP in list_sweeps(root) else None
    if have is None or len(have) < trials:
        start = time.perf_counter()
        write_synthetic(root, SWEEP, trials, families=("conventional", "hourglass"), budgets=(113e6,))
        print(f"wrote {trials} trials to {root}/{SWEEP} in {time.perf_counter() - start:.0f} s")
        have = load_trials(root, [SWEEP])
    return sorted(have["trial_id"])


def start_server(code: str, root: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": code, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", "serve", "--root", root, "--port", "0"],
                              cwd=code, env=env, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    match = re.search(r"http://[^:/]+:(\d+)/", line)
    if not match:
        server.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    return server, int(match.group(1))


def fetch(port: int, trial_id: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/config?sweep={SWEEP}&trial_id={trial_id}",
                                timeout=600) as response:
        response.read()
    return time.perf_counter() - start


def burst(port: int, trial_ids: list[str], threads: int, budget_s: float) -> tuple[list[float], float]:
    """Latencies of the requests answered before the budget ran out, and the burst's wall time."""
    deadline = time.perf_counter() + budget_s

    def one(trial_id: str) -> float | None:
        return fetch(port, trial_id) if time.perf_counter() < deadline else None

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = [t for t in pool.map(one, trial_ids) if t is not None]
    return latencies, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[1]),
                        help="source tree whose server to time (default: this checkout)")
    parser.add_argument("--landing", type=float, default=0.0, help="new trials per second during the burst")
    parser.add_argument("--budget-s", type=float, default=120.0)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "shapesweep-bench-server"))
    args = parser.parse_args()

    trial_ids = make_store(args.root, args.trials)
    server, port = start_server(args.code, args.root)
    lander = None
    try:
        cold = fetch(port, trial_ids[0])
        if args.landing:
            lander = subprocess.Popen([sys.executable, "-c", LANDER, args.root, str(args.landing), SWEEP],
                                      env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        picks = random.Random(0).choices(trial_ids, k=args.requests)
        latencies, wall = burst(port, picks, args.threads, args.budget_s)
    finally:
        if lander is not None:
            lander.kill()
            lander.wait()
        server.kill()
        server.wait()
    p50, p95 = np.percentile(latencies, [50, 95]) if latencies else (float("nan"),) * 2
    landing = f", {args.landing:g} trials/s landing" if args.landing else ""
    print(f"server from {args.code}: {len(trial_ids)} trials as fragments{landing}")
    print(f"  first request (cold): {cold:.2f} s")
    print(f"  /api/config burst: {len(latencies)}/{args.requests} answered by {args.threads} threads "
          f"in {wall:.1f} s: p50 {p50:.3f} s, p95 {p95:.3f} s, max {max(latencies, default=float('nan')):.3f} s")


if __name__ == "__main__":
    main()
