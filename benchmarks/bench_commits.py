"""One trial's speed under two checkouts of shapesweep, side by side: is a slowdown the code's?

Trains `demo-quick`'s baseline (200 steps of 1,024 tokens, one torch thread, the built-in
corpus, lr 3e-3) in a fresh process per run, alternating the two checkouts in ABBA order
for `--rounds` rounds, and prints each run's training tokens/s (the loop's own clock),
the median of the per-round ratios, and whether both reached the same validation loss (the
same arithmetic). Load on the machine moves both sides alike, round by round.

The other checkout is a git worktree (`git worktree add ../old COMMIT`); each child
process imports shapesweep from its checkout by rewriting the editable install's path
mapping (setuptools' `__editable__..._finder`, as `make setup` installs it) before the
first import, so no second environment is built.

    python benchmarks/bench_commits.py ../old [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = """
import importlib, json, sys, time
root, installed = sys.argv[1], sys.argv[2]
finder = next(m for n, m in list(sys.modules.items()) if n.startswith("__editable___shapesweep"))
for name, path in list(finder.MAPPING.items()):
    finder.MAPPING[name] = path.replace(installed, root)
for name, paths in list(finder.NAMESPACES.items()):
    finder.NAMESPACES[name] = [p.replace(installed, root) for p in paths]
import torch
torch.set_num_threads(1)
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space
from shapesweep.trainers import loop
assert loop.__file__.startswith(root), loop.__file__
space = load_space(root + "/search_spaces/builtin/demo-quick.yaml")
base = next(c for c in plan(space).candidates if c.variant == "baseline")
result = loop.train(base.config, space.train_for({"lr": 3e-3} if space.tune else None, 0, base))
print(json.dumps({"tokens_per_s": result.tokens_per_s, "val_loss": result.val_loss}))
"""


def run(root: Path) -> dict:
    """One trial in a fresh process importing shapesweep from `root`."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(HERE)], capture_output=True,
                         text=True, check=True, cwd="/tmp").stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=3, help="ABBA rounds (4 runs each)")
    args = parser.parse_args()
    other = args.other.resolve()
    ratios, losses = [], set()
    for round_ in range(args.rounds):
        runs = {"this": [], "other": []}
        for side in ("this", "other", "other", "this"):
            result = run(HERE if side == "this" else other)
            runs[side].append(result["tokens_per_s"])
            losses.add((side, result["val_loss"]))
        ratio = statistics.mean(runs["this"]) / statistics.mean(runs["other"])
        ratios.append(ratio)
        print(json.dumps({"round": round_, "this_tokens_per_s": runs["this"],
                          "other_tokens_per_s": runs["other"], "this_over_other": round(ratio, 3)}),
              flush=True)
    same = len({loss for _, loss in losses}) == 1
    print(json.dumps({"this": str(HERE), "other": str(other), "rounds": args.rounds,
                      "median_this_over_other": round(statistics.median(ratios), 3),
                      "same_val_loss": same}))


if __name__ == "__main__":
    main()
