"""Training-step benchmark of the GPU recipe (torch.compile, and bf16 autocast on CUDA) on
the sweep's real shapes: the loop next to a plain loop, and compiled next to eager.

On CUDA, for hourglass-ffn's 113M pair (conventional 768x12 d_h 3072, hourglass k=4 1032x12
d_h 418; vocab 50304, seq 2048) and the 500M ><former pair of `vformer-shapes-500m`
(constant width and its first bottleneck candidate, at the space's seq_len): tokens/s, MFU,
peak memory, the ratio of `shapesweep.trainers.loop.train` to the plain PyTorch loop of
`bench_train_step` on the same model, set up and compiled the same way, and the ratio of the
loop compiled to the loop eager. Each pair alternates (ABBA), several repeats, medians.
MFU follows PaLM: `account(config).flops_per_token` x tokens/s / the device's dense bf16
peak (`PEAK_TFLOPS` by device name, or --peak-tflops). Each row also says what torch.compile
did in the loop's runs (`compiled`, graph breaks, recompiles).

On CPU (`--device cpu`, the default without CUDA) the same measurement runs on a small LM
(conventional 128x4, d_h 512, seq 128; one torch thread, process CPU time, Inductor's C++
kernels, no autocast): the figures that can be had without a GPU, and the CUDA path's twin.

`--sweep` also runs one real `shapesweep run` of a few short trials (two shapes, two seeds
each, one at a time) and prints per trial: start-up (Ray, actor, data), the first
interval's compile time, and steady throughput; a repeated shape should compile faster
(the shared Inductor cache, `shapesweep.trainers.compiled.compile_cache`).

`--quick` runs tiny shapes and few steps (its test traces them with dynamo alone:
TORCH_COMPILE_OVERRIDE_BACKENDS=">=0:eager"). On a GPU machine, all of it is one command,
`.venv/bin/python benchmarks/bench_gpu.py --sweep` (docs/gpu.md).

    .venv/bin/python benchmarks/bench_gpu.py [--quick] [--device cuda|cpu] [--peak-tflops T]
                                             [--repeats N] [--sweep]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from bench_sweep_overhead import DEPTHS, overhead_space
from bench_train_step import ours_tokens_per_s, paired_ratio, peak_flops, plain_tokens_per_s
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, make_config

SEQ_113M = 2048
TOKENS_PER_MICRO_BATCH = 16384  # 8 x 2048 or 4 x 4096: fits an 80 GB GPU at 500M, vocab 100k


def vformer_pair(space_name: str):
    """(constant, first bottleneck) candidates of a built-in ><former space, and its seq_len."""
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    space = load_space(space_name)
    candidates = plan(space).candidates
    pick = {shape: next(c.config for c in candidates if c.config.shape == shape)
            for shape in ("constant", "bottleneck")}
    return pick, space.train.seq_len


def shapes(quick: bool, device: str) -> list[tuple[str, object, int]]:
    """(name, config, seq_len) of each benchmarked shape; tiny stand-ins with --quick, one
    small LM on CPU."""
    if device == "cpu" and not quick:
        return [("conventional 128x4 d_h 512", make_config(dict(
            family="conventional", d_model=128, n_layers=4, n_heads=4, d_h=512)), 128)]
    if quick:
        lm = dict(vocab_size=256, n_heads=2)
        pair = [("conventional tiny", make_config(dict(family="conventional", d_model=32,
                                                       n_layers=2, d_h=128, **lm)), 64),
                ("hourglass tiny k=2", make_config(dict(family="hourglass", d_model=32, n_layers=2,
                                                        d_h=16, k=2, **lm)), 64)]
        vformer, seq = vformer_pair("vformer-shapes-small")
    else:
        lm = dict(vocab_size=50304, n_heads=12, n_layers=12)
        pair = [("conventional 113M 768x12 d_h 3072",
                 make_config(dict(family="conventional", d_model=768, d_h=3072, **lm)), SEQ_113M),
                ("hourglass 113M 1032x12 k=4 d_h 418",
                 make_config(dict(family="hourglass", d_model=1032, d_h=418, k=4, **lm)), SEQ_113M)]
        vformer, seq = vformer_pair("vformer-shapes-500m")
    scale = "tiny" if quick else "500M"
    return pair + [(f"><former {scale} {shape}", config, seq) for shape, config in vformer.items()]


def measure(config, seq_len: int, device: str, quick: bool, repeats: int, peak: float | None):
    """One shape, compiled: loop and plain tokens/s (median of alternating repeats), their
    ratio, MFU, memory; then the loop compiled vs eager."""
    cuda = device == "cuda"
    micro = max(1, (256 if quick else TOKENS_PER_MICRO_BATCH if cuda else 2048) // seq_len)
    recipe = TrainConfig(seq_len=seq_len, batch_tokens=micro * seq_len, micro_batch_size=micro,
                         lr=1e-3, eval_tokens=seq_len, compile=True, steps=1)
    warmup, measured = (2, 4) if quick else (10, 30)
    clock = time.perf_counter if cuda else time.process_time
    memory = {"loop": [], "plain": []}
    compiled_runs = []

    def peak_memory(side, run):
        def wrapped():
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            value = run()
            if cuda:
                memory[side].append(torch.cuda.max_memory_allocated())
            return value
        return wrapped

    def loop(recipe):
        return lambda: ours_tokens_per_s(config, recipe, warmup, measured, device, clock,
                                         compiled_runs if recipe.compile else None)

    ratio, low, high, ours, plain = paired_ratio(
        peak_memory("loop", loop(recipe)),
        peak_memory("plain", lambda: plain_tokens_per_s(config, recipe, warmup, measured, device,
                                                        clock)), repeats)
    speedup, speedup_low, speedup_high, _, eager = paired_ratio(
        loop(recipe), loop(recipe.model_copy(update={"compile": False})), repeats)
    flops = account(config, seq_len).flops_per_token
    did = {(r.compiled, r.graph_breaks, r.recompiles, r.autocast_dtype) for r in compiled_runs}
    return {"tokens/s": f"{ours:,.0f}", "plain tokens/s": f"{plain:,.0f}",
            "ratio": f"{ratio:.3f} [{low:.2f}-{high:.2f}]",
            "eager tokens/s": f"{eager:,.0f}",
            "compiled/eager": f"{speedup:.3f} [{speedup_low:.2f}-{speedup_high:.2f}]",
            "MFU": f"{flops * ours / peak:.1%}" if peak else "n/a (no peak for this device)",
            "peak memory": (f"{max(memory['loop']) / 2**30:.1f} GiB (plain "
                            f"{max(memory['plain']) / 2**30:.1f})") if cuda else "n/a (CPU)",
            "micro-batch": f"{micro} x {seq_len}",
            "compile": "; ".join(f"compiled {c}, {b} graph breaks, {r} recompiles, autocast {a}"
                                 for c, b, r, a in sorted(did, key=str))}


def tiny_space(tokens: int) -> dict:
    """Two depths of the overhead benchmark's d_model-32 LM at its one parameter budget."""
    space = overhead_space(DEPTHS, tokens)
    space["search"] = {"n_layers": [1, 2], "n_heads": [2]}
    return space


def sweep_space(quick: bool, steps: int) -> dict:
    """Two shapes at one budget, short trials, evaluated every `steps // 4` steps."""
    if quick:
        space = tiny_space(4096)
        space["train"]["eval_every"] = 2
        return space
    space = tiny_space(steps * TOKENS_PER_MICRO_BATCH)
    conventional = make_config(dict(family="conventional", d_model=768, n_layers=12, n_heads=12,
                                    d_h=3072, vocab_size=50304))
    space.update(name="bench-gpu-sweep", budget={
        "non_embedding_params": account(conventional).params_non_embedding, "tolerance": 0.05},
        fixed={"d_model": 768, "n_heads": 12, "vocab_size": 50304}, search={"n_layers": [11, 12]})
    space["train"].update(seq_len=SEQ_113M, batch_tokens=TOKENS_PER_MICRO_BATCH,
                          micro_batch_size=TOKENS_PER_MICRO_BATCH // SEQ_113M, lr=1e-3,
                          eval_tokens=SEQ_113M, eval_every=max(1, steps // 4), compile=True)
    return space


def time_sweep(quick: bool, device: str) -> list[str]:
    """Run one real sweep (FIFO, one trial at a time) and read the timings back from its store."""
    import yaml
    from shapesweep.results.store import load_curves, load_trials
    from shapesweep.sweep.cli import main as shapesweep

    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.yaml"
        space_path.write_text(yaml.safe_dump(sweep_space(quick, 40)))
        root = str(Path(tmp) / "sweeps")
        start = time.perf_counter()
        code = shapesweep(["run", str(space_path), "--root", root, "--scheduler", "fifo",
                           "--max-concurrent", "1", "--seeds", "0,1", "--no-progress",
                           "--gpus-per-trial", "1" if device == "cuda" else "0"])
        wall = time.perf_counter() - start
        if code != 0:
            raise SystemExit(f"shapesweep run failed (exit {code})")
        trials = load_trials(root).sort_values("finished_at")
        curves = load_curves(root)
    lines = [f"sweep: {len(trials)} trials in {wall:.1f} s wall, start-up "
             f"{(wall - trials.wall_time_s.sum()) / len(trials):.1f} s/trial (Ray, actors, data)"]
    for trial in trials.itertuples():
        curve = curves[curves.trial_id == trial.trial_id].sort_values("step")
        first, last = curve.iloc[0], curve.iloc[-1]
        steady = (last.tokens - first.tokens) / max(last.elapsed_s - first.elapsed_s, 1e-9)
        compile_s = max(0.0, first.elapsed_s - first.tokens / steady)
        lines.append(f"  trial n_layers={trial.n_layers} seed={trial.seed}: first interval "
                     f"{first.elapsed_s:.1f} s (compile ~{compile_s:.1f} s), steady "
                     f"{steady:,.0f} tok/s, trial {trial.wall_time_s:.1f} s; compiled "
                     f"{trial.compiled}, {trial.graph_breaks} graph breaks, {trial.recompiles} "
                     f"recompiles, autocast {trial.autocast_dtype}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few steps (CPU test)")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="dense bf16 peak of this device (default: PEAK_TFLOPS by its name)")
    parser.add_argument("--repeats", type=int, default=None, help="alternating repeats per shape")
    parser.add_argument("--sweep", action="store_true", help="also time one real shapesweep run")
    args = parser.parse_args()
    if args.device == "cuda":
        torch.set_float32_matmul_precision("high")  # as the loop does; the plain loop too
        name = torch.cuda.get_device_name()
    else:
        torch.set_num_threads(1)
        name = "CPU"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (
        peak_flops(name) if args.device == "cuda" else None)
    repeats = args.repeats or (2 if args.quick else 4)
    print(f"device: {name}, peak {peak / 1e12:.0f} TFLOP/s" if peak else f"device: {name}")
    for shape, config, seq_len in shapes(args.quick, args.device):
        row = measure(config, seq_len, args.device, args.quick, repeats, peak)
        print(f"{shape}: " + ", ".join(f"{key} {value}" for key, value in row.items()))
    if args.sweep:
        for line in time_sweep(args.quick, args.device):
            print(line)


if __name__ == "__main__":
    main()
