"""Mixture-of-experts step time vs a dense model of equal ACTIVE parameters, side by side.

The dense twin has the MoE's d_model, depth and heads, with d_h solved (through the
solver's `active_params` budget) so its parameters equal the MoE's active ones: the same
matmul FLOPs per token, so the ratio is what routing costs (the router, the sort, gather and
scatter of tokens, the experts' stacked weights, grouped matmuls instead of one matmul; on
CPU each grouped matmul is one matmul per expert).
Both run through `shapesweep.trainers.loop.train`, timed between two evaluation callbacks after
warm-up (CPU: process time on one torch thread; CUDA: wall time, bf16, no compile).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_moe.py [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.bench_train_step import ours_tokens_per_s, paired_ratio, print_rows
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import parse_space


def dense_twin(moe):
    """The dense conventional model with `moe`'s shape whose d_h matches its active params."""
    fixed = moe.model_dump(include={"d_model", "n_layers", "n_heads", "vocab_size"})
    space = parse_space({"name": "bench-moe-twin", "family": "conventional", "fixed": fixed,
                         "budget": {"active_params": account(moe).params_active,
                                    "tolerance": 0.01}, "solve": "d_h"})
    return plan(space).candidates[0].config


def compare(moe, recipe: TrainConfig, warmup: int, measured: int, repeats: int, device: str,
            clock) -> tuple[str, str, str]:
    dense = dense_twin(moe)
    ratio, low, high, dense_tps, moe_tps = paired_ratio(  # dense tok/s over MoE tok/s = step-time ratio
        lambda: ours_tokens_per_s(dense, recipe, warmup, measured, device, clock),
        lambda: ours_tokens_per_s(moe, recipe, warmup, measured, device, clock), repeats)
    name = (f"{moe.n_experts} experts / {moe.n_active_experts} active, d_h {moe.d_h} vs dense "
            f"d_h {dense.d_h} ({moe.d_model}x{moe.n_layers}, {device})")
    acc_moe, acc_dense = account(moe, recipe.seq_len), account(dense, recipe.seq_len)
    measured_text = (f"{acc_moe.params_active:,} vs {acc_dense.params_active:,} active params; "
                     f"{dense_tps:,.0f} vs {moe_tps:,.0f} tok/s")
    return name, measured_text, f"MoE step time x{ratio:.2f} [{low:.2f}-{high:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warmup, measured, repeats = (2, 4, 2) if args.quick else (4, 8, 4)
    moe = make_config(dict(family="conventional", d_model=128, n_layers=4, n_heads=4, d_h=256,
                           n_experts=8, n_active_experts=2))
    recipe = TrainConfig(seq_len=128, batch_tokens=2048, lr=3e-3, eval_tokens=256, steps=1)
    rows = [compare(moe, recipe, warmup, measured, repeats, "cpu", time.process_time)]
    if torch.cuda.is_available():
        big = make_config(dict(family="conventional", d_model=1024, n_layers=8, n_heads=16, d_h=512,
                               n_experts=16, n_active_experts=2, vocab_size=50304))
        gpu = TrainConfig(seq_len=1024, batch_tokens=16 * 1024, lr=1e-3, eval_tokens=1024, steps=1)
        rows.append(compare(big, gpu, 3 * warmup, 3 * measured, repeats, "cuda", time.perf_counter))
    print_rows("bench_moe", rows)


if __name__ == "__main__":
    main()
