"""Cooldown evaluations: the loss a warmup-stable-decay run would reach if it cooled down now.

Under `decay: wsd` the lr stays constant until the last cooldown_frac of the steps. A short
cooldown branched from any point of that constant phase reaches about the loss of a run
planned to end there (Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond
Fixed Training Durations"), while a loss read mid-run at a high lr says little about the
loss after the decay. So at a scheduler's rung (or at every evaluation: train.cooldown_evals)
the loop copies the trial's state (model, optimizer, RNG), trains a cooldown of
cooldown_frac x the steps so far on the batches that follow (a batch is a function of
(seed, step)), evaluates it as `val_loss_cooled` (and `psnr_cooled`), and puts the copy
back: the main run goes on bit for bit as without the branch. A point inside the main run's
own cooldown branches from the lr it has reached; the last point is cooled already and
trains no branch.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from shapesweep.search_spaces.cadence import cooldown_steps
from shapesweep.trainers import checkpoint
from shapesweep.trainers.recipe import TrainConfig

COOLED = ("val_loss", "psnr")  # what a cooled evaluation records, as NAME_cooled (curves table)


def factor(train: TrainConfig, start: float, step: int, cool: int) -> float:
    """The lr factor at step `step` (0-based) of a cooldown of `cool` steps that goes from
    `start` to min_lr_frac: linearly, or by 1 - sqrt(progress) (Hägele et al.'s best)."""
    progress = step / cool
    left = 1 - progress if train.cooldown_shape == "linear" else 1 - math.sqrt(progress)
    return train.min_lr_frac + (start - train.min_lr_frac) * left


@dataclass
class Brancher:
    """What a branch needs of the loop: its model, optimizer, one optimizer step on a
    batch (`step`, the loop's own), the batch of a step, the evaluation, and the schedule."""

    train: Any  # the TrainConfig
    steps: int  # the main run's
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    base_lrs: list[float | torch.Tensor]  # each parameter group's lr at factor 1
    step: Callable[[torch.Tensor, torch.Tensor], Any]
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    evaluate: Callable[[], dict[str, float]]
    schedule: Callable[[int], float]  # the main run's lr factor at a step

    def cooled(self, done: int, metrics: dict[str, float]) -> dict[str, float]:
        """`val_loss_cooled` (and `psnr_cooled` where the task measures PSNR) after `done`
        steps: the main run's own at its last step, else the evaluation after a cooldown
        branched from here; the trial's state is as it was."""
        if done >= self.steps:
            return _suffixed(metrics)
        model_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        optimizer_state = copy.deepcopy(self.optimizer.state_dict())
        rng = checkpoint.rng_state()
        start, cool = self.schedule(done), cooldown_steps(self.train, done)
        try:
            for j in range(cool):
                lr_factor = factor(self.train, start, j, cool)
                for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
                    group["lr"] = base * lr_factor
                self.step(*self.batch(done + j))
            return _suffixed(self.evaluate())
        finally:
            self.model.load_state_dict(model_state)
            self.optimizer.load_state_dict(optimizer_state)
            checkpoint.set_rng_state(rng)


def _suffixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"{name}_cooled": metrics[name] for name in COOLED if name in metrics}
