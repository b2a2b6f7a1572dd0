"""Whole-model vs regional compilation on CPU: compile seconds and steady throughput.

For each shape, two fresh processes (each with an empty Inductor cache and one compile
thread, so the compile's CPU time is the process's and its compiler children's): one
compiles the whole training step as one graph (`torch.compile` of the model with its loss),
the other compiles region by region as the loop does (`shapesweep.trainers.compiled`: each
block, once per distinct shape, and the readout with its loss). Each reports the first
step's CPU seconds less a steady step's (the compile), and the steady tokens per CPU-second
over the steps after it. The shapes (issue 36): a 2-layer conventional model, a 12-layer
hourglass of k 8, the 113M baseline (vocab 100,352) and a 24-layer ><former; the small ones
train steps of `--tokens` (default 2,048 in sequences of 128, the `-small` sweeps' step). At
256 tokens a step (4 x 64, this benchmark's first setting) a step is a few ms and each
compiled region's fixed cost per call is a visible share of it.

CPU time (process + children) is what a shared machine disturbs least; the ratios, not the
seconds, are the figures to compare across machines.

    .venv/bin/python benchmarks/bench_compile.py [--shapes NAME ...] [--steps N] [--tokens N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
}


def cpu_seconds() -> float:
    """This process's and its waited-for children's CPU time (Inductor's compiler runs)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def child(shape: str, how: str, steps: int, tokens: int) -> None:
    """One measurement, in this (fresh) process; prints one JSON line."""
    import torch
    from shapesweep.search_spaces.configs import make_config
    from shapesweep.trainers.compiled import CompiledStep
    from shapesweep.trainers.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = make_config(SHAPES[shape])
    model = build_model(config)
    seq, batch = (128, 2) if config.vocab_size > 1000 else (128, tokens // 128)
    x = torch.randint(0, config.vocab_size, (batch, seq))
    y = torch.randint(0, config.vocab_size, (batch, seq))
    if how == "whole":
        step = torch.compile(model, dynamic=False)
    else:
        step = CompiledStep(model, model)
    times = []
    for _ in range(steps + 1):
        start = cpu_seconds()
        objective, _ = step(x, y, 1e-5)
        objective.backward()
        times.append(cpu_seconds() - start)
        model.zero_grad(set_to_none=True)
    steady = sorted(times[1:])[len(times[1:]) // 2]
    print(json.dumps({"compile_s": times[0] - steady, "tokens_per_s": batch * seq / steady}))


def measure(shape: str, how: str, steps: int, tokens: int) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="bench-compile-"),
           "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONPATH": os.path.dirname(__file__)}
    out = subprocess.run([sys.executable, __file__, "--child", shape, how, str(steps), str(tokens)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=6, help="steady steps after the first")
    parser.add_argument("--tokens", type=int, default=2048,
                        help="tokens per step of the small models, in sequences of 128 (default "
                             "2048: the -small sweeps' step; the 113M trains 2 x 128)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, how, steps, tokens = args.child
        child(shape, how, int(steps), int(tokens))
        return
    first = None
    for shape in args.shapes:
        started = time.perf_counter()
        whole, regional = (measure(shape, how, args.steps, args.tokens) for how in ("whole", "regional"))
        first = first or regional
        print(f"{shape}: compile whole {whole['compile_s']:.1f} s, regional "
              f"{regional['compile_s']:.1f} s (x{regional['compile_s'] / first['compile_s']:.2f} "
              f"the first shape's regional); steady tokens/s whole {whole['tokens_per_s']:,.0f}, "
              f"regional {regional['tokens_per_s']:,.0f} "
              f"(regional/whole {regional['tokens_per_s'] / whole['tokens_per_s']:.3f}); "
              f"{time.perf_counter() - started:.0f} s wall", flush=True)


if __name__ == "__main__":
    main()
