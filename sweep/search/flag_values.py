"""The values of the sweep flags that search, scheduling, pricing and the verdict read: what
`--scheduler` may name, the GPU kinds `--gpu` names, `--seed-sd`'s default and the
`--no-verdict` flag. The flags themselves are declared in sweep/options/option_groups.py, which
imports these from here, so `sweep.search` never imports the CLI. Constants only: `--help`
reads them.
"""

from __future__ import annotations

SCHEDULERS = ("auto", "asha", "fifo")  # sweep/search/scheduling.py: what each runs
# `--gpu KIND` -> (the device name PEAK_TFLOPS knows its dense bf16 peak by, its memory: what
# `--gpu-memory` defaults to with `--gpu`; the A100 here is the 80GB one).
GPU_KINDS = {"h100": ("H100", "80GB"), "h100-pcie": ("H100 PCIe", "80GB"), "h200": ("H200", "141GB"),
             "b200": ("B200", "180GB"), "a100": ("A100", "80GB"), "l40s": ("L40S", "48GB"),
             "a10": ("A10", "24GB")}
DEFAULT_GPU = "h100"
DEFAULT_SEED_SD = 0.02  # an assumed seed spread of the -small spaces' size; no committed study measures it
NO_VERDICT_FLAG = "--no-verdict"
