"""Compiled vs eager under bf16 autocast: is the difference more than seed-to-seed noise?

For one tiny model of each family (conventional, hourglass, ><former with carried widths, a
mixture of experts), the same seed is trained eagerly and under torch.compile (Inductor)
with `train.autocast: bfloat16`, through the public entry point
`shapesweep.trainers.loop.train`, and |compiled - eager| final validation loss is set beside
the standard deviation of the eager final validation loss over `--seeds` seeds (seed 0 is
the compiled one's). bf16 rounds differently in a fused kernel than in eager ops, so the two
trajectories drift apart; a drift well inside the seed spread is rounding, not a bug.

    nice -n 5 .venv/bin/python benchmarks/bench_compile_drift.py [--steps 40] [--seeds 3] [--threads 1]

CPU by default (Inductor's C++ kernels); `--device cuda` on a GPU. Compile time dominates a
CPU run (minutes on a cold Inductor cache, most of it the first call of each shape).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.loop import train
from shapesweep.trainers.machine import cpu_model

LM = dict(d_model=32, n_layers=2, n_heads=2, vocab_size=256)
FAMILIES = {  # tiny models, one per family (tests/test_compile.py's, a little wider)
    "conventional": dict(LM, family="conventional", d_h=64),
    "hourglass": dict(LM, family="hourglass", d_h=16, k=2),
    "><former carry": dict(LM, family="variable_width", n_layers=3, d_h=64, shape="grow",
                           alpha=0.5, resize="carry"),
    "moe": dict(LM, family="conventional", d_h=32, n_experts=4, n_active_experts=2),
}


def recipe(steps: int, seed: int, compiled: bool) -> TrainConfig:
    return TrainConfig(steps=steps, seq_len=64, batch_tokens=1024, lr=3e-3, eval_tokens=4096,
                       eval_every=steps, seed=seed, autocast="bfloat16", compile=compiled)


def measure(name: str, fields: dict, steps: int, seeds: int, device: str) -> dict:
    config = make_config(fields)
    eager = [train(config, recipe(steps, seed, False), device=device).val_loss for seed in range(seeds)]
    start = time.perf_counter()
    result = train(config, recipe(steps, 0, True), device=device)
    assert result.compiled and result.graph_breaks == 0, (name, result.graph_breaks)
    drift = abs(result.val_loss - eager[0])
    spread = statistics.stdev(eager)
    return {"family": name, "eager": eager, "compiled": result.val_loss, "drift": drift,
            "spread": spread, "compile_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3, help="eager seeds for the spread (>= 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.cuda.get_device_name() if args.device == "cuda" else cpu_model()
    print(f"{device}; torch {torch.__version__}; {args.threads} thread(s); {args.steps} steps "
          f"of 1,024 tokens, bf16 autocast; eager seeds 0-{args.seeds - 1}, compiled seed 0")
    print("| family | eager val loss, seed 0 | compiled, seed 0 | abs(compiled - eager) "
          f"| std of {args.seeds} eager seeds | drift / std |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, fields in FAMILIES.items():
        row = measure(name, fields, args.steps, args.seeds, args.device)
        print(f"| {name} | {row['eager'][0]:.4f} | {row['compiled']:.4f} | {row['drift']:.4f} "
              f"| {row['spread']:.4f} | {row['drift'] / row['spread']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
