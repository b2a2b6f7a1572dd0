"""Whether a trial compiles: `train.compile: auto` weighs its compile against its training.

torch.compile pays when the training it speeds up outlasts the compile by a wide margin:
measured on one H200 (docs/gpu.md), compiled/eager is 1.78-1.97 on the 113M and 500M shapes,
so compiling saves about 45% of the eager training time, and costs a fixed compile per
distinct block shape (regional compilation, `shapesweep.trainers.compiled`): 6.5-8.9 s for
a model whose blocks are all alike, 60 s for a ><former of 16 distinct layer widths. `auto`
compiles on CUDA when the expected eager training time is at least `PAYS_AT` times the
expected compile time; on CPU it runs eagerly (Inductor's C++ compile of a block costs tens
of seconds on 2 cores, more than a short CPU trial wins back, and eager fp32 CPU runs
repeat exactly). `plan` prints the decision and its figures for each candidate; a trial
records what ran (`compiled`, `compile_s`). No torch here: planning never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shapesweep.search_spaces.accounting import account

from shapesweep.families.base import of

# Dense bf16 peak TFLOP/s by (a substring of) the CUDA device name, most specific first.
PEAK_TFLOPS = {"H100 PCIe": 756, "H100": 989, "H200": 989, "B200": 2250, "A100": 312,
               "L40S": 362, "A10": 125}
PLANNING_PEAK_TFLOPS = 989  # a device to plan for when none is at hand (H100 SXM / H200)
# Measured on one H200 (docs/gpu.md, bench_gpu.py): eager steps at 22.3-22.5% MFU; a first
# compile of 8.9 s for one distinct block, 60.2 s for 16 (3.5 s each beyond the first).
EAGER_MFU = 0.22
COMPILE_BASE_S = 6.0  # dynamo, AOTAutograd and Inductor start-up, and the readout + loss region
COMPILE_PER_REGION_S = 3.5  # one distinct block's forward and backward
PAYS_AT = 5.0  # compile when eager training takes at least this many times the compile


def peak_flops(device_name: str) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None for a device not in PEAK_TFLOPS."""
    return next((t * 1e12 for name, t in PEAK_TFLOPS.items() if name in device_name), None)


def distinct_regions(config) -> int:
    """How many different blocks regional compilation compiles: one per distinct layer shape."""
    shapes = config.layer_shapes() if of(config).lm else [None]
    return len(set(shapes))


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str
    train_s: float | None = None  # expected eager training seconds (CUDA, auto only)
    compile_s: float | None = None  # expected compile seconds (CUDA, auto only)


def decide(config, train, device_type: str, tokens: int,
           peak: float | None = None) -> CompileDecision:
    """`train.compile` for `config` trained on `tokens` on a `device_type` device whose dense
    bf16 peak is `peak` FLOP/s (None: PLANNING_PEAK_TFLOPS)."""
    if train.compile is not None and train.compile != "auto":
        return CompileDecision(bool(train.compile), f"train.compile: {str(train.compile).lower()}")
    if device_type != "cuda":
        return CompileDecision(False, f"auto: eager on {device_type} (compile pays on a GPU only)")
    regions = distinct_regions(config)
    compile_s = COMPILE_BASE_S + COMPILE_PER_REGION_S * regions
    flops = account(config, train.seq_len).flops_per_token * tokens
    train_s = flops / ((peak or PLANNING_PEAK_TFLOPS * 1e12) * EAGER_MFU)
    pays = train_s >= PAYS_AT * compile_s
    verdict = "compile" if pays else "eager"
    return CompileDecision(pays, f"auto: {verdict}, ~{train_s:,.0f} s of eager training vs "
                           f"~{compile_s:.0f} s to compile {regions} distinct block"
                           f"{'s' if regions != 1 else ''} (compiles at >= {PAYS_AT:g}x)",
                           train_s, compile_s)
