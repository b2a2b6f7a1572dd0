"""`run --dry-run` and `resume --dry-run`: every check `run` makes that needs no cluster (the
space, the flags, the scheduler and seeds, whether the seeds can give a verdict, memory at
`--gpu-memory`, placement on `--gpus`), then the plan and its price as `plan` prints them.

Nothing is written (no results root, no catalog) and Ray never starts: a cluster named with
`--address` is not contacted, and a machine without GPUs checks a GPU sweep against the card
`--gpu` names (or --gpu-memory).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from shapesweep.common import printable
from shapesweep.sweep.cli.verb_table import PlanArgs
from shapesweep.sweep.driver.sweep_check import check_sweep
from shapesweep.sweep.options.option_groups import DEFAULT_GPU, GPU_KINDS, has_gpu
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.verbs.spaces_command import plan


def dry_run(options: SweepOptions) -> int:
    """Check, then print the plan and its price; 0 (a refusal raises UserError: exit 2)."""
    options = replace(options, gpu_memory=card_memory(options))
    options, checked = check_sweep(options)  # everything that can refuse it, nothing written
    for line in checked.notices:
        print(printable(line), flush=True)
    if options.search == "grid":
        adaptive = checked.adaptive  # priced as its range: the most and the expected
        plan(plan_args(options, checked.seeds if adaptive is None else
                       {"min": adaptive.design.min_seeds, "max": adaptive.design.max_seeds}))
    else:
        print(f"price: an {options.search} search picks its trials as it runs "
              f"(--num-samples {options.num_samples}); `shapesweep plan` prices the space's grid")
    where = (f" (the cluster at --address {options.address} was not contacted)"
             if options.address else "")
    print(f"dry run: sweep {checked.name} passes every check that needs no cluster{where}; "
          "nothing written, no Ray started", flush=True)
    sys.stdout.flush()
    return 0


def card_memory(options: SweepOptions) -> str | None:
    """The GPU memory a GPU sweep is checked against: --gpu-memory, else the card --gpu
    names, else this machine's (None: the memory check reads it), else the default card's."""
    if not options.gpus_per_trial or options.gpu_memory:
        return options.gpu_memory
    if options.gpu is not None:
        return GPU_KINDS.get(options.gpu.lower(), GPU_KINDS[DEFAULT_GPU])[1]  # pricing names a bad one
    return None if has_gpu() else GPU_KINDS[DEFAULT_GPU][1]


def plan_args(options: SweepOptions, seeds: list[int] | dict[str, int]) -> PlanArgs:
    """`plan`'s arguments for the sweep as it would run: its space, seeds, device and price."""
    gpus = options.gpus_per_trial
    return PlanArgs(
        space=options.space, format="table", seq_len=None, out=None,
        device="cuda" if gpus else "cpu", gpu_memory=options.gpu_memory if gpus else None,
        gpus_per_trial=min(gpus, 1.0) if gpus else None, seeds=seeds, gpu=options.gpu,
        gpus=options.gpus, gpu_hour_price=options.gpu_hour_price,
        min_effect=options.min_effect, seed_sd=options.seed_sd)
