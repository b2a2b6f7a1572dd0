"""Four ways to compile a training step on CPU: compile seconds and steady throughput.

- `whole`: `torch.compile` of the model with its loss, every block traced into one graph;
- `regional`: the loop's way (`shapesweep.trainers.compiled.compile_by_block`): each block a
  graph of its own, once per distinct shape, and the readout with its loss;
- `regional:4`: the loop's way with `train.compile_blocks_per_region: 4`: up to 4 consecutive
  alike blocks a region, fewer compiled calls a step for a longer compile;
- `nested`: one graph, each block a nested region (`torch.compiler.nested_compile_region`,
  torch's hierarchical compilation) traced and compiled once per distinct shape: a candidate
  for the loop, measured here before anything relies on it.

For each shape, five fresh processes. Four measure the compile, each with an empty Inductor
cache and one compile thread, so the compile's CPU time is the process's and its compiler
children's; each reports its first step's CPU seconds less a steady step's. The fifth
measures the steady throughput of all four side by side: it holds the four compiled models
(same init, the caches merged so nothing compiles again) and times their steps in turn, the
order reversed every other round, so a drift of the machine's speed falls on all alike; it
reports the median over rounds of each way's throughput over the whole graph's, and the
rounds' 10th-90th percentiles. Timed one after another in separate processes, the same
shape's steady rate moved by up to 18% between runs on this 2-core machine, more than the
effect measured.

The shapes (issue 36): a 2-layer conventional model, a 12-layer hourglass of k 8, the 113M
baseline (vocab 100,352) and a 24-layer ><former; the small ones train steps of `--tokens`
(default 2,048 in sequences of 128, the `-small` sweeps' step).

CPU time (process + children) is what a shared machine disturbs least; the ratios, not the
seconds, are the figures to compare across machines.

    .venv/bin/python benchmarks/bench_compile.py [--shapes NAME ...] [--steps N] [--tokens N]
"""

from __future__ import annotations

import argparse
import functools
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


HOWS = ("whole", "nested", "regional", "regional:4")
# A nested region's cache entries: distinct (block, input shape) pairs, with room to spare.
REUSE_ENTRIES = 256


def _compile(how: str, model) -> None:
    """Compile `model` `how`, in place: the step is then `model(x, targets, z_loss)`."""
    from shapesweep.trainers.compiled import compile_by_block, regions

    if how.startswith("regional"):  # regional:N: up to N alike blocks a region
        compile_by_block(model, int(how.partition(":")[2] or 1), dynamic=False)
        return
    if how == "nested":
        for block in regions(model):
            block.__class__ = _nested(type(block))
    model.compile(dynamic=False)


@functools.cache
def _nested(cls: type) -> type:
    """`cls` with its forward marked as a nested compile region. The mark goes on a subclass
    (only this model's blocks change): on the instance's bound forward, dynamo stamped out the
    first block's weights for every other block (torch 2.13). Dynamo's `eager` debug backend
    cannot run such a region's backward ("fake_mode should be enabled for HOPs"); `aot_eager`
    can. torch 2.11 has no `max_reuse_entries` (and no limit to lift)."""
    import inspect

    import torch

    mark = torch.compiler.nested_compile_region
    limited = "max_reuse_entries" in inspect.signature(mark).parameters
    forward = mark(cls.forward, **({"max_reuse_entries": REUSE_ENTRIES} if limited else {}))
    return type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__})


def _step(model, x, y) -> float:
    """One training step's seconds: CPU seconds on CPU, wall seconds to the GPU's last kernel
    under bf16 autocast on CUDA."""
    import torch

    if not x.is_cuda:
        start = cpu_seconds()
        objective, _ = model(x, y, 1e-5)
        objective.backward()
        model.zero_grad(set_to_none=True)
        return cpu_seconds() - start
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        objective, _ = model(x, y, 1e-5)
    objective.backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def child(shape: str, how: str, steps: int, tokens: int, device: str = "cpu") -> None:
    """One measurement, in this (fresh) process; prints one JSON line. `how`: one of HOWS
    (the compile), or `all` (steady throughput, side by side)."""
    import torch

    torch.set_num_threads(1) if device == "cpu" else torch.set_float32_matmul_precision("high")
    if how != "all":
        model, x, y = _model_and_batch(shape, tokens, device)
        _compile(how, model)
        times = [_step(model, x, y) for _ in range(steps + 1)]
        steady = statistics.median(times[1:])
        print(json.dumps({"compile_s": times[0] - steady, "tokens_per_s": x.numel() / steady}))
        return
    runs = {}
    for how in HOWS:
        model, x, y = _model_and_batch(shape, tokens, device)
        _compile(how, model)
        runs[how] = (model, x, y)
    for _ in range(2):  # compile (from the merged caches) and warm up
        for run in runs.values():
            _step(*run)
    seconds = {how: [] for how in HOWS}
    for turn in range(steps):
        for how in HOWS if turn % 2 == 0 else HOWS[::-1]:
            seconds[how].append(_step(*runs[how]))
    tokens_done = runs["whole"][1].numel()
    out = {}
    for how in HOWS[1:]:  # throughput over the whole graph's, round by round
        ratios = [w / t for w, t in zip(seconds["whole"], seconds[how], strict=True)]
        deciles = statistics.quantiles(ratios, n=10)
        out[how] = {"ratio": statistics.median(ratios), "low": deciles[0], "high": deciles[-1]}
    for how in HOWS:
        out[f"{how}_tokens_per_s"] = tokens_done / statistics.median(seconds[how])
    print(json.dumps(out))


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


def compare(shape: str, steps: int, tokens: int, device: str = "cpu") -> tuple[dict, dict]:
    """({how: compile measurement}, side by side) for one shape: each compile from an empty
    cache, then the side-by-side throughput from the caches merged. On CUDA the seconds are
    wall seconds (bench_gpu's `compile` item)."""
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        caches = {how: os.path.join(tmp, how) for how in (*HOWS, "all")}
        compiles = {how: measure(shape, how, steps, tokens, caches[how], device) for how in HOWS}
        for how in HOWS:
            shutil.copytree(caches[how], caches["all"], dirs_exist_ok=True)
        side = measure(shape, "all", steps, tokens, caches["all"], device)
    return compiles, side


def summary(compiles: dict, side: dict) -> str:
    """One line of `compare`'s figures."""
    seconds = ", ".join(f"{how} {compiles[how]['compile_s']:.1f} s" for how in HOWS)
    steady = ", ".join(f"{how} {side[how]['ratio']:.3f} ({side[how]['low']:.3f}-"
                       f"{side[how]['high']:.3f})" for how in HOWS[1:])
    return (f"compile {seconds}; steady tok/s whole {side['whole_tokens_per_s']:,.0f}, "
            f"over whole's (median, 10-90% of rounds): {steady}")


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
        compiles, side = compare(shape, args.steps, args.tokens)
        first = first or compiles
        growth = ", ".join(f"{how} x{compiles[how]['compile_s'] / first[how]['compile_s']:.2f}"
                           for how in HOWS)
        print(f"{shape}: {summary(compiles, side)}; compile over the first shape's: {growth}; "
              f"{time.perf_counter() - started:.0f} s wall", flush=True)


if __name__ == "__main__":
    main()
