"""ASHA against the full grid on 27 candidates whose learning curves cross: the share of the
grid's training tokens and of its wall time ASHA takes, and whether it keeps the grid's best.

    .venv/bin/python -m benchmarks.bench_asha_efficiency [--quick] [--seeds 3] [--repeats 1] [--wsd]

The space: 9 depths of a conventional LM at one parameter budget (d_model solved) x 3
learning rates (`tune:`), so 27 (depth, lr) candidates; shallow-wide models and high rates
lead early, deeper ones and lower rates can overtake them (the grid's Kendall tau between
the ranking at its first evaluation and the final one says how much). Both sweeps train the
same trials (every candidate x seed, 2 at a time) in fresh `shapesweep run` processes, side
by side (order alternated between repeats): the grid to the full budget (FIFO), ASHA with
rungs at 1/9 and 1/3 of it (reduction factor 3), the noise-aware ASHA
(`shapesweep.sweep.search.paired_asha`). `--wsd`: both train under `decay: wsd`, so ASHA judges
cooled rung losses, and its token share counts its cooldowns. ASHA's pick, its best completed candidate
by mean final val_loss, counts as found when it is the grid's best or within noise of it:
the paired 95% interval over seeds of their grid losses (`results.stats.paired_difference`)
holds zero.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

DEPTHS = [1, 2, 3, 4, 5, 6, 8, 10, 16]
LRS = [1.0e-3, 3.0e-3, 1.0e-2]


def crossing_space(tokens: int, wsd: bool = False) -> dict:
    """27 candidates: DEPTHS (d_model solved for 100k non-embedding parameters) x LRS."""
    space = {
        "name": "bench-asha",
        "family": "conventional",
        "budget": {"non_embedding_params": 100_000, "tolerance": 0.12},
        "fixed": {"n_heads": 2, "vocab_size": 256, "activation": "gelu"},
        "search": {"n_layers": DEPTHS, "ffn_ratio": [4]},
        "solve": "d_model",
        "train": {"tokens": tokens, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
                  "eval_tokens": 2048, "eval_every": max(1, tokens // 512 // 4)},
        "tune": {"lr": LRS},
    }
    if wsd:
        space["train"]["decay"] = "wsd"
    return space


def run(space: Path, root: str, name: str, seeds: int, *options: str) -> float:
    """`shapesweep run` in a fresh process, 2 trials at a time; its wall seconds."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space),
                    "--root", root, "--name", name, "--seeds", str(seeds),
                    "--max-concurrent", "2", "--no-progress", *options],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def by_candidate(trials):
    """Final val_loss of completed trials, indexed by (key, lr), one column per seed."""
    from shapesweep.results.stats import canonical_tuned_column

    done = trials[trials["status"] == "completed"]
    done = done.assign(tuned=canonical_tuned_column(done["tuned_json"]))
    return done.pivot_table(index=["key", "tuned"], columns="seed", values="val_loss")


def crossing_tau(grid, curves) -> tuple[float, int]:
    """Kendall tau between the grid's (key, lr) ranking at its first evaluation and the
    final one (1: no curve crosses), and that evaluation's tokens."""
    from scipy.stats import kendalltau

    from shapesweep.results.stats import canonical_tuned_column

    first = int(curves["tokens"].min())
    early = curves[curves["tokens"] == first].merge(grid[["trial_id", "key", "tuned_json"]],
                                                    on="trial_id")
    early = early.assign(tuned=canonical_tuned_column(early["tuned_json"]))
    early = early.groupby(["key", "tuned"])["val_loss"].mean()
    final = by_candidate(grid).mean(axis=1)
    return float(kendalltau(early.reindex(final.index), final).statistic), first


def compare(root: str, grid_name: str, asha_name: str) -> dict:
    """Token share, the grid's best, ASHA's pick and the paired verdict between them."""
    from shapesweep.results.stats import paired_difference
    from shapesweep.results.store import load_curves, load_trials

    grid, asha = load_trials(root, [grid_name]), load_trials(root, [asha_name])
    grid_losses, asha_losses = by_candidate(grid), by_candidate(asha)
    best = grid_losses.mean(axis=1).idxmin()
    pick = asha_losses.mean(axis=1).idxmin()
    verdict = paired_difference(grid_losses.loc[pick], grid_losses.loc[best])
    tau, first = crossing_tau(grid, load_curves(root, [grid_name]))
    shapes = grid.groupby("key")[["n_layers", "d_model"]].first()
    name = {key: f"L={row.n_layers} d_model={row.d_model}" for key, row in shapes.iterrows()}
    trained = asha["tokens"].fillna(0).sum() + asha["cooldown_tokens"].fillna(0).sum()
    return {
        "tokens": float(trained) / float(grid["tokens"].sum()),
        "best_name": f"{name[best[0]]} {best[1]}", "pick_name": f"{name[pick[0]]} {pick[1]}",
        "statuses": asha["status"].value_counts().to_dict(), "best": best, "pick": pick,
        "best_loss": grid_losses.loc[best].mean(), "pick_loss": grid_losses.loc[pick].mean(),
        "delta": verdict, "found": pick == best or verdict["verdict"] == "within noise",
        "best_survived": best in asha_losses.index, "tau": tau, "first_eval": first,
        "candidates": len(grid_losses),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=32768, help="each trial's budget")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1, help="grid/ASHA pairs (median wall)")
    parser.add_argument("--quick", action="store_true", help="8,192 tokens, 2 seeds")
    parser.add_argument("--wsd", action="store_true", help="decay: wsd, cooled rung losses")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.seeds = 8192, 2

    walls: dict[str, list[float]] = {"grid": [], "asha": []}
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "space.yaml"
        space.write_text(yaml.safe_dump(crossing_space(args.tokens, args.wsd)))
        root = str(Path(tmp) / "sweeps")
        sides = {"grid": ["--scheduler", "fifo"],
                 "asha": ["--scheduler", "asha", "--grace-tokens", str(args.tokens // 9),
                          "--reduction-factor", "3"]}
        for repeat in range(args.repeats):
            for side in ("grid", "asha")[:: -1 if repeat % 2 else 1]:
                walls[side].append(run(space, root, f"{side}-{repeat}", args.seeds, *sides[side]))
        result = compare(root, "grid-0", "asha-0")

    grid_s, asha_s = (statistics.median(walls[side]) for side in ("grid", "asha"))
    delta = result["delta"]
    low, high = (math.nan if delta[k] is None else delta[k] for k in ("ci_low", "ci_high"))
    print(f"{result['candidates']} candidates (depth x lr) x {args.seeds} seeds, {args.tokens} "
          f"tokens each, 2 at a time; ASHA rungs at {args.tokens // 9} tokens x 3^i")
    print(f"curves cross: Kendall tau between the grid's ranking at {result['first_eval']} tokens "
          f"and the final one {result['tau']:.2f} (1 = no crossing)")
    print(f"grid best : {result['best_name']} val_loss {result['best_loss']:.4f} (mean of seeds)")
    print(f"ASHA pick : {result['pick_name']} grid val_loss {result['pick_loss']:.4f}, "
          f"pick - best {delta['delta']:+.4f} [{low:+.4f}, {high:+.4f}] -> "
          f"{'found' if result['found'] else 'MISSED'} "
          f"({'the same candidate' if result['pick'] == result['best'] else delta['verdict']})")
    print(f"grid best completed under ASHA: {result['best_survived']}; "
          f"ASHA statuses {result['statuses']}")
    print(f"tokens    : {result['tokens']:.2f} of the grid's (ASHA's cooldowns included)")
    print(f"wall time : ASHA {asha_s:.1f} s / grid {grid_s:.1f} s = {asha_s / grid_s:.2f} "
          f"(median of {args.repeats}; target <= 0.5)")


if __name__ == "__main__":
    main()
