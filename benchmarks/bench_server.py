"""Latency of the live dashboard under many browsers while a sweep writes: two servers side by side.

Run: .venv/bin/python benchmarks/bench_server.py [--before main] [--clients 100 500]
     [--seconds 20] [--think-s 0] [--landing 2] [--trials 3000] [--code DIR ...] [--root DIR]

The store holds `--trials` schema-valid synthetic trials (`tests/synthetic.py`), one fragment
pair each, as a sweep in flight has them (not compacted); it is written once under --root and
reused. Each server runs as `shapesweep serve` in its own process from a source tree: `--before
REF` exports that git revision (`git archive`, nothing in the repository changes) and times it
first, then this checkout (or each `--code DIR`, in order). For each server and each client
count, a writer process lands `--landing` trials per second through the store's own writer
(`write_trial`), and N clients, spread over --client-procs processes, each act as a browser
tab: one keep-alive connection, the page and plotly.js once, then for `--seconds` a loop of
`/api/version`, `/api/dashboard` (gzip accepted, as browsers send), `/api/dashboard` again with
`If-None-Match` (a browser's cache revalidating; 304 where the server gives ETags),
`/api/config` of a random trial, and `--think-s` between loops (0: back to back, the worst
case). Each request is timed from sending to its last byte; one unanswered within --timeout-s
counts as slower than every answered one; an answer other than 200 or 304 is counted apart. Printed per endpoint: count, p50, p95, max.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))  # the synthetic sweeps: tests/synthetic.py

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
LOOP = ("/api/version", "/api/dashboard", "/api/dashboard (If-None-Match)", "/api/config")
ONCE = ("/", "/plotly.min.js")


def make_store(root: str, trials: int) -> list[str]:
    """The sweep's trial ids, after writing it when the store lacks it."""
    from shapesweep.results.store import list_sweeps, load_trials
    from tests.synthetic import write_synthetic

    remove_landed(root)
    have = load_trials(root, [SWEEP]) if SWEEP in list_sweeps(root) else None
    if have is None or len(have) < trials:
        start = time.perf_counter()
        write_synthetic(root, SWEEP, trials, families=("conventional", "hourglass"), budgets=(113e6,))
        print(f"wrote {trials} trials to {root}/{SWEEP} in {time.perf_counter() - start:.0f} s")
        have = load_trials(root, [SWEEP])
    return sorted(have["trial_id"])


def remove_landed(root: str) -> None:
    for landed in Path(root, SWEEP).glob("*/part-landed-*"):  # a writer's, from an earlier server's turn
        landed.unlink()


def export(ref: str) -> str:
    """The source tree of git revision `ref`, in a temporary folder."""
    folder = tempfile.mkdtemp(prefix="bench-server-")
    archive = subprocess.run(["git", "-C", str(CHECKOUT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def start_server(code: str, root: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": code, "PYTHONUNBUFFERED": "1"}
    loaded = subprocess.run([sys.executable, "-c", "import shapesweep.dashboards.server as s; print(s.__file__)"],
                            cwd=code, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert loaded.startswith(os.path.realpath(code)), f"{code}'s server was not the one imported: {loaded}"
    server = subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", "serve", "--root", root, "--port", "0"],
                              cwd=code, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = server.stdout.readline()
    match = re.search(r"http://[^:/]+:(\d+)/", line)
    if not match:
        server.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    return server, int(match.group(1))


def stop(process: subprocess.Popen) -> None:
    """The process and any it started (the server's builder)."""
    try:
        os.killpg(process.pid, 9)
    except ProcessLookupError:
        pass
    process.wait()


class Tab:
    """One browser tab: a keep-alive connection (reopened when the server closes it)."""

    def __init__(self, port: int, timeout_s: float):
        self.port, self.etag = port, None
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)

    def get(self, path: str, revalidate: bool = False) -> float:
        headers = {"Host": f"127.0.0.1:{self.port}", "Accept-Encoding": "gzip"}
        if revalidate and self.etag:
            headers["If-None-Match"] = self.etag
        start = time.perf_counter()
        try:
            self.connection.request("GET", path, headers=headers)
            response = self.connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()
            return float("inf")
        if response.status not in (200, 304):
            return float("nan")
        if path == "/api/dashboard":
            self.etag = response.getheader("ETag") or self.etag
        return time.perf_counter() - start


def run_clients(port: int, clients: int, seconds: float, think_s: float, timeout_s: float,
                trial_ids: list[str], seed: int) -> dict[str, list[float]]:
    """`clients` tabs on threads of this process: each endpoint's latencies."""
    times = {name: [] for name in (*ONCE, *LOOP)}
    start_at = threading.Barrier(clients)

    def tab(number: int) -> None:
        rng = random.Random(seed * 100_000 + number)
        client = Tab(port, timeout_s)
        start_at.wait()
        for path in ONCE:
            times[path].append(client.get(path))
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            times["/api/version"].append(client.get("/api/version"))
            times["/api/dashboard"].append(client.get("/api/dashboard"))
            times["/api/dashboard (If-None-Match)"].append(client.get("/api/dashboard", revalidate=True))
            times["/api/config"].append(client.get(f"/api/config?sweep={SWEEP}&trial_id={rng.choice(trial_ids)}"))
            time.sleep(think_s * rng.uniform(0.5, 1.5))
        client.connection.close()

    threads = [threading.Thread(target=tab, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def _client_process(args: tuple) -> dict[str, list[float]]:
    return run_clients(*args)


def measure(code: str, root: str, trial_ids: list[str], clients: int, args) -> tuple[dict, float]:
    """Each endpoint's latencies under `clients` tabs while the writer lands trials, and the first
    payload's time (the server's cold start)."""
    server, port = start_server(code, root)
    lander = None
    try:
        first = Tab(port, 600).get("/api/dashboard")
        lander = subprocess.Popen([sys.executable, "-c", LANDER, root, str(args.landing), SWEEP],
                                  env={**os.environ, "PYTHONPATH": str(CHECKOUT)}, start_new_session=True)
        procs = min(args.client_procs, clients)
        shares = [clients // procs + (i < clients % procs) for i in range(procs)]
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            parts = pool.map(_client_process, [(port, share, args.seconds, args.think_s, args.timeout_s,
                                                trial_ids, i) for i, share in enumerate(shares)])
    finally:
        if lander is not None:
            stop(lander)
        stop(server)
        remove_landed(root)
    return {name: sum((p[name] for p in parts), []) for name in parts[0]}, first


def row(name: str, latencies: list[float]) -> str:
    values = np.array(latencies)
    failed = int(np.isnan(values).sum())
    values = values[~np.isnan(values)]
    p50, p95, top = np.percentile(values, [50, 95, 100], method="higher") if len(values) else (np.nan,) * 3
    unanswered = int(np.isinf(values).sum())

    def ms(x: float) -> str:
        return "   >timeout" if np.isinf(x) else f"{x * 1000:9.1f}ms"

    return f"    {name:32s} {len(values):7d} {ms(p50)} {ms(p95)} {ms(top)}" + (
        f"  ({unanswered} unanswered)" if unanswered else "") + (f"  ({failed} not 200/304)" if failed else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also time the server of this git revision, first")
    parser.add_argument("--code", action="append", help="source tree whose server to time (default: this checkout)")
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--seconds", type=float, default=20.0, help="each tab's loop runs this long")
    parser.add_argument("--think-s", type=float, default=0.0, help="a tab's mean pause between loops")
    parser.add_argument("--landing", type=float, default=2.0, help="trials the writer lands per second")
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "shapesweep-bench-server"))
    args = parser.parse_args()

    trial_ids = make_store(args.root, args.trials)
    codes = [(f"{args.before} (git archive)", export(args.before))] if args.before else []
    codes += [(code, code) for code in args.code or [str(CHECKOUT)]]
    print(f"{len(trial_ids)} trials as fragments, a writer landing {args.landing:g} trials/s, "
          f"tabs looping {args.seconds:g} s with {args.think_s:g} s pauses, load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    try:
        for clients in args.clients:
            for label, code in codes:
                times, first = measure(code, args.root, trial_ids, clients, args)
                print(f"  server {label}, {clients} tabs (first payload {first:.1f} s):")
                print(f"    {'endpoint':32s} {'count':>7s} {'p50':>11s} {'p95':>11s} {'max':>11s}")
                for name, latencies in times.items():
                    print(row(name, latencies))
                sys.stdout.flush()
    finally:
        for label, code in codes:
            if label.endswith("(git archive)"):
                shutil.rmtree(code)


if __name__ == "__main__":
    main()
