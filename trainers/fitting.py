"""One training run that fits its memory: a share of the device, a measured peak beside the
predicted one, and an out-of-memory error recovered by halving the micro-batch; and
`compare`, the memory model beside a measured peak (on a GPU: `compare_cli`).

`train(spec, reporter)` is the one way a trial is trained: `shapesweep train`, a sweep's
trial and each Ray Train worker of a data-parallel one all call it. When CUDA runs out of
memory (`loop.OutOfMemoryAt`), the run is started again at half the micro-batch it used, at
most down to 1: the spec replaced with that micro-batch (`TrialSpec.at_micro_batch`), the same
tokens per step (gradient accumulation), resumed from the run's last checkpoint in its
`checkpoint_dir` when it has one, else from the start. The recipe is left as it is, so the
checkpoint's identity (the recipe) still matches. In a data-parallel group every rank
retries alike when every rank runs out of memory at the same step (the ranks resume from
rank 0's checkpoint, `distributed.from_rank0`); one rank alone running out leaves the
others waiting in a collective, as before.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.configs import config_key
from shapesweep.trainers import memory
from shapesweep.trainers.loop import OutOfMemoryAt, TrainResult, run
from shapesweep.trainers.spec import Reporter, TrialSpec


@dataclass
class Fitted:
    """How a run used memory: the micro-batch it ended with, the out-of-memory retries before
    it, the predicted peak at that micro-batch and the measured one (`PeakMeter`)."""

    micro_batch_size: int | None = None
    oom_retries: int = 0
    memory_peak_bytes: int | None = None
    memory_peak_bytes_measured: int | None = None

    def fields(self) -> dict[str, Any]:
        return dict(self.__dict__)


def train(spec: TrialSpec, reporter: Reporter | None = None,
          on_retry: Callable[[Fitted], None] | None = None) -> tuple[TrainResult, Fitted]:
    """Train `spec` inside its memory (`memory_share`: its fraction of a CUDA device, capped
    there with `torch.cuda.set_per_process_memory_fraction`), retried on CUDA out-of-memory
    at half the micro-batch; returns (TrainResult, Fitted). `on_retry` hears of each retry
    before it runs."""
    dev = torch.device(spec.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and dev.index is None:  # the cap and the meter want an index
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type == "cuda" and spec.memory_share:
        torch.cuda.set_per_process_memory_fraction(min(spec.memory_share, 1.0), dev)
    spec, fitted = replace(spec, device=str(dev)), Fitted()
    while True:
        meter, used = PeakMeter(dev), None
        try:
            with meter:
                result = run(spec, reporter)
        except OutOfMemoryAt as error:
            used = error.micro_batch  # retried below, once the error's frames are gone
        if used is None:
            break
        if used <= 1:
            raise torch.OutOfMemoryError(
                f"out of memory at micro-batch {used} after {fitted.oom_retries} retries "
                f"with smaller ones")
        spec = spec.at_micro_batch(used // 2)
        fitted.oom_retries += 1
        fitted.micro_batch_size = spec.micro_batch
        _release(dev)
        if on_retry is not None:
            on_retry(fitted)
    fitted.micro_batch_size = result.micro_batch_size
    if result.micro_batch_size is not None:
        fitted.memory_peak_bytes = memory.estimate(spec.model, spec.recipe, dev.type,
                                                   result.micro_batch_size).total
    fitted.memory_peak_bytes_measured = meter.peak
    return result, fitted


def _release(dev) -> None:
    """Give what the failed attempt held back to the device before the next one."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


class PeakMeter:
    """The peak memory of what runs inside it: CUDA's allocator peak above what was allocated
    at its start; on CPU the process's peak resident memory above its resident memory at its
    start (Linux: the high-water mark is reset at the start through /proc/self/clear_refs;
    elsewhere, or where that is refused, the process's lifetime peak is used, an upper bound).
    None where neither can be read."""

    def __init__(self, dev):
        self.dev, self.peak, self._start = dev, None, 0

    def __enter__(self) -> PeakMeter:
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
            self._start = torch.cuda.memory_allocated(self.dev)
        else:
            _reset_high_water_mark()
            self._start = _status_kib("VmRSS") or 0
        return self

    def __exit__(self, *exc) -> None:
        if self.dev.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.dev) - self._start
            return
        high = _status_kib("VmHWM")
        if high is None:
            high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        self.peak = max(0, high - self._start) * 1024


def _reset_high_water_mark() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak resident size
    except OSError:
        pass


def _status_kib(field: str) -> int | None:
    """A `/proc/self/status` field in KiB (VmRSS, VmHWM), or None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def compare(config, train, device: str = "cuda", data: str | None = None) -> dict:
    """Train `config` under `train` (a few steps) and return the predicted peak by term
    beside the measured one: CUDA's allocator peak (`max_memory_allocated`), or on CPU the
    profiler's (`measured_peak`). For a GPU check:

        python -c "from shapesweep.trainers.fitting import compare_cli; compare_cli()" FILE.yaml
    """
    micro = memory.micro_batch(config, train, torch.device(device), memory._per_step(config, train))
    predicted = memory.estimate(config, train, torch.device(device).type, micro)
    spec = TrialSpec(config, train, device=device, data=data)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run(spec)
        measured = torch.cuda.max_memory_allocated() - base
    else:
        measured, _ = memory.measured_peak(lambda: run(spec))
    return {"key": config_key(config), "family": config.family, **predicted.to_dict(),
            "measured": measured, "error": predicted.total / measured - 1}


def compare_cli() -> None:
    """Print `compare` for each candidate file named on the command line (a `plan --out`
    file, or `train`'s): `--steps N` (default 3), `--micro-batch-size M` override the recipe."""
    parser = argparse.ArgumentParser(description="predicted vs measured peak memory")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batch-size", default=None)
    parser.add_argument("--data", default=None)
    args = parser.parse_args()
    for file in args.files:
        config, train = load_candidate(file)
        update = {"steps": args.steps, "tokens": None, "tokens_per_param": None,
                  "eval_every": args.steps, "eval_tokens": train.seq_len}
        if args.micro_batch_size:
            mb = args.micro_batch_size
            update["micro_batch_size"] = mb if mb == "auto" else int(mb)
        train = type(train).model_validate(train.model_dump() | update)
        row = compare(config, train, args.device, args.data)
        print(json.dumps({k: (memory.gib(v) if isinstance(v, int) and k != "micro_batch" else v)
                          for k, v in row.items()}), flush=True)
