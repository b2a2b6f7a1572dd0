"""One training run that fits its memory: a share of the device, a measured peak beside the
predicted one, and an out-of-memory error recovered by halving the micro-batch; and
`compare`, the memory model beside a measured peak (on a GPU: `compare_cli`).

`loop.train` knows nothing of this: it asks `shapesweep.trainers.memory.micro_batch` for its
micro-batch, which reads the `memory.budget` this module sets around it. When CUDA runs out
of memory (`torch.OutOfMemoryError`), the run is started again with half the micro-batch it
used, at most down to 1: the same tokens per step (gradient accumulation), resumed from the
run's last checkpoint in `checkpoint_dir` when it has one, else from the start. The recipe is
left as it is, so the checkpoint's identity (the recipe) still matches.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapesweep.trainers import memory


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


def train_fitting(config, recipe, device: str | None = None, share: float | None = None,
                  on_retry: Callable[[Fitted], None] | None = None,
                  train: Callable | None = None, **options: Any) -> tuple[Any, Fitted]:
    """`loop.train(config, recipe, device=device, **options)` inside this process's memory
    (`share`: its fraction of a CUDA device, capped there with
    `torch.cuda.set_per_process_memory_fraction`), retried on CUDA out-of-memory with half the
    micro-batch; returns (TrainResult, Fitted). `on_retry` hears of each retry before it runs."""
    import torch

    if train is None:
        from shapesweep.trainers.loop import train
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and dev.index is None:  # the cap and the meter want an index
        dev = torch.device("cuda", torch.cuda.current_device())
    have = None
    if dev.type == "cuda" and share:
        fraction = min(share, 1.0)
        torch.cuda.set_per_process_memory_fraction(fraction, dev)
        have = int(fraction * memory.device_bytes(dev))
    fitted, imposed = Fitted(), None
    while True:
        meter = PeakMeter(dev)
        with memory.budget(bytes=have, micro_batch=imposed) as state:
            try:
                with meter:
                    result = train(config, recipe, device=str(dev), **options)
                out_of_memory = False
            except torch.OutOfMemoryError:
                out_of_memory = True  # retried below, once the error's frames are gone
        used = state.used
        if not out_of_memory:
            break
        if used is None or used <= 1:
            raise torch.OutOfMemoryError(
                f"out of memory at micro-batch {used} after {fitted.oom_retries} retries "
                f"with smaller ones")
        imposed = used // 2
        fitted.oom_retries += 1
        fitted.micro_batch_size = imposed
        _release(dev)
        if on_retry is not None:
            on_retry(fitted)
    fitted.micro_batch_size = used
    if used is not None:
        fitted.memory_peak_bytes = memory.estimate(config, recipe, dev.type, used).total
    fitted.memory_peak_bytes_measured = meter.peak
    return result, fitted


def _release(dev) -> None:
    """Give what the failed attempt held back to the device before the next one."""
    import torch

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
        import torch

        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
            self._start = torch.cuda.memory_allocated(self.dev)
        else:
            _reset_high_water_mark()
            self._start = _status_kib("VmRSS") or 0
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.dev.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.dev) - self._start
            return
        high = _status_kib("VmHWM")
        if high is None:
            import resource

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
    import torch
    from shapesweep.trainers.loop import train as run_train

    micro = memory.micro_batch(config, train, torch.device(device), memory._per_step(config, train))
    predicted = memory.estimate(config, train, torch.device(device).type, micro)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run_train(config, train, data=data, device=device)
        measured = torch.cuda.max_memory_allocated() - base
    else:
        measured, _ = memory.measured_peak(lambda: run_train(config, train, data=data, device=device))
    from shapesweep.search_spaces.configs import config_key

    return {"key": config_key(config), "family": config.family, **predicted.to_dict(),
            "measured": measured, "error": predicted.total / measured - 1}


def compare_cli() -> None:
    """Print `compare` for each candidate file named on the command line (a `plan --out`
    file, or `train`'s): `--steps N` (default 3), `--micro-batch-size M` override the recipe."""
    import argparse
    import json

    from shapesweep.search_spaces.candidate_file import load_candidate

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
