"""Whether a trial compiles: `train.compile: auto` weighs its compile against its training.

torch.compile pays when the training it speeds up outlasts the compile by a wide margin:
measured on one H200 (docs/gpu.md), compiled/eager is 1.78-1.97 on the 113M and 500M shapes,
so compiling saves about 45% of the eager training time, and costs a fixed compile per
distinct block shape (regional compilation, `shapesweep.trainers.compiled`): 6.5-8.9 s for
a model whose blocks are all alike, 60 s for a ><former of 16 distinct layer widths. `auto`
compiles on CUDA when the expected eager training time is at least `PAYS_AT` times the
expected compile time; on CPU it runs eagerly (Inductor's C++ compile of a block costs tens
of seconds on 2 cores, more than a short CPU trial wins back, and eager fp32 CPU runs
repeat exactly). A trial that compiles on a GPU also takes longer regions where it is long
enough to pay for them (`train.compile_blocks_per_region: auto`, `longest_regions`). `plan`
prints the decision and its figures for each candidate; a trial records what ran
(`compiled`, `compile_s`). No torch here: planning never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shapesweep.families.base import of
from shapesweep.search_spaces.accounting import account

# Dense bf16 peak TFLOP/s by (a substring of) the CUDA device name, most specific first.
PEAK_TFLOPS = {"H100 PCIe": 756, "H100": 989, "H200": 989, "B200": 2250, "A100": 312,
               "L40S": 362, "A10": 125}
PLANNING_PEAK_TFLOPS = 989  # a device to plan for when none is at hand (H100 SXM / H200)
# Measured on one H200 (docs/gpu.md, bench_gpu.py): eager steps at 22.3-22.5% MFU; a first
# compile of 8.9 s for one distinct block, 60.2 s for 16 (3.5 s each beyond the first).
EAGER_MFU = 0.22
COMPILE_BASE_S = 6.0  # dynamo, AOTAutograd and Inductor start-up, and the readout + loss region
COMPILE_PER_BLOCK_S = 3.5  # one distinct block's forward and backward, alone or in a region
# Each FFN sub-block of a block beyond its first (an hourglass block holds k): on the same H200
# run, the hourglass k 8's one-block first compile took 13.4 s against the conventional
# block's 10.5 s (docs/gpu.md), 2.9 s for 7 more sub-blocks.
COMPILE_PER_SUBBLOCK_S = 0.4
PAYS_AT = 5.0  # compile when eager training takes at least this many times the compile
# Longer compiled regions (compile_blocks_per_region: auto) may add this share of the expected
# eager training time (about twice it of the compiled) in compile: their gain was 3-6% of the
# step where there was one (the hourglass k 8: H200 0.918 of the whole model's one block a
# region, 0.950 in regions of 4, for 22.6 against 37.6 s of compile, docs/gpu.md; CPU 0.91
# and 0.97, docs/benchmarks.md), little on a conventional one.
REGION_COMPILE_SHARE = 0.01


def peak_flops(device_name: str) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None for a device not in PEAK_TFLOPS."""
    return next((t * 1e12 for name, t in PEAK_TFLOPS.items() if name in device_name), None)


def runs(signatures: list, most: int) -> list[range]:
    """Consecutive positions of equal signature, cut into near-equal chunks of at most `most`:
    the blocks each compiled region holds (`train.compile_blocks_per_region`). Near-equal, so
    a run's chunks come in at most two lengths (two graphs): 12 alike at most 5 are 4, 4, 4,
    not 5, 5, 2."""
    out, start = [], 0
    for end in range(1, len(signatures) + 1):
        if end < len(signatures) and signatures[end] == signatures[start]:
            continue
        length = end - start
        chunks = -(-length // most)
        cuts = [start + length * i // chunks for i in range(chunks + 1)]
        out += [range(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        start = end
    return out


def layer_signatures(config) -> list[str | None]:
    """One per compiled block, equal for blocks that run the same graph: an LM's layer shapes
    (the model's other families: one signature, their blocks are all alike)."""
    return [repr(s) for s in config.layer_shapes()] if of(config).task.reads_tokens else [None]


def region_graphs(config, blocks_per_region: int = 1) -> set[tuple[str | None, int]]:
    """The distinct (shape, length) regions: one graph each."""
    shapes = layer_signatures(config)
    return {(shapes[r.start], len(r)) for r in runs(shapes, blocks_per_region)}


def traced_blocks(config, blocks_per_region: int = 1) -> int:
    """Blocks dynamo traces and Inductor compiles: each graph's region as long as its blocks.
    With one block a region, the distinct layer shapes."""
    return sum(length for _, length in region_graphs(config, blocks_per_region))


def compile_seconds(config, blocks_per_region: int = 1) -> float:
    """The expected first compile on a GPU: start-up plus each traced block, a block with k
    FFN sub-blocks (an hourglass) costing more than one with one."""
    per_block = COMPILE_PER_BLOCK_S + COMPILE_PER_SUBBLOCK_S * (getattr(config, "k", 1) - 1)
    return COMPILE_BASE_S + per_block * traced_blocks(config, blocks_per_region)


def longest_regions(config, train_s: float) -> int:
    """`compile_blocks_per_region: auto` for a trial of `train_s` expected eager seconds: the
    longest regions whose extra compile (over one block a region) costs at most
    REGION_COMPILE_SHARE of it. Longer regions never ran slower where measured, and their
    gain is a few percent of the step, so their compile is held well below it."""
    longest = max(len(r) for r in runs(layer_signatures(config), 10**9))
    cheapest, budget = compile_seconds(config), REGION_COMPILE_SHARE * train_s
    within = [n for n in range(1, longest + 1) if compile_seconds(config, n) - cheapest <= budget]
    return max(within, key=lambda n: (traced_blocks(config, n), -n))  # the least n of the most


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str
    train_s: float | None = None  # expected eager training seconds (CUDA only)
    compile_s: float | None = None  # expected compile seconds (CUDA, compiled only)
    blocks_per_region: int = 1  # consecutive alike blocks a compiled region holds


def decide(config, train, device_type: str, tokens: int,
           peak: float | None = None) -> CompileDecision:
    """`train.compile` and `train.compile_blocks_per_region` for `config` trained on `tokens`
    on a `device_type` device whose dense bf16 peak is `peak` FLOP/s (None:
    PLANNING_PEAK_TFLOPS). Auto regions are one block each but on a GPU (`longest_regions`)."""
    fixed = train.compile_blocks_per_region
    train_s = None
    if device_type == "cuda":
        flops = account(config, train.seq_len).flops_per_token * tokens
        train_s = flops / ((peak or PLANNING_PEAK_TFLOPS * 1e12) * EAGER_MFU)
    if train.compile is False:
        return CompileDecision(False, "train.compile: false", train_s)
    if train.compile is True:
        reason = "train.compile: true"
    elif device_type != "cuda":
        return CompileDecision(False, f"auto: eager on {device_type} (compile pays on a GPU only)")
    else:
        least = compile_seconds(config, 1 if fixed == "auto" else fixed)
        pays = train_s is not None and train_s >= PAYS_AT * least  # a cuda device: it is set
        reason = (f"auto: {'compile' if pays else 'eager'}, ~{train_s:,.0f} s of eager training "
                  f"vs ~{least:.0f} s to compile (compiles at >= {PAYS_AT:g}x)")
        if not pays:
            return CompileDecision(False, reason, train_s)
    n = fixed if fixed != "auto" else (longest_regions(config, train_s) if train_s else 1)
    why = ("train.compile_blocks_per_region" if fixed != "auto" else
           f"auto: longer regions may add {REGION_COMPILE_SHARE:.0%} of the training in compile")
    reason += (f"; up to {n} alike blocks a region, ~{compile_seconds(config, n):.0f} s to "
               f"compile ({why})" if n > 1 else "; one block a region")
    return CompileDecision(True, reason, train_s, compile_seconds(config, n), n)
