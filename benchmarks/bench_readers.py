"""How long `shapesweep status NAME` and `shapesweep dashboard NAME` take on one sweep of
many trials, as fragments (a running or killed driver) and compacted, side by side.

Run: .venv/bin/python benchmarks/bench_readers.py [--trials 4000] [--repeats 2] [--root DIR]

The store holds `--trials` schema-valid synthetic trials (`tests/synthetic.py`), one fragment
set each, written through `shapesweep.results.store.write_trial` under ROOT/fragments; a copy
under ROOT/compacted is merged by `compact`. Both are written once and reused. Each command
runs in a fresh process (imports included, as a user waits for it); the best of `--repeats`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the synthetic sweeps: tests/synthetic.py

SWEEP = "bench-readers"


def make_stores(root: str, trials: int) -> tuple[str, str]:
    """(fragments root, compacted root), written when missing or short of trials."""
    from shapesweep.results.store import compact, list_sweeps

    from tests.synthetic import write_synthetic

    fragments, compacted = os.path.join(root, "fragments"), os.path.join(root, "compacted")
    folder = Path(fragments, SWEEP, "trials")
    if SWEEP not in list_sweeps(fragments) or len(list(folder.glob("part-*.parquet"))) != trials:
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        write_synthetic(fragments, SWEEP, trials, families=("conventional", "hourglass"), budgets=(113e6,))
        print(f"wrote {trials} trials as fragments in {time.perf_counter() - start:.0f} s")
    if SWEEP not in list_sweeps(compacted):
        shutil.copytree(fragments, compacted)
        compact(compacted, SWEEP, grace_s=0)
    return fragments, compacted


def timed(command: list[str], repeats: int) -> float:
    """Best wall time of `shapesweep COMMAND` in a fresh process."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", *command], check=True,
                       stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "shapesweep-bench-readers"))
    args = parser.parse_args()

    stores = make_stores(args.root, args.trials)
    out = os.path.join(args.root, "report.html")
    commands = {"status": lambda root: ["status", SWEEP, "--root", root],
                "dashboard": lambda root: ["dashboard", SWEEP, "--root", root, "--out", out]}
    print(f"{args.trials} trials of one sweep under {args.root} (best of {args.repeats}, fresh processes)")
    print(f"{'command':<12}{'fragments':>12}{'compacted':>12}{'ratio':>8}")
    for name, command in commands.items():
        loose, merged = (timed(command(root), args.repeats) for root in stores)
        print(f"{name:<12}{loose:>10.2f} s{merged:>10.2f} s{loose / merged:>8.2f}")


if __name__ == "__main__":
    main()
