"""Are the demo's per-trial losses bit-identical under two checkouts? (issue 54's check)

Runs the demo's sweep (`run demo-quick --scheduler fifo`, through Ray, as `make demo` does)
once under each checkout, each in a fresh process tree that imports shapesweep from its own
checkout (PYTHONPATH, which Ray's workers inherit, comes before the editable install), into
its own results root, then compares every trial's losses and learning curve, read from the
two stores with pyarrow alone.

    git worktree add ../old COMMIT
    python benchmarks/demo_identity.py ../old [--space demo-quick] [--keep DIR]
    python benchmarks/demo_identity.py --stores THIS_ROOT OTHER_ROOT

Prints one JSON line per trial that differs and a last line with the verdict; exit 1 when
any trial differs or is missing on one side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parents[1]
COMPARED = ("val_loss", "best_val_loss", "train_loss_tail")  # per trial
CURVE = ("step", "tokens", "train_loss", "val_loss")  # per reported step

CHILD = """
import sys
from shapesweep.sweep.cli.main import main
import shapesweep.search_spaces.space as space
assert space.__file__.startswith(sys.argv[1]), space.__file__
sys.exit(main(["run", sys.argv[2], "--root", sys.argv[3], "--scheduler", "fifo",
               "--max-concurrent", "2"]))
"""


def sweep(checkout: Path, space: str, root: Path) -> None:
    """The demo's sweep under `checkout`, into `root`."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "RAY_ADDRESS": ""}
    subprocess.run([sys.executable, "-c", CHILD, str(checkout), space, str(root)], env=env,
                   check=True, cwd=tempfile.gettempdir())


def table(root: Path, kind: str) -> list[dict]:
    """Every row of one kind (`trials` or `curves`) that the store under `root` holds."""
    rows: list[dict] = []
    for path in sorted(root.rglob("*.parquet")):
        names = pq.read_schema(path).names
        if kind == "trials" and "best_val_loss" in names:
            rows += pq.read_table(path, columns=["trial_id", "key", "seed", "tuned_json",
                                                   *COMPARED]).to_pylist()
        elif kind == "curves" and "elapsed_s" in names and "best_val_loss" not in names:
            rows += pq.read_table(path, columns=["trial_id", *CURVE]).to_pylist()
    return rows


def losses(root: Path) -> dict[tuple, dict]:
    """(candidate key, seed, tuned values) -> its final losses and its curve: trial ids
    differ between runs, and an lr-choosing trial shares its key and seed with the others."""
    trials = table(root, "trials")
    names = {row["trial_id"]: (row["key"], row["seed"], row["tuned_json"]) for row in trials}
    out = {names[row["trial_id"]]: {"final": [row[f] for f in COMPARED], "curve": []}
           for row in trials}
    for row in table(root, "curves"):
        if row["trial_id"] in names:
            out[names[row["trial_id"]]]["curve"].append([row[f] for f in CURVE])
    for value in out.values():
        value["curve"].sort()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, nargs="?", help="the other checkout (a git worktree)")
    parser.add_argument("--stores", type=Path, nargs=2, metavar=("THIS", "OTHER"),
                        help="compare two results roots already written (a run resumed after "
                        "an interruption included) instead of running the sweeps")
    parser.add_argument("--space", default="demo-quick", help="the built-in space (default demo-quick)")
    parser.add_argument("--keep", type=Path, help="keep both stores under this folder")
    args = parser.parse_args()
    if args.stores:
        this, other = (losses(root) for root in args.stores)
    elif args.other is None:
        parser.error("give the other checkout, or --stores THIS OTHER")
    else:
        with tempfile.TemporaryDirectory() as scratch:
            base = args.keep or Path(scratch)
            sweep(HERE, args.space, base / "this")
            sweep(args.other.resolve(), args.space, base / "other")
            this, other = losses(base / "this"), losses(base / "other")
    differ = [key for key in sorted(set(this) | set(other)) if this.get(key) != other.get(key)]
    for key in differ:
        print(json.dumps({"trial": list(key), "this": (this.get(key) or {}).get("final"),
                          "other": (other.get(key) or {}).get("final")}))
    print(json.dumps({"space": args.space, "trials": len(this), "other_trials": len(other),
                      "curve_points": sum(len(v["curve"]) for v in this.values()),
                      "differ": len(differ), "bit_identical": not differ and bool(this)}))
    sys.exit(1 if differ or not this else 0)


if __name__ == "__main__":
    main()
