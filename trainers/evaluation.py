"""The held-out evaluation: every example's loss on the task's fixed validation set, their mean
and standard error, and the task's own metrics (perplexity, or PSNR / SSIM / accuracy).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn

from shapesweep.trainers.memory import EVAL_CHUNK_TOKENS
from shapesweep.trainers.tasks import Batches


def example_losses(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each held-out example's loss: a sequence's mean cross-entropy, an image's MSE (their
    mean is `_loss`'s reported loss: every example has as many tokens or pixels)."""
    if y.is_floating_point():
        return (out.float() - y).square().flatten(1).mean(1)
    rows = max(1, EVAL_CHUNK_TOKENS // y.shape[1])  # fp32 logits a few sequences at a time
    return torch.cat([F.cross_entropy(o.float().flatten(0, 1), t.flatten(), reduction="none")
                      .view(t.shape).mean(1) for o, t in zip(out.split(rows), y.split(rows),
                                                             strict=True)])


@torch.no_grad()
def evaluate(model: nn.Module, task: Batches, batch: int, device: torch.device,
             autocast: Callable[[], AbstractContextManager]) -> dict[str, float]:
    """Validation loss (and ppl, or image metrics) on the task's fixed held-out set, and its
    standard error over the held-out sequences (images): std / sqrt(n) of their losses, so a
    comparison can tell an effect from the sampling noise of a finite evaluation set."""
    model.eval()
    sums, count, preds = torch.zeros(2, dtype=torch.float64, device=device), 0, []
    for x, y in zip(task.val_x.split(batch), task.val_y.split(batch), strict=True):
        with autocast():
            out = model(x.to(device))
        losses = example_losses(out, y.to(device)).double()
        sums += torch.stack([losses.sum(), losses.square().sum()])  # on the device, read once below
        count += len(x)
        if y.is_floating_point():
            preds.append(out.float())
    model.train()
    total, squares = sums.tolist()
    mean = total / count
    spread = max(squares - count * mean * mean, 0.0) / (count - 1) if count > 1 else math.nan
    metrics = {"val_loss": mean, "val_loss_se": math.sqrt(spread / count)}
    if preds:
        metrics.update(task.metrics(torch.cat(preds).cpu()))  # type: ignore[attr-defined]  # images
    else:
        metrics["val_ppl"] = math.exp(min(metrics["val_loss"], 700.0))
    return metrics
