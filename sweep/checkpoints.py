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

import shutil
from pathlib import Path
from typing import Any

from ray.tune import Callback


def trial_checkpoints(ray_folder: str | Path, trial_id: str) -> list[Path]:
    """Every checkpoint folder of trial `trial_id` in every run of the sweep."""
    return sorted(Path(ray_folder).glob(f"*/{trial_id}/checkpoint_*"))


def latest(ray_folder: str | Path, trial_id: str) -> Path | None:
    """The trial's checkpoint furthest into training, across the sweep's runs. (torch is
    imported here, in the worker: the driver needs only the cleaner and starts sooner.)"""
    from shapesweep.trainers import checkpoint

    saved = [(step, path) for path in trial_checkpoints(ray_folder, trial_id)
             if (step := checkpoint.saved_step(path)) is not None]
    return max(saved)[1] if saved else None


class CheckpointCleaner(Callback):
    """Deletes the checkpoints of a trial that ended (completed or stopped early), so the
    disk a sweep holds is bounded by the trials in flight; `keep` keeps them for
    `export --weights`."""

    def __init__(self, ray_folder: str | Path, keep: bool):
        self.ray_folder, self.keep = Path(ray_folder), keep

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info) -> None:
        if self.keep:
            return
        for folder in trial_checkpoints(self.ray_folder, trial.config["spec"]["trial_id"]):
            shutil.rmtree(folder, ignore_errors=True)
