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
7. `packed`: three 113M candidates of `hourglass-fixed-attention-113m` (baseline, hourglass
   k 5 and k 10), 40 steps of 65,536 tokens, `micro_batch_size: auto`, packed three to the
   GPU (`--gpus-per-trial 0.33 --max-concurrent 3`): whether every trial completes, with
   each one's micro-batch, predicted and measured peak, OOM retries and compile seconds.

`--items` picks and orders them (default: everything but `sweep` and `packed`, whose flags
`--sweep` and `--packed` add them at the end).

MFU follows PaLM: `account(config).flops_per_token` x tokens/s over the device's dense bf16
peak (`compile_policy.PEAK_TFLOPS` by device name, or --peak-tflops). The micro-batch is
16,384 tokens (8 x 2048, 4 x 4096), as the first H200 measurement (docs/gpu.md). Inductor's
cache is one folder for the whole run (`TORCHINDUCTOR_CACHE_DIR`, default under the shapesweep
cache), so a shape compiled once is not compiled again by a later repeat.

On CPU (`--device cpu`, the default without CUDA) the same items run on tiny stand-ins
(`--quick`) or a small LM: the code path checked, not a figure to quote.

    python benchmarks/bench_gpu.py [--budget-s 480] [--quick] [--device cuda|cpu]
                                   [--peak-tflops T] [--repeats N] [--sweep] [--packed]
                                   [--items packed,baseline,graphs,moe,...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from bench_sweep_overhead import DEPTHS, overhead_space
from bench_train_step import ours_tokens_per_s, paired_ratio, plain_tokens_per_s
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.compile_policy import peak_flops

TOKENS_PER_MICRO_BATCH = 16384  # 8 x 2048 or 4 x 4096: the first H200 run's micro-batch


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


def space_candidates(name: str) -> tuple[list, TrainConfig]:
    """A built-in space's candidates and its recipe (the baseline's)."""
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    space = load_space(name)
    candidates = plan(space).candidates
    return candidates, space.train_for(candidate=candidates[0])


def shapes(quick: bool, device: str) -> list[tuple[str, object, TrainConfig, float]]:
    """(name, config, recipe, estimated seconds on the device) of each measured shape, in
    priority order; tiny stand-ins with --quick, one small LM on CPU."""
    if quick or device == "cpu":
        lm = dict(vocab_size=256, n_heads=2)
        recipe = TrainConfig(seq_len=64, batch_tokens=256, micro_batch_size=2, lr=1e-3,
                             z_loss=1e-5, grad_clip=1.0, steps=1)
        shapes = [("conventional tiny", dict(family="conventional", d_model=32, n_layers=2,
                                             d_h=128, **lm)),
                  ("hourglass tiny k=2", dict(family="hourglass", d_model=32, n_layers=2,
                                              d_h=16, k=2, **lm))]
        vformer, _ = space_candidates("vformer-shapes-small")
        out = [(name, make_config(fields), recipe, 60.0) for name, fields in shapes]
        return out + [(f"><former tiny {c.config.shape}", c.config,
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
    return [("113M baseline conventional 768x12 d_h 3072", baseline, recipe_113m, 150.0),
            (f"113M hourglass 768x12 k 8 d_h {k8.d_h}", k8, recipe_113m, 100.0),
            *((f"500M ><former {c.config.shape}", c.config, recipe_500m, 100.0)
              for c in _pair(vformer))]


def _pair(candidates) -> list:
    """The constant-width candidate and the first bottleneck of a ><former space."""
    return [next(c for c in candidates if c.config.shape == shape)
            for shape in ("constant", "bottleneck")]


def measure(config, recipe: TrainConfig, device: str, quick: bool, repeats: int,
            peak: float | None, full: bool) -> dict[str, str]:
    """One shape, compiled with its recipe: the loop's tokens/s, MFU, memory and compile
    seconds; with `full`, the loop over the plain compiled loop (`repeats` ABBA pairs) and
    compiled over eager, else one plain and one eager run beside it."""
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
    return {"tokens/s": f"{ours:,.0f}", "MFU": f"{flops * ours / peak:.1%}" if peak else "n/a",
            "plain tokens/s": f"{base:,.0f}", "loop/plain": f"{ratio:.3f} [{low:.2f}-{high:.2f}]",
            "eager tokens/s": f"{eager:,.0f}",
            "compiled/eager": f"{speedup:.3f} [{s_low:.2f}-{s_high:.2f}]",
            "peak memory": f"{max(memory) / 2**30:.1f} GiB" if memory else "n/a (CPU)",
            "compile s": ", ".join(f"{r.compile_s:.1f}" for r in compiled),
            "micro-batch": f"{recipe.micro_batch_size} x {recipe.seq_len}",
            "compile": "; ".join(sorted({f"{r.graph_breaks} graph breaks, {r.recompiles} "
                                         f"recompiles, autocast {r.autocast_dtype}"
                                         for r in compiled}))}


def cuda_graphs(device: str, quick: bool) -> str:
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
    space["train"].update(seq_len=2048, batch_tokens=TOKENS_PER_MICRO_BATCH,
                          micro_batch_size=TOKENS_PER_MICRO_BATCH // 2048, lr=1e-3,
                          eval_tokens=2048, eval_every=max(1, steps // 4), compile=True)
    return space


def packed_space(quick: bool) -> dict:
    """The issue's packed sweep: the 113M baseline and hourglass k 5 and k 10, 40 steps of
    65,536 tokens, evaluated at the end on 65,536 tokens, micro-batch chosen by the memory
    model; a tiny stand-in with --quick."""
    if quick:
        space = tiny_space(4096)
        space["train"].update(eval_every=2, micro_batch_size="auto")
        return space
    from shapesweep.search_spaces.safe_yaml import read_yaml

    from shapesweep import search_spaces

    space = read_yaml(Path(search_spaces.__file__).parent / "builtin"
                      / "hourglass-fixed-attention-113m.yaml")
    space["name"] = "bench-gpu-packed"
    space["variants"][1]["search"] = {"k": [5, 10]}
    batch = 65536
    space["train"].update(tokens=40 * batch, batch_tokens=batch, micro_batch_size="auto",
                          warmup_tokens=4 * batch, eval_tokens=batch, eval_every=20,
                          compile=True)
    return space


def run_space(space: dict, args: list[str]):
    """`shapesweep run` of one space in a temporary root: (exit code, wall seconds, trials)."""
    import yaml
    from shapesweep.results.store import load_trials
    from shapesweep.sweep.cli import main as shapesweep

    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.yaml"
        space_path.write_text(yaml.safe_dump(space))
        root = str(Path(tmp) / "sweeps")
        start = time.perf_counter()
        code = shapesweep(["run", str(space_path), "--root", root, "--seeds", "1",
                           "--no-progress", *args])
        wall = time.perf_counter() - start
        trials = load_trials(root) if Path(root).exists() else None
    return code, wall, trials


def packed_sweep(device: str, quick: bool) -> list[str]:
    """Three candidates packed on one GPU with an automatic micro-batch: every trial's fate."""
    cuda = device == "cuda"
    code, wall, trials = run_space(packed_space(quick or not cuda), [  # CPU: the stand-in
        "--scheduler", "fifo", "--max-concurrent", "3",
        "--gpus-per-trial", "0.33" if cuda else "0"])
    if trials is None or trials.empty:
        return [f"shapesweep run exit {code}, no trials stored ({wall:.0f} s)"]
    counts = trials["status"].value_counts().to_dict()
    lines = [f"exit {code}, {len(trials)} trials in {wall:.1f} s wall: "
             + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))]
    gib = 2**30
    for t in trials.sort_values("key").itertuples():
        measured = getattr(t, "memory_peak_bytes_measured", None)
        lines.append(
            f"  {t.family} k={getattr(t, 'k', None)} d_h={t.d_h}: {t.status}, micro-batch "
            f"{t.micro_batch_size}, predicted {t.memory_peak_bytes / gib:.1f} GiB, measured "
            f"{measured / gib:.1f} GiB, {t.oom_retries} OOM retries, compile {t.compile_s:.1f} s, "
            f"{t.tokens_per_s:,.0f} tok/s, val_loss {t.val_loss:.4f}, wall {t.wall_time_s:.1f} s"
            if t.status == "completed" else
            f"  {t.family} k={getattr(t, 'k', None)}: {t.status}: {str(t.error)[:300]}")
    return lines


def time_sweep(device: str, quick: bool) -> list[str]:
    """One real sweep (FIFO, one trial at a time): the timings read back from its store."""
    code, wall, trials = run_space(sweep_space(quick, 40), [
        "--scheduler", "fifo", "--max-concurrent", "1",
        "--gpus-per-trial", "1" if device == "cuda" else "0"])
    if code != 0 or trials is None:
        return [f"shapesweep run failed (exit {code})"]
    lines = [f"{len(trials)} trials in {wall:.1f} s wall"]
    lines += [f"  trial n_layers={t.n_layers}: {t.wall_time_s:.1f} s, compile {t.compile_s:.1f} s, "
              f"{t.tokens_per_s:,.0f} tok/s, {t.graph_breaks} graph breaks, {t.recompiles} "
              "recompiles" for t in trials.sort_values("finished_at").itertuples()]
    return lines


SHAPE_ITEMS = ("baseline", "hourglass", "vformer")  # the rows of `shapes`, in its order
# (label, seconds on an H200, seconds with --quick on CPU, run): compile 412 s and peaks 90 s
# measured on 2026-11-29 (docs/gpu.md); the others from their first runs.
EXTRAS = {"graphs": ("small shape 256x4, CUDA graphs", 60.0, 30.0, cuda_graphs),
          "moe": ("mixture of experts, compiled vs eager", 90.0, 30.0, moe_compiles),
          "compile": ("whole, nested, regional and regions-of-4 compile", 420.0, 80.0,
                      compile_ways),
          "peaks": ("memory peaks, step and evaluation", 100.0, 60.0, memory_peaks),
          "sweep": ("sweep", 120.0, 30.0, time_sweep),
          "packed": ("packed 113M sweep", 200.0, 60.0, packed_sweep)}
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
    parser.add_argument("--packed", action="store_true",
                        help="also run the packed 113M sweep (three trials on one GPU)")
    parser.add_argument("--items", type=item_list, default=None,
                        help=f"which items, in this order, comma separated ({', '.join(ITEMS)}; "
                             "default: baseline,hourglass,vformer,graphs,moe plus --sweep "
                             "and --packed)")
    args = parser.parse_args()
    items = args.items or [*SHAPE_ITEMS, "graphs", "moe", *(["sweep"] if args.sweep else []),
                           *(["packed"] if args.packed else [])]
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
    say(f"budget {args.budget_s:.0f} s; inductor cache {cache}; items {', '.join(items)}")
    shape_rows = shapes(args.quick, args.device)
    rows_of = {"baseline": shape_rows[:1], "hourglass": shape_rows[1:2], "vformer": shape_rows[2:]}
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
                result = run(args.device, args.quick)
            except Exception as error:  # one item's failure is a finding, not the end of the run
                say(f"{label}: failed: {type(error).__name__}: {str(error)[:300]}")
                continue
            for line in [result] if isinstance(result, str) else result:
                say(line if line.startswith(" ") else f"{label}: {line}")
            say(f"{label}: done in {time.monotonic() - started:.0f} s")
            continue
        for shape, config, recipe, estimate in rows_of[item]:
            if not budget.allows(estimate):
                say(f"{shape}: skipped ({budget.left():.0f} s left of the budget, ~{estimate:.0f} s needed)")
                continue
            started = time.monotonic()
            try:
                row = measure(config, recipe, args.device, args.quick, args.repeats, peak,
                              full=first)
            except Exception as error:  # one shape's failure is a finding, not the end of the run
                say(f"{shape}: failed: {type(error).__name__}: {str(error)[:300]}")
                continue
            finally:
                first = False
            say(f"{shape}: " + ", ".join(f"{key} {value}" for key, value in row.items())
                + f" ({time.monotonic() - started:.0f} s)")
    say(f"done, {budget.left():.0f} s of the budget left")


if __name__ == "__main__":
    main()
