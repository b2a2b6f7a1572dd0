"""The machine a trial ran on, as its row records it.

A loss repeats bit for bit on one machine and differs on another by the float order of its
matrix products (docs/small-sweeps.md, "Where a number holds"): over a few hundred steps
by as much as the seed noise. A sweep that spans machines, or a figure quoted from one, has
to say which, so every trial row carries the CPU model, the torch build, the device and the
threads it trained on.
"""

from __future__ import annotations

import platform
from typing import Any

import torch


def cpu_model() -> str:
    """The CPU's model name as Linux reports it (`lscpu`'s "Model name"), else the platform's."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe(dev: torch.device) -> dict[str, Any]:
    """A run on `dev` in this process: the row's machine columns
    (`shapesweep.results.rows.MACHINE_FIELDS`)."""
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type
    return {"cpu_model": cpu_model(), "torch_version": torch.__version__, "device_name": name,
            "torch_threads": torch.get_num_threads()}
