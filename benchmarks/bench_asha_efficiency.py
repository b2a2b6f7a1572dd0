"""ASHA search efficiency on a tiny depth U-curve: what fraction of the grid's training
tokens ASHA needs to find the grid's best candidate (within seed noise).

    .venv/bin/python -m benchmarks.bench_asha_efficiency [--tokens 16384]

The grid runs every candidate to its full budget with two seeds (FIFO); seed noise is the
mean |seed0 - seed1| gap of the final val_loss. ASHA then runs the same candidates (seed 0)
and its pick, the best completed trial, counts as found when its grid loss is within that
noise of the grid's best. Tokens are compared for seed 0 on both sides.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml


def ucurve_space(tokens: int) -> dict:
    """Depths 1..8 of a conventional LM (d_h = 4 d_model) at one parameter budget."""
    return {
        "name": "bench-ucurve",
        "family": "conventional",
        "budget": {"non_embedding_params": 100_000, "tolerance": 0.12},
        "fixed": {"n_heads": 2, "vocab_size": 256, "activation": "gelu"},
        "search": {"n_layers": [1, 2, 3, 4, 5, 6, 8], "ffn_ratio": [4]},
        "solve": "d_model",
        "train": {"tokens": tokens, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
                  "eval_tokens": 4096},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--reduction-factor", type=float, default=3)
    args = parser.parse_args()

    from shapesweep.results.store import load_trials
    from shapesweep.sweep.cli import main as shapesweep

    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.yaml"
        space_path.write_text(yaml.safe_dump(ucurve_space(args.tokens)))
        root = str(Path(tmp) / "sweeps")
        common = ["--root", root, "--max-concurrent", "2", "--no-progress"]
        assert shapesweep(["run", str(space_path), "--name", "grid", "--scheduler", "fifo",
                           "--seeds", "2", *common]) == 0
        assert shapesweep(["run", str(space_path), "--name", "asha", "--scheduler", "asha",
                           "--grace-tokens", str(args.tokens // 9),
                           "--reduction-factor", str(args.reduction_factor), *common]) == 0
        grid = load_trials(root, ["grid"])
        asha = load_trials(root, ["asha"])

    by_seed = grid.pivot_table(index="key", columns="seed", values="val_loss")
    noise = float((by_seed[0] - by_seed[1]).abs().mean())
    mean_loss = by_seed.mean(axis=1)
    best_key = mean_loss.idxmin()
    done = asha[asha["status"] == "completed"].sort_values("val_loss")
    pick = done.iloc[0]["key"]
    grid_tokens = float(grid[grid["seed"] == 0]["tokens"].sum())
    asha_tokens = float(asha["tokens"].fillna(0).sum())
    found = mean_loss[pick] <= mean_loss[best_key] + noise
    print(f"candidates: {len(by_seed)}, budget {args.tokens} tokens each; seed noise {noise:.4f}")
    print(f"grid best : {best_key} val_loss {mean_loss[best_key]:.4f} (mean of 2 seeds)")
    print(f"ASHA pick : {pick} grid val_loss {mean_loss[pick]:.4f} -> "
          f"{'found (within noise)' if found else 'MISSED'}")
    print(f"statuses  : {asha['status'].value_counts().to_dict()}")
    print(f"tokens    : ASHA {asha_tokens:.0f} / grid {grid_tokens:.0f} = "
          f"{asha_tokens / grid_tokens:.2f} of the grid's training tokens")


if __name__ == "__main__":
    main()
