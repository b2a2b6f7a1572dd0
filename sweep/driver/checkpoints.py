"""A sweep's trial checkpoints: where they are, which one a trial continues from, cleanup.

Tune keeps a trial's checkpoints (`trainers.checkpoint` folders: weights, config,
optimizer/RNG state) in the sweep's Ray folder, RAY/RUN/TRIAL_ID/checkpoint_NNNNNN, one
RUN folder per driver run, at most one checkpoint per trial and run
(`CheckpointConfig(num_to_keep=1)`). A trial retried within a run gets its checkpoint from
`tune.get_checkpoint()`; a trial that `resume` runs again finds here what the killed run
left. Once a trial ends, its checkpoints go (unless `--keep-checkpoints`); a failed trial
keeps its own, so `resume --retry-failed` continues it.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from ray.tune import Callback
from ray.tune.experiment import Trial


def trial_checkpoints(ray_folder: str | Path, trial_id: str) -> list[Path]:
    """Every checkpoint folder of trial `trial_id` in every run of the sweep."""
    return sorted(Path(ray_folder).glob(f"*/{trial_id}/checkpoint_*"))


def latest(ray_folder: str | Path, trial_id: str,
           passed: list[tuple[Path, str]] | None = None) -> Path | None:
    """The trial's intact checkpoint furthest into training, across the sweep's runs; a
    damaged one (truncated by a full disk or a kill, say) is passed over, in one log line
    that names it and the one the trial continues from. (torch is imported here, in the
    worker: the driver needs only the cleaner and starts sooner.) `passed`: damaged ones
    the caller passed over already (Tune's own), for the same line."""
    from shapesweep.trainers import checkpoint

    saved: list[tuple[float, Path]] = []
    for path in trial_checkpoints(ray_folder, trial_id):
        step: float | None
        try:
            step = checkpoint.saved_step(path)
        except Exception:  # noqa: BLE001 - a damaged header, of any step: checked first,
            step = math.inf  # `damage` names it below
        if step is not None:
            saved.append((step, path))
    passed = list(passed or [])
    for step, path in sorted(saved, reverse=True):
        problem = checkpoint.damage(path)
        if problem is None:
            if passed:
                say_fallback(trial_id, passed, f"continuing from {path} (step {step})")
            return path
        passed.append((path, problem))
    if passed:
        say_fallback(trial_id, passed, "no intact checkpoint: starting from step 0")
    return None


def say_fallback(trial_id: str, passed: list[tuple[Path, str]], then: str) -> None:
    """The one log line of a trial that passed over damaged checkpoints."""
    import sys

    damaged = "; ".join(f"{path}: {problem}" for path, problem in passed)
    print(f"shapesweep: trial {trial_id}: damaged checkpoint(s) passed over ({damaged}); {then}",
          file=sys.stderr, flush=True)


class CheckpointCleaner(Callback):
    """Deletes the checkpoints of a trial that ended (completed or stopped early), so the
    disk a sweep holds is bounded by the trials in flight; `keep` keeps them for
    `export --weights`."""

    def __init__(self, ray_folder: str | Path, keep: bool):
        self.ray_folder, self.keep = Path(ray_folder), keep

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: object) -> None:
        if self.keep:
            return
        for folder in trial_checkpoints(self.ray_folder, trial.config["spec"]["trial_id"]):
            shutil.rmtree(folder, ignore_errors=True)
