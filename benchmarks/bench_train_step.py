"""Training-step benchmarks, each a ratio measured side by side in one run.

1. Loop overhead: `shapesweep.trainers.loop.train` vs a minimal plain-PyTorch loop (same model, same
   init, same batches, AdamW, no schedule/clipping/accumulation/NaN check) on CPU.
   Target: tokens/s ratio >= 0.95.
2. Hourglass k=4 vs conventional at matched non-embedding parameters (hourglass-ffn): the
   hourglass step time relative to the conventional one.
3. `--vocab-proxy`: a vocab-100K small LM, the loop with z-loss and clipping over the plain
   loop, eager and compiled (the CPU twin of the GPU's loss-in-the-graph figure).
4. On CUDA only: MFU of hourglass-ffn's 113M conventional and hourglass shapes in bf16 with
   torch.compile (PaLM accounting from `account`; dense bf16 peak from PEAK_TFLOPS).
   `bench_gpu.py` measures more on a GPU (the 500M shapes, memory, the plain-loop ratio).

Throughput is timed after warm-up (and compilation): for the loop, between two of its
evaluation callbacks. On CPU the clock is process CPU time with one torch thread, which a
busy shared machine disturbs far less than wall time; on CUDA it is wall time.

    .venv/bin/python benchmarks/bench_train_step.py [--quick] [--threads N] [--vocab-proxy]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.compile_policy import peak_flops
from shapesweep.trainers.loop import autocast_dtype, make_task, train
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure


def synchronize(device: str) -> None:
    """Wait for queued CUDA work so a clock reading covers it (nothing to wait for on CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def ours_tokens_per_s(config, recipe: TrainConfig, warmup: int, measured: int,
                      device: str = "cpu", clock=time.process_time,
                      results: list | None = None) -> float:
    """Tokens/s of `train()` between its evaluation callback after `warmup` steps (compilation
    done) and its last one. Evaluations run on a one-sequence val set: a <1% handicap.
    `results` (a list) gets the run's TrainResult."""
    marks: list[tuple[float, int]] = []
    recipe = recipe.model_copy(update={"steps": warmup + measured, "tokens": None,
                                       "eval_every": warmup, "eval_tokens": recipe.seq_len})
    result = train(config, recipe, callback=lambda m: marks.append((clock(), m["tokens"])),
                   device=device)
    if results is not None:
        results.append(result)
    (t0, n0), (t1, n1) = marks[0], marks[-1]
    return (n1 - n0) / (t1 - t0)


def plain_tokens_per_s(config, recipe: TrainConfig, warmup: int, measured: int,
                       device: str = "cpu", clock=time.process_time) -> float:
    """The minimal nanoGPT-style loop on the same batches and init, timed after `warmup` steps.
    It gets what the loop gets: the recipe's autocast, with `recipe.compile` torch.compile,
    and on CUDA fused AdamW and pinned non-blocking copies."""
    cuda = device == "cuda"
    dtype = autocast_dtype(recipe, torch.device(device))
    task, n_seq, tokens_per_step, _ = make_task(config, recipe, None, None)
    torch.manual_seed(recipe.seed)
    model = build_model(config)
    configure(model, config, recipe)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay,
                                  betas=(recipe.beta1, recipe.beta2), fused=cuda or None)
    forward = torch.compile(model) if recipe.compile else model
    for step in range(warmup + measured):
        if step == warmup:
            synchronize(device)
            start = clock()
        x, y = (t.pin_memory().to(device, non_blocking=True) if cuda else t
                for t in task.train_batch(step, n_seq))
        with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            logits = forward(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return measured * tokens_per_step / (clock() - start)


def matched_hourglass(conventional, k: int = 4):
    """The hourglass (same d_model, L, heads) whose non-embedding params match `conventional`."""
    target = account(conventional).params_non_embedding
    shape = conventional.model_dump(exclude={"family", "d_h"})
    try:
        from shapesweep.search_spaces.solver import solve_point
        from shapesweep.search_spaces.space import parse_space

        space = parse_space({
            "name": "bench-matched", "family": "hourglass",
            "budget": {"non_embedding_params": target, "tolerance": 0.01},
            "fixed": {key: shape[key] for key in ("d_model", "n_layers", "n_heads", "vocab_size")},
            "search": {"k": [k]}, "solve": "d_h", "train": {"seq_len": 128}})
        candidate = solve_point(space, {"k": k})
        if candidate is not None:
            return candidate.config, "solver"
    except ImportError:
        pass
    best = min(range(1, 4 * conventional.d_model), key=lambda d_h: abs(
        account(make_config({**shape, "family": "hourglass", "k": k, "d_h": d_h})).params_non_embedding
        - target))
    return make_config({**shape, "family": "hourglass", "k": k, "d_h": best}), "by hand"


def paired_ratio(a: Callable[[], float], b: Callable[[], float], repeats: int):
    """Median and spread of a()/b() over adjacent pairs, alternating the order (ABBA...) so
    load that drifts on a shared machine hits both sides alike. Also the median a and b."""
    ratios, values_a, values_b = [], [], []
    for i in range(repeats):
        if i % 2:
            vb, va = b(), a()
        else:
            va, vb = a(), b()
        ratios.append(va / vb)
        values_a.append(va)
        values_b.append(vb)
    return (statistics.median(ratios), min(ratios), max(ratios),
            statistics.median(values_a), statistics.median(values_b))


def cpu_benchmarks(quick: bool) -> list[tuple[str, str, str]]:
    warmup, measured, repeats = (2, 4, 4) if quick else (4, 8, 8)
    recipe = TrainConfig(seq_len=128, batch_tokens=2048, lr=3e-3, eval_tokens=256, steps=1)
    conventional = make_config(dict(family="conventional", d_model=128, n_layers=4, n_heads=4,
                                    d_h=512))
    rows = []
    ratio, low, high, ours, plain = paired_ratio(
        lambda: ours_tokens_per_s(conventional, recipe, warmup, measured),
        lambda: plain_tokens_per_s(conventional, recipe, warmup, measured), repeats)
    rows.append(("loop vs plain PyTorch (CPU, conv 128x4)",
                 f"{ours:,.0f} vs {plain:,.0f} tok/s",
                 f"{ratio:.3f} [{low:.2f}-{high:.2f}] (target >= 0.95)"))

    hourglass, how = matched_hourglass(conventional)
    p_conv = account(conventional).params_non_embedding
    p_hg = account(hourglass).params_non_embedding
    ratio, low, high, _, _ = paired_ratio(  # conventional tok/s over hourglass tok/s = step-time ratio
        lambda: ours_tokens_per_s(conventional, recipe, warmup, measured),
        lambda: ours_tokens_per_s(hourglass, recipe, warmup, measured), repeats)
    rows.append((f"hourglass k=4 d_h={hourglass.d_h} vs conventional d_h=512 (CPU, {how})",
                 f"{p_hg:,} vs {p_conv:,} params",
                 f"step time x{ratio:.3f} [{low:.2f}-{high:.2f}], median of {repeats} "
                 "alternated pairs"))
    return rows


def vocab_proxy(quick: bool, compiled: bool) -> list[tuple[str, str, str]]:
    """The z-loss's cost at a 100K vocabulary on CPU (issue 36's proxy of the GPU's 0.68x):
    the loop with the space's recipe features (z-loss 1e-5, clipping 1.0) over the plain
    loop (no z-loss, no clipping), and over the loop without them, ABBA pairs in one run."""
    warmup, measured, repeats = (1, 2, 2) if quick else (2, 6, 4)
    config = make_config(dict(family="conventional", d_model=64, n_layers=2, n_heads=2, d_h=256,
                              vocab_size=100352, tie_embeddings=False))
    recipe = TrainConfig(seq_len=128, batch_tokens=512, lr=1e-3, eval_tokens=128, steps=1,
                         z_loss=1e-5, grad_clip=1.0, compile=compiled)
    bare = recipe.model_copy(update={"z_loss": 0.0, "grad_clip": 0.0})
    how = "compiled" if compiled else "eager"
    ratio, low, high, ours, plain = paired_ratio(
        lambda: ours_tokens_per_s(config, recipe, warmup, measured),
        lambda: plain_tokens_per_s(config, bare, warmup, measured), repeats)
    rows = [(f"vocab-100K proxy, {how}: loop (z-loss, clip) vs plain",
             f"{ours:,.0f} vs {plain:,.0f} tok/s", f"{ratio:.3f} [{low:.2f}-{high:.2f}] "
             "(target >= 0.97)")]
    ratio, low, high, _, _ = paired_ratio(
        lambda: ours_tokens_per_s(config, recipe, warmup, measured),
        lambda: ours_tokens_per_s(config, bare, warmup, measured), repeats)
    rows.append((f"vocab-100K proxy, {how}: loop with z-loss and clip vs without", "",
                 f"{ratio:.3f} [{low:.2f}-{high:.2f}]"))
    return rows


def cuda_mfu(quick: bool) -> list[tuple[str, str, str]]:
    seq_len = 1024
    recipe = TrainConfig(seq_len=seq_len, batch_tokens=16 * seq_len, micro_batch_size=16,
                         lr=1e-3, eval_tokens=seq_len, compile=True, steps=1)
    shapes = {
        "conventional 113M (768x12, d_h 3072)": dict(family="conventional", d_model=768,
                                                     n_layers=12, n_heads=12, d_h=3072),
        "hourglass 113M (1032x12, k=4, d_h 418)": dict(family="hourglass", d_model=1032,
                                                       n_layers=12, n_heads=12, d_h=418, k=4),
    }
    warmup, measured = (10, 20) if quick else (20, 60)
    rows = []
    for name, fields in shapes.items():
        config = make_config({**fields, "vocab_size": 50304})
        tps = ours_tokens_per_s(config, recipe, warmup, measured, "cuda", time.perf_counter)
        peak = peak_flops(torch.cuda.get_device_name()) or math.nan
        mfu = account(config, seq_len).flops_per_token * tps / peak
        rows.append((f"{name}, bf16+compile, {torch.cuda.get_device_name()}",
                     f"{tps:,.0f} tok/s", f"MFU {mfu:.1%}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 is the most stable on a shared machine)")
    parser.add_argument("--vocab-proxy", action="store_true",
                        help="also the z-loss's cost at a 100K vocabulary, eager and compiled")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = cpu_benchmarks(args.quick)
    if args.vocab_proxy:
        rows += vocab_proxy(args.quick, compiled=False) + vocab_proxy(args.quick, compiled=True)
    if torch.cuda.is_available():
        rows += cuda_mfu(args.quick)
    else:
        rows.append(("MFU of the 113M shapes", "skipped", "no CUDA device"))

    print_rows("bench_train_step", rows)


def print_rows(title: str, rows: list[tuple[str, str, str]]) -> None:
    """A benchmark's (benchmark, measured, ratio) rows as one table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("benchmark", "measured", "ratio"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
