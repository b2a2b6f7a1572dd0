"""The GPU path measured within a time budget: the sweep's real shapes, most important first.

In priority order, each item started only while the budget leaves room for it, each line
printed (and flushed) as soon as it is measured, so a run cut short still says what it found:

1. the 113M baseline of `hourglass-fixed-attention-113m` (conventional 768x12, d_h 3072, vocab
   100,352, untied) with the space's own recipe (z-loss 1e-5, grad clip 1.0), compiled:
   tokens/s, MFU, peak memory, compile seconds; `shapesweep.trainers.loop.train` over the
   plain compiled loop of `bench_train_step` (ABBA pairs), and compiled over eager;
2. the hourglass k 8 (d_h 384) of the same space: the same figures, one of each;
3. the 500M ><former pair of `vformer-shapes-500m` (constant and first bottleneck);
4. a small, launch-bound shape with CUDA graphs (`compile_mode: reduce-overhead`) over without;
5. a mixture of experts (`vformer-moe-small`'s bottleneck) compiled against eager;
6. `--sweep`: one real `shapesweep run` of two short 113M trials, compile seconds per trial;
   `compile`: the 113M hourglass k 8 compiled whole, as one graph of nested blocks, block by
   block (the loop's way) and 4 alike blocks a region, each from an empty cache (`bench_compile.compare`): compile
   seconds, and steady tokens/s side by side;
   `peaks`: the memory model's step and evaluation peaks, each measured alone, for the packed
   sweep's baseline and hourglass k 5, and the baseline's compiled step with one block a
   region against all its blocks in one;
7. `e2e`: `hourglass-fixed-attention-113m` swept end to end, 4 steps a trial (plan -> run ->
   status -> export, `bench_gpu_sweep.py`): each candidate's predicted step time and peak
   memory against the measured ones;
8. `packed`: three 113M candidates of `hourglass-fixed-attention-113m` (baseline, hourglass
   k 5 and k 10), 40 steps of 65,536 tokens, `micro_batch_size: auto`, packed three to the
   GPU (`--gpus-per-trial 0.33 --max-concurrent 3`): whether every trial completes, with
   each one's micro-batch, predicted and measured peak, OOM retries and compile seconds.

`--items` picks and orders them (default: everything but `sweep`, `e2e` and `packed`, whose
flags `--sweep`, `--e2e` and `--packed` add them at the end).

The figures file: on CUDA, each figure measured (tokens/s, MFU, loop/plain, compiled/eager,
peak memory and first compile of each shape; the CUDA-graphs ratio; the end-to-end sweep's
predicted and measured step and peak) is merged into `trainers/gpu-figures.json`, or the
file `--figures PATH` names (on CPU only then), each with its device, torch build, CUDA
version, command and date. Its format, in `shapesweep.trainers.gpu_figures`:

    {"format": 1, "figures": {"mfu_113m_baseline": {"value": 0.402, "format": ".1%",
        "unit": "MFU", "family": "conventional", "what": "...", "device": "NVIDIA H200",
        "torch": "2.11.0+cu130", "cuda": "13.0", "command": "python benchmarks/bench_gpu.py
        ...", "date": "2026-11-27", "provenance": "measured by bench_gpu.py"}}}

Keys: `{tokens_per_s,mfu,loop_over_plain,compiled_over_eager,peak_memory_gib,
first_compile_s}_{113m_baseline,113m_hourglass_k8,500m_vformer_constant,
500m_vformer_bottleneck}`, `graphs_speedup_run1`, `e2e_*`. README.md, docs/gpu.md and
docs/memory.md quote them (tests/test_gpu_figures.py); after a run,
`python -m shapesweep.trainers.gpu_figures README.md docs/gpu.md docs/memory.md` rewrites
the quoted numbers.

MFU follows PaLM: `account(config).flops_per_token` x tokens/s over the device's dense bf16
peak (`compile_policy.PEAK_TFLOPS` by device name, or --peak-tflops). The micro-batch is
16,384 tokens (8 x 2048, 4 x 4096), as the first H200 measurement (docs/gpu.md). Inductor's
cache is one folder for the whole run (`TORCHINDUCTOR_CACHE_DIR`, default under the shapesweep
cache), so a shape compiled once is not compiled again by a later repeat.

On CPU (`--device cpu`, the default without CUDA) the same items run on tiny stand-ins
(`--quick`) or a small LM: the code path checked, not a figure to quote.

    python benchmarks/bench_gpu.py [--budget-s 480] [--quick] [--device cuda|cpu]
                                   [--peak-tflops T] [--repeats N] [--sweep] [--e2e]
                                   [--packed] [--items packed,baseline,graphs,moe,...]
                                   [--figures PATH]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from bench_gpu_sweep import TOKENS_PER_MICRO_BATCH, e2e_sweep, packed_sweep, time_sweep
from bench_train_step import ours_tokens_per_s, paired_ratio, plain_tokens_per_s

from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import gpu_figures
from shapesweep.trainers.compile_policy import peak_flops


class Budget:
    """Seconds left of the run's budget; an item starts only if its estimate fits."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def allows(self, estimate_s: float) -> bool:
        return self.left() >= estimate_s


def say(line: str) -> None:
    print(line, flush=True)


class Recorder:
    """The figures this run measured, each with its device, torch, CUDA, command and date,
    merged into the figures file (`gpu_figures.record`) as each is measured."""

    def __init__(self, path: Path | None, device: str):
        self.path, self.device = path, device

    def __call__(self, key: str, value: float, fmt: str, unit: str, what: str,
                 **extra: str) -> None:
        if self.path is None:
            return
        gpu_figures.record({key: dict(
            value=value, format=fmt, unit=unit, what=what, **extra, device=self.device,
            torch=torch.__version__, cuda=torch.version.cuda,
            command=" ".join(["python benchmarks/bench_gpu.py", *sys.argv[1:]]),
            date=datetime.datetime.now(datetime.UTC).date().isoformat(),
            provenance="measured by bench_gpu.py")}, self.path)


def space_candidates(name: str) -> tuple[list, TrainConfig]:
    """A built-in space's candidates and its recipe (the baseline's)."""
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    space = load_space(name)
    candidates = plan(space).candidates
    return candidates, space.train_for(candidate=candidates[0])


def shapes(quick: bool, device: str) -> list[tuple[str, str, object, TrainConfig, float]]:
    """(name, figure key, config, recipe, estimated seconds on the device) of each measured
    shape, in priority order; tiny stand-ins with --quick, one small LM on CPU."""
    if quick or device == "cpu":
        lm = dict(vocab_size=256, n_heads=2)
        recipe = TrainConfig(seq_len=64, batch_tokens=256, micro_batch_size=2, lr=1e-3,
                             z_loss=1e-5, grad_clip=1.0, steps=1)
        shapes = [("conventional tiny", dict(family="conventional", d_model=32, n_layers=2,
                                             d_h=128, **lm)),
                  ("hourglass tiny k=2", dict(family="hourglass", d_model=32, n_layers=2,
                                              d_h=16, k=2, **lm))]
        vformer, _ = space_candidates("vformer-shapes-small")
        out = [(name, f"tiny_{i}", make_config(fields), recipe, 60.0)
               for i, (name, fields) in enumerate(shapes)]
        return out + [(f"><former tiny {c.config.shape}", f"tiny_vformer_{c.config.shape}", c.config,
                       recipe.model_copy(update={"seq_len": 64}), 60.0)
                      for c in _pair(vformer)]
    fixed, recipe = space_candidates("hourglass-fixed-attention-113m")
    baseline = next(c.config for c in fixed if c.config.family == "conventional")
    k8 = next(c.config for c in fixed if getattr(c.config, "k", None) == 8)
    micro = TOKENS_PER_MICRO_BATCH // recipe.seq_len
    recipe_113m = recipe.model_copy(update={"batch_tokens": TOKENS_PER_MICRO_BATCH,
                                            "micro_batch_size": micro, "compile": True})
    vformer, vrecipe = space_candidates("vformer-shapes-500m")
    recipe_500m = vrecipe.model_copy(update={
        "batch_tokens": TOKENS_PER_MICRO_BATCH, "micro_batch_size":
        TOKENS_PER_MICRO_BATCH // vrecipe.seq_len, "compile": True})
    return [("113M baseline conventional 768x12 d_h 3072", "113m_baseline", baseline,
             recipe_113m, 150.0),
            (f"113M hourglass 768x12 k 8 d_h {k8.d_h}", "113m_hourglass_k8", k8, recipe_113m,
             100.0),
            *((f"500M ><former {c.config.shape}", f"500m_vformer_{c.config.shape}", c.config,
               recipe_500m, 100.0) for c in _pair(vformer))]


def _pair(candidates) -> list:
    """The constant-width candidate and the first bottleneck of a ><former space."""
    return [next(c for c in candidates if c.config.shape == shape)
            for shape in ("constant", "bottleneck")]


def measure(config, recipe: TrainConfig, device: str, quick: bool, repeats: int,
            peak: float | None, full: bool) -> tuple[dict[str, str], dict[str, float]]:
    """One shape, compiled with its recipe: the loop's tokens/s, MFU, memory and compile
    seconds; with `full`, the loop over the plain compiled loop (`repeats` ABBA pairs) and
    compiled over eager, else one plain and one eager run beside it. The printed fields, and
    the figures (name: (value, format, unit))."""
    cuda = device == "cuda"
    warmup, measured = (2, 4) if quick else (8, 30)
    clock = time.perf_counter if cuda else time.process_time
    runs, memory = [], []

    def peak_memory(run: Callable[[], float]) -> Callable[[], float]:
        def wrapped():
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            value = run()
            if cuda:
                memory.append(torch.cuda.max_memory_allocated())
            return value
        return wrapped

    def loop(compile_: bool):
        return lambda: ours_tokens_per_s(config, recipe.model_copy(update={"compile": compile_}),
                                         warmup, measured, device, clock, runs)

    def plain():
        return plain_tokens_per_s(config, recipe, warmup, measured, device, clock)

    if full:
        ratio, low, high, ours, base = paired_ratio(peak_memory(loop(True)), plain, repeats)
        speedup, s_low, s_high, _, eager = paired_ratio(loop(True), loop(False), repeats)
    else:  # one of each
        ours, base, eager = peak_memory(loop(True))(), plain(), loop(False)()
        ratio = low = high = ours / base
        speedup = s_low = s_high = ours / eager
    flops = account(config, recipe.seq_len).flops_per_token
    compiled = [r for r in runs if r.compiled]
    figures = {"tokens_per_s": (ours, ",.0f", "tokens/s"), "loop_over_plain": (ratio, ".3f", "x"),
               "compiled_over_eager": (speedup, ".3f", "x"),
               **({"mfu": (flops * ours / peak, ".1%", "MFU")} if peak else {}),
               **({"peak_memory_gib": (max(memory) / 2**30, ".1f", "GiB")} if memory else {}),
               **({"first_compile_s": (compiled[0].compile_s, ".1f", "s")} if compiled else {})}
    return {"tokens/s": f"{ours:,.0f}", "MFU": f"{flops * ours / peak:.1%}" if peak else "n/a",
            "plain tokens/s": f"{base:,.0f}", "loop/plain": f"{ratio:.3f} [{low:.2f}-{high:.2f}]",
            "eager tokens/s": f"{eager:,.0f}",
            "compiled/eager": f"{speedup:.3f} [{s_low:.2f}-{s_high:.2f}]",
            "peak memory": f"{max(memory) / 2**30:.1f} GiB" if memory else "n/a (CPU)",
            "compile s": ", ".join(f"{r.compile_s:.1f}" for r in compiled),
            "micro-batch": f"{recipe.micro_batch_size} x {recipe.seq_len}",
            "compile": "; ".join(sorted({f"{r.graph_breaks} graph breaks, {r.recompiles} "
                                         f"recompiles, autocast {r.autocast_dtype}"
                                         for r in compiled}))}, figures


def cuda_graphs(device: str, quick: bool, record: Recorder) -> str:
    """A small, launch-bound shape (conventional 256x4, vocab 50304, 8 x 1024 tokens) with
    `compile_mode: reduce-overhead` (CUDA graphs) over `default`, one ABBA pair."""
    config = make_config(dict(family="conventional", d_model=64 if quick else 256, n_layers=4,
                              n_heads=4, d_h=256 if quick else 1024,
                              vocab_size=256 if quick else 50304))
    seq = 64 if quick else 1024
    recipe = TrainConfig(seq_len=seq, batch_tokens=8 * seq, micro_batch_size=8, lr=1e-3,
                         eval_tokens=seq, compile=True, z_loss=1e-5, steps=1)
    warmup, measured = (2, 4) if quick else (10, 60)
    clock = time.perf_counter if device == "cuda" else time.process_time

    def run(mode: str) -> Callable[[], float]:
        return lambda: ours_tokens_per_s(config, recipe.model_copy(update={"compile_mode": mode}),
                                         warmup, measured, device, clock)

    ratio, low, high, graphs, default = paired_ratio(run("reduce-overhead"), run("default"), 2)
    record("graphs_speedup_run1", ratio, ".3f", "x", "CUDA graphs (compile_mode reduce-overhead) "
           "over default, conventional 256x4 d_h 1024 vocab 50,304, 8 x 1024 tokens (item graphs)")
    return (f"{graphs:,.0f} vs {default:,.0f} tok/s, reduce-overhead/default {ratio:.3f} "
            f"[{low:.2f}-{high:.2f}]")


def compile_ways(device: str, quick: bool) -> str:
    """The 113M hourglass k 8 compiled four ways (`bench_compile.compare`): each compile's
    seconds from an empty cache, and steady tokens/s side by side."""
    from bench_compile import compare, summary

    shape = "conventional 2-layer 64" if quick or device != "cuda" else "113M hourglass k 8"
    return f"{shape}: {summary(*compare(shape, 4 if quick else 20, 256, device))}"


def memory_peaks(device: str, quick: bool) -> list[str]:
    """The memory model's two peaks, each measured alone, for the packed sweep's baseline
    (micro-batch 16 x 2048) and hourglass k 5 (8 x 2048): the training step's (3 compiled
    steps evaluated on one sequence) and the held-out evaluation's (one micro-batch through
    `loop.evaluate`, weights only). CUDA's allocator peak above what was allocated before."""
    from types import SimpleNamespace

    from shapesweep.trainers import memory
    from shapesweep.trainers.fitting import PeakMeter
    from shapesweep.trainers.loop import evaluate, train
    from shapesweep.trainers.models import build_model

    cuda = device == "cuda"
    if quick or not cuda:
        rows = [(make_config(dict(family="conventional", d_model=32, n_layers=2, n_heads=2,
                                  d_h=128, vocab_size=256)),
                 TrainConfig(seq_len=64, batch_tokens=256, lr=1e-3, z_loss=1e-5, steps=1), 2)]
    else:
        candidates, recipe = space_candidates("hourglass-fixed-attention-113m")
        recipe = recipe.model_copy(update={"batch_tokens": 16 * recipe.seq_len, "compile": True})
        rows = [(next(c.config for c in candidates if c.config.family == "conventional"), recipe, 16),
                (next(c.config for c in candidates if getattr(c.config, "k", None) == 5), recipe, 8)]

    def peak(run: Callable[[], object]) -> float:
        if not cuda:
            return memory.measured_peak(run)[0]
        with PeakMeter(torch.device(device)) as meter:  # the trials' own meter
            run()
        return meter.peak

    def autocast():
        return torch.autocast(device, dtype=torch.bfloat16, enabled=cuda)

    lines, gib = [], 2**30
    for config, recipe, micro in rows:
        recipe = recipe.model_copy(update={"micro_batch_size": micro, "steps": 3, "tokens": None,
                                           "eval_every": 3, "eval_tokens": recipe.seq_len})
        predicted = memory.estimate(config, recipe, device, micro)
        step = peak(partial(train, config, recipe, device=device))
        model = build_model(config).to(device)
        tokens = torch.randint(0, config.vocab_size, (micro, recipe.seq_len), device=device)
        task = SimpleNamespace(val_x=tokens, val_y=tokens)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        evaluation = peak(partial(evaluate, model, task, micro, device, autocast)) + weights
        del model, task, tokens
        lines.append(f"{config.family} k={getattr(config, 'k', 0)} micro-batch {micro}: step "
                     f"predicted {predicted.step / gib:.1f} GiB, measured {step / gib:.1f} GiB "
                     f"({predicted.step / step - 1:+.1%}); evaluation predicted "
                     f"{(predicted.evaluation + weights) / gib:.1f} GiB, measured "
                     f"{evaluation / gib:.1f} GiB ({(predicted.evaluation + weights) / evaluation - 1:+.1%})")
    config, recipe, micro = rows[0]
    lines.append(region_peaks(config, recipe.model_copy(update={
        "micro_batch_size": micro, "steps": 3, "tokens": None, "eval_every": 3,
        "eval_tokens": recipe.seq_len, "compile": True}), device, peak))
    return lines


def region_peaks(config, recipe, device: str, peak: Callable[[Callable[[], object]], float]) -> str:
    """The compiled step's peak with one block a region and with all the model's alike blocks
    in one region: the memory model was measured with the first (docs/gpu.md)."""
    from shapesweep.trainers.loop import train

    longest = config.n_layers
    one, whole = (peak(partial(train, config, recipe.model_copy(update={"compile_blocks_per_region": n}),
                               device=device)) for n in (1, longest))
    return (f"{config.family} compiled step, one block a region {one / 2**30:.2f} GiB, regions of "
            f"{longest} {whole / 2**30:.2f} GiB ({whole / one - 1:+.1%})")


def moe_compiles(device: str, quick: bool) -> str:
    """A mixture of experts (vformer-moe-small's bottleneck) trained compiled and eager on the
    same seed: both val losses, or the compiled run's error."""
    from shapesweep.trainers.loop import train

    candidates, recipe = space_candidates("vformer-moe-small")
    config = _pair(candidates)[1].config
    recipe = recipe.model_copy(update={"steps": 8 if quick else 60, "tokens": None,
                                       "eval_every": 8 if quick else 60,
                                       "eval_tokens": recipe.seq_len * 8})
    eager = train(config, recipe.model_copy(update={"compile": False}), device=device)
    try:
        compiled = train(config, recipe.model_copy(update={"compile": True}), device=device)
    except Exception as error:  # the finding is the error itself
        tail = traceback.format_exc().strip().splitlines()[-3:]
        return f"compiled run failed: {type(error).__name__}: {error} | " + " | ".join(tail)
    return (f"eager val_loss {eager.val_loss:.4f}, compiled {compiled.val_loss:.4f} "
            f"(diff {compiled.val_loss - eager.val_loss:+.4f}), compile {compiled.compile_s:.1f} s, "
            f"{compiled.graph_breaks} graph breaks, {compiled.recompiles} recompiles")


SHAPE_ITEMS = ("baseline", "hourglass", "vformer")  # the rows of `shapes`, in its order
# (label, seconds on an H200, seconds with --quick on CPU, run): compile 412 s and peaks 90 s
# measured on 2026-11-29 (docs/gpu.md); the others from their first runs.
EXTRAS = {"graphs": ("small shape 256x4, CUDA graphs", 60.0, 30.0, cuda_graphs),
          "moe": ("mixture of experts, compiled vs eager", 90.0, 30.0, moe_compiles),
          "compile": ("whole, nested, regional and regions-of-4 compile", 420.0, 80.0,
                      compile_ways),
          "peaks": ("memory peaks, step and evaluation", 100.0, 60.0, memory_peaks),
          "sweep": ("sweep", 120.0, 30.0, time_sweep),
          "e2e": ("end-to-end 113M sweep", 360.0, 60.0, e2e_sweep),
          "packed": ("packed 113M sweep", 200.0, 60.0, packed_sweep)}
RECORDS = ("graphs", "e2e")  # the extra items that keep figures: run(device, quick, record[, peak])
ITEMS = (*SHAPE_ITEMS, *EXTRAS)


def item_list(text: str) -> list[str]:
    """`--items`: known names, comma separated, in the order to run them."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ITEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown item {', '.join(unknown) or '(none)'}: choose from {', '.join(ITEMS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="stop starting new items once this many seconds have passed "
                             "(default 480: one 10-minute command with room to spare)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few steps (CPU test)")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="dense bf16 peak of this device (default: by its name)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="ABBA pairs for the first shape (default 2)")
    parser.add_argument("--sweep", action="store_true", help="also time one real shapesweep run")
    parser.add_argument("--e2e", action="store_true",
                        help="also sweep hourglass-fixed-attention-113m end to end, 4 steps a trial")
    parser.add_argument("--figures", type=Path, default=None,
                        help="merge the figures into this file (default on CUDA: the package's "
                             "trainers/gpu-figures.json; on CPU none is written)")
    parser.add_argument("--packed", action="store_true",
                        help="also run the packed 113M sweep (three trials on one GPU)")
    parser.add_argument("--items", type=item_list, default=None,
                        help=f"which items, in this order, comma separated ({', '.join(ITEMS)}; "
                             "default: baseline,hourglass,vformer,graphs,moe plus --sweep, "
                             "--e2e and --packed)")
    args = parser.parse_args()
    items = args.items or [*SHAPE_ITEMS, "graphs", "moe", *(["sweep"] if args.sweep else []),
                           *(["e2e"] if args.e2e else []), *(["packed"] if args.packed else [])]
    budget = Budget(args.budget_s)
    from shapesweep.trainers.compiled import compile_cache

    cache = compile_cache()
    if args.device == "cuda":
        torch.set_float32_matmul_precision("high")  # as the loop does; the plain loop too
        name = torch.cuda.get_device_name()
    else:
        torch.set_num_threads(1)
        name = "CPU"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (
        peak_flops(name) if args.device == "cuda" else None)
    say(f"device: {name}, torch {torch.__version__}, peak "
        f"{peak / 1e12:.0f} TFLOP/s" if peak else f"device: {name}, torch {torch.__version__}")
    record = Recorder(args.figures or (gpu_figures.PATH if args.device == "cuda" else None), name)
    say(f"budget {args.budget_s:.0f} s; inductor cache {cache}; items {', '.join(items)}; "
        f"figures {record.path or 'not written'}")
    shape_rows = shapes(args.quick, args.device)
    rows_of = {"baseline": shape_rows[:1], "hourglass": shape_rows[1:2], "vformer": shape_rows[2:]}
    families = {"113m_baseline": "conventional", "113m_hourglass_k8": "hourglass"}
    first = True
    for item in items:
        if item in EXTRAS:
            label, estimate, quick_estimate, run = EXTRAS[item]
            estimate = estimate if args.device == "cuda" else quick_estimate
            if not budget.allows(estimate):
                say(f"{label}: skipped ({budget.left():.0f} s left of the budget, ~{estimate:.0f} s needed)")
                continue
            started = time.monotonic()
            try:
                result = (run(args.device, args.quick, peak, record) if item == "e2e" else
                          run(args.device, args.quick, record) if item in RECORDS else
                          run(args.device, args.quick))
            except Exception as error:  # one item's failure is a finding, not the end of the run
                say(f"{label}: failed: {type(error).__name__}: {str(error)[:300]}")
                continue
            for line in [result] if isinstance(result, str) else result:
                say(line if line.startswith(" ") else f"{label}: {line}")
            say(f"{label}: done in {time.monotonic() - started:.0f} s")
            continue
        for shape, key, config, recipe, estimate in rows_of[item]:
            if not budget.allows(estimate):
                say(f"{shape}: skipped ({budget.left():.0f} s left of the budget, ~{estimate:.0f} s needed)")
                continue
            started = time.monotonic()
            try:
                row, figures = measure(config, recipe, args.device, args.quick, args.repeats,
                                       peak, full=first)
            except Exception as error:  # one shape's failure is a finding, not the end of the run
                say(f"{shape}: failed: {type(error).__name__}: {str(error)[:300]}")
                continue
            finally:
                first = False
            say(f"{shape}: " + ", ".join(f"{field} {value}" for field, value in row.items())
                + f" ({time.monotonic() - started:.0f} s)")
            for metric, (value, fmt, unit) in figures.items():
                family = families.get(key, "vformer" if "vformer" in key else None)
                record(f"{metric}_{key}", value, fmt, unit, f"{shape}, its space's recipe, "
                       f"micro-batch {recipe.micro_batch_size} x {recipe.seq_len}: {metric}",
                       **({"family": family} if metric == "mfu" and family else {}))
    say(f"done, {budget.left():.0f} s of the budget left")


if __name__ == "__main__":
    main()
