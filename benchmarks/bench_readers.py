"""How long `shapesweep status NAME` and `shapesweep dashboard NAME` take on one sweep of
many trials, as fragments (a driver that never compacts), compacted mid-run (what a running
driver leaves) and compacted, side by side.

Run: .venv/bin/python benchmarks/bench_readers.py [--trials 4000] [--repeats 2] [--root DIR]

The store holds `--trials` schema-valid synthetic trials (`tests/synthetic.py`), one fragment
set each, written through `shapesweep.results.store.write_trial` under ROOT/fragments. A copy
under ROOT/mid-run is compacted with the last `ResultsWriter.compact_every - 1` trials left
out, then given them back as fragments: the most a driver compacting every that many rows
leaves loose. A copy under ROOT/compacted is merged whole. All are written once and reused.
Each command runs in a fresh process (imports included, as a user waits for it); the best of
`--repeats`.
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


def make_stores(root: str, trials: int) -> tuple[str, str, str]:
    """(fragments root, mid-run root, compacted root), written when missing or short of trials."""
    from shapesweep.results.store import compact, list_sweeps
    from shapesweep.sweep.driver.runner import ResultsWriter
    from tests.synthetic import write_synthetic

    fragments, mid_run, compacted = (os.path.join(root, name) for name in ("fragments", "mid-run", "compacted"))
    folder = Path(fragments, SWEEP, "trials")
    if SWEEP not in list_sweeps(fragments) or len(list(folder.glob("part-*.parquet"))) != trials:
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        write_synthetic(fragments, SWEEP, trials, families=("conventional", "hourglass"), budgets=(113e6,))
        print(f"wrote {trials} trials as fragments in {time.perf_counter() - start:.0f} s")
    if SWEEP not in list_sweeps(mid_run):
        shutil.copytree(fragments, mid_run)
        loose = sorted(Path(mid_run, SWEEP, "trials").glob("part-*.parquet"))[-(ResultsWriter.compact_every - 1):]
        aside = Path(root, "aside")
        for table in ("trials", "curves"):  # the newest rows land after the last compaction
            (aside / table).mkdir(parents=True)
            for path in loose:
                os.replace(Path(mid_run, SWEEP, table, path.name), aside / table / path.name)
        compact(mid_run, SWEEP, grace_s=0)
        for table in ("trials", "curves"):
            for path in (aside / table).iterdir():
                os.replace(path, Path(mid_run, SWEEP, table, path.name))
        shutil.rmtree(aside)
    if SWEEP not in list_sweeps(compacted):
        shutil.copytree(fragments, compacted)
        compact(compacted, SWEEP, grace_s=0)
    return fragments, mid_run, compacted


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
    print(f"{'command':<12}{'fragments':>12}{'mid-run':>12}{'compacted':>12}")
    for name, command in commands.items():
        loose, mid_run, merged = (timed(command(root), args.repeats) for root in stores)
        print(f"{name:<12}{loose:>10.2f} s{mid_run:>10.2f} s{merged:>10.2f} s")


if __name__ == "__main__":
    main()
