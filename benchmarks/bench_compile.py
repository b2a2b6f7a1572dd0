"""Whole-model vs regional compilation on CPU: compile seconds and steady throughput.

For each shape, three fresh processes. Two measure the compile, each with an empty Inductor
cache and one compile thread, so the compile's CPU time is the process's and its compiler
children's: one compiles the whole training step as one graph (`torch.compile` of the model
with its loss), the other region by region as the loop does (`shapesweep.trainers.compiled`:
each block, once per distinct shape, and the readout with its loss); each reports its first
step's CPU seconds less a steady step's. The third measures the steady throughput of both side
by side: it holds both compiled models (same init, the two caches merged so nothing compiles
again) and times their steps alternately (ABBA), so a drift of the machine's speed falls on
both alike; it reports the median over pairs of regional/whole and the pairs' 10th-90th
percentiles. Timed one after another in separate processes, the same shape's steady rate moved
by up to 18% between runs on this 2-core machine, more than the effect measured.

The shapes (issue 36): a 2-layer conventional model, a 12-layer hourglass of k 8, the 113M
baseline (vocab 100,352) and a 24-layer ><former; the small ones train steps of `--tokens`
(default 2,048 in sequences of 128, the `-small` sweeps' step).

CPU time (process + children) is what a shared machine disturbs least; the ratios, not the
seconds, are the figures to compare across machines.

    .venv/bin/python benchmarks/bench_compile.py [--shapes NAME ...] [--steps N] [--tokens N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = {
    "conventional 2-layer 64": dict(family="conventional", d_model=64, n_layers=2, n_heads=4,
                                    d_h=256, vocab_size=256),
    "hourglass 12-layer k 8": dict(family="hourglass", d_model=64, n_layers=12, n_heads=4,
                                   d_h=32, k=8, vocab_size=256),
    "><former 24-layer bottleneck": dict(family="variable_width", d_model=64, n_layers=24,
                                         n_heads=1, d_h=128, shape="bottleneck", alpha=0.5,
                                         vocab_size=256),
    "113M baseline": dict(family="conventional", d_model=768, n_layers=12, n_heads=12, d_h=3072,
                          vocab_size=100352, tie_embeddings=False),
    "113M hourglass k 8": dict(family="hourglass", d_model=768, n_layers=12, n_heads=12, d_h=384,
                               k=8, vocab_size=100352, tie_embeddings=False),
}
GPU_BATCH = (8, 2048)  # bench_gpu's micro-batch: 16,384 tokens
GPU_SHAPES = ("113M hourglass k 8",)  # bench_gpu's `regional` item; too slow to compile on CPU


def cpu_seconds() -> float:
    """This process's and its waited-for children's CPU time (Inductor's compiler runs)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _model_and_batch(shape: str, tokens: int, device: str):
    import torch
    from shapesweep.search_spaces.configs import make_config
    from shapesweep.trainers.models import build_model

    torch.manual_seed(0)
    config = make_config(SHAPES[shape])
    model = build_model(config)
    if device == "cuda":
        batch, seq = GPU_BATCH
    else:
        seq, batch = (128, 2) if config.vocab_size > 1000 else (128, tokens // 128)
    generator = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, config.vocab_size, (batch, seq), generator=generator).to(device)
            for _ in "xy")
    return model.to(device), x, y


def _compiled(how: str, model):
    import torch
    from shapesweep.trainers.compiled import CompiledStep

    return torch.compile(model, dynamic=False) if how == "whole" else CompiledStep(model, model)


def _step(step, model, x, y) -> float:
    """One training step's seconds: CPU seconds on CPU, wall seconds to the GPU's last kernel
    under bf16 autocast on CUDA."""
    import torch

    if not x.is_cuda:
        start = cpu_seconds()
        objective, _ = step(x, y, 1e-5)
        objective.backward()
        model.zero_grad(set_to_none=True)
        return cpu_seconds() - start
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        objective, _ = step(x, y, 1e-5)
    objective.backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def child(shape: str, how: str, steps: int, tokens: int, device: str = "cpu") -> None:
    """One measurement, in this (fresh) process; prints one JSON line. `how`: `whole` or
    `regional` (the compile), or `both` (steady throughput, side by side)."""
    import torch

    torch.set_num_threads(1) if device == "cpu" else torch.set_float32_matmul_precision("high")
    if how != "both":
        model, x, y = _model_and_batch(shape, tokens, device)
        step = _compiled(how, model)
        times = [_step(step, model, x, y) for _ in range(steps + 1)]
        steady = statistics.median(times[1:])
        print(json.dumps({"compile_s": times[0] - steady, "tokens_per_s": x.numel() / steady}))
        return
    # regional first: CompiledStep resets dynamo, which would drop the whole model's graph
    runs = {how: (_compiled(how, model), model, x, y)
            for how, (model, x, y) in ((h, _model_and_batch(shape, tokens, device))
                                      for h in ("regional", "whole"))}
    for _ in range(2):  # compile (from the merged caches) and warm up
        for run in runs.values():
            _step(*run)
    ratios, seconds = [], {"whole": [], "regional": []}
    for pair in range(steps):
        order = ("whole", "regional") if pair % 2 == 0 else ("regional", "whole")
        took = {how: _step(*runs[how]) for how in order}
        for how, value in took.items():
            seconds[how].append(value)
        ratios.append(took["whole"] / took["regional"])  # regional/whole throughput
    tokens_done = runs["whole"][2].numel()
    deciles = statistics.quantiles(ratios, n=10)
    print(json.dumps({"ratio": statistics.median(ratios), "low": deciles[0], "high": deciles[-1],
                      "whole_tokens_per_s": tokens_done / statistics.median(seconds["whole"]),
                      "regional_tokens_per_s": tokens_done / statistics.median(seconds["regional"])}))


def measure(shape: str, how: str, steps: int, tokens: int, cache: str, device: str) -> dict:
    path = os.pathsep.join(filter(None, [os.path.dirname(__file__), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": path}
    if device == "cpu":  # the compile's CPU time is then the process's and its children's
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    out = subprocess.run([sys.executable, __file__, "--child", shape, how, str(steps), str(tokens),
                          device], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{shape} {how}: " + " | ".join(out.stderr.strip().splitlines()[-3:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(shape: str, steps: int, tokens: int, device: str = "cpu") -> tuple[dict, dict, dict]:
    """(whole, regional, both) for one shape: each compile from an empty cache, then the
    side-by-side throughput from the two caches merged. On CUDA the seconds are wall seconds
    (bench_gpu's `regional` item)."""
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        caches = {how: os.path.join(tmp, how) for how in ("whole", "regional", "both")}
        whole, regional = (measure(shape, how, steps, tokens, caches[how], device)
                           for how in ("whole", "regional"))
        for how in ("whole", "regional"):
            shutil.copytree(caches[how], caches["both"], dirs_exist_ok=True)
        both = measure(shape, "both", steps, tokens, caches["both"], device)
    return whole, regional, both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=[s for s in SHAPES if s not in GPU_SHAPES],
                        choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=20,
                        help="steady steps after the first (compile), and ABBA pairs side by side")
    parser.add_argument("--tokens", type=int, default=2048,
                        help="tokens per step of the small models, in sequences of 128 (default "
                             "2048: the -small sweeps' step; the 113M trains 2 x 128)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, how, steps, tokens, device = args.child
        child(shape, how, int(steps), int(tokens), device)
        return
    first = None
    for shape in args.shapes:
        started = time.perf_counter()
        whole, regional, both = compare(shape, args.steps, args.tokens)
        first = first or regional
        print(f"{shape}: compile whole {whole['compile_s']:.1f} s, regional "
              f"{regional['compile_s']:.1f} s (x{regional['compile_s'] / first['compile_s']:.2f} "
              f"the first shape's regional); steady tokens/s side by side: whole "
              f"{both['whole_tokens_per_s']:,.0f}, regional {both['regional_tokens_per_s']:,.0f}, "
              f"regional/whole {both['ratio']:.3f} (median of {args.steps} pairs; 10-90%: "
              f"{both['low']:.3f}-{both['high']:.3f}); {time.perf_counter() - started:.0f} s wall",
              flush=True)


if __name__ == "__main__":
    main()
