"""Orchestration overhead: N fixed-size trials via `shapesweep run` vs the same trainings
back to back in one plain process. Prints seconds of overhead per trial.

    .venv/bin/python -m benchmarks.bench_sweep_overhead [--trials 8] [--tokens 8192]

Both sides train the same candidate documents (same configs, seeds, data) one at a time
(`--max-concurrent 1`, FIFO), so the difference is Ray startup, actor start/reuse,
result plumbing and the Parquet/catalog writes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml


def tiny_space(trials: int, tokens: int) -> dict:
    """`trials` depths of a d_model-32 conventional LM at one parameter budget."""
    return {
        "name": "bench-overhead",
        "family": "conventional",
        "budget": {"non_embedding_params": 41216, "tolerance": 0.05},
        "fixed": {"d_model": 32, "n_heads": 2, "vocab_size": 256, "activation": "swiglu"},
        "search": {"n_layers": list(range(1, trials + 1))},
        "solve": "d_h",
        "train": {"tokens": tokens, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
                  "eval_tokens": 2048},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=8192)
    args = parser.parse_args()

    from shapesweep.search_spaces.configs import TrainConfig, make_config
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space
    from shapesweep.sweep.cli import main as shapesweep
    from shapesweep.sweep.search import trial_spec
    from shapesweep.trainers.loop import train

    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.yaml"
        space_path.write_text(yaml.safe_dump(tiny_space(args.trials, args.tokens)))
        space = load_space(space_path)
        specs = [trial_spec(c, space, 0, None) for c in plan(space).candidates]
        assert len(specs) >= args.trials, f"only {len(specs)} candidates"
        specs = specs[: args.trials]

        start = time.perf_counter()
        for spec in specs:
            doc = spec["document"]
            train(make_config(doc["model"] | {"family": doc["family"]}), TrainConfig(**doc["train"]))
        plain_s = time.perf_counter() - start

        start = time.perf_counter()
        code = shapesweep(["run", str(space_path), "--root", str(Path(tmp) / "sweeps"),
                           "--scheduler", "fifo", "--max-concurrent", "1", "--no-progress"])
        sweep_s = time.perf_counter() - start
        assert code == 0

    n = len(specs)
    print(f"trials: {n} x {args.tokens} tokens (one at a time)")
    print(f"plain loop, back to back : {plain_s:7.1f} s  ({plain_s / n:.2f} s/trial)")
    print(f"shapesweep run (Ray Tune): {sweep_s:7.1f} s  ({sweep_s / n:.2f} s/trial)")
    print(f"overhead                 : {(sweep_s - plain_s) / n:7.2f} s/trial "
          f"(incl. Ray start), ratio {sweep_s / plain_s:.2f}x")


if __name__ == "__main__":
    main()
