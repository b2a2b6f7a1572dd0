"""The recipe's arithmetic: the lr schedule (linear warmup, then cosine / linear / constant /
power / warmup-stable-decay), AdamW over muP's parameter groups, and the forward's autocast
dtype. The loop (`shapesweep.trainers.loop`) and a cooldown branch (`trainers/cooldown.py`)
read them; tests check them against the papers' formulas.
"""

from __future__ import annotations

import math

import torch

from shapesweep.search_spaces.cadence import cooldown_steps
from shapesweep.trainers import cooldown
from shapesweep.trainers.recipe import TrainConfig


def warmup_steps(train: TrainConfig, total: int, units_per_step: int | None = None) -> int:
    """round(warmup_frac x total), or round(warmup_tokens / units_per_step): tokens (images
    for vision) per optimizer step, by default the LM's whole sequences of batch_tokens."""
    if train.warmup_tokens is None:  # then the recipe has set warmup_frac
        return round((train.warmup_frac or 0.0) * total)
    units_per_step = units_per_step or train.batch_tokens // train.seq_len * train.seq_len
    return round(train.warmup_tokens / units_per_step)


def lr_multiplier(step: int, total: int, train: TrainConfig,
                  units_per_step: int | None = None) -> float:
    """Schedule factor for optimizer step `step` (0-based): linear warmup over W steps
    (`warmup_steps`), then decay to min_lr_frac. `power` (xformer): with t = step + 1,
    t/W while t < W, then max(min_lr_frac, (W/t)^decay_power), an inverse-power decay
    (p = 0.5 is the inverse square root). `wsd`: 1 until the last cooldown_frac of the
    steps, which cool down as `cooldown.factor` says."""
    warmup = warmup_steps(train, total, units_per_step)
    if train.decay == "power":
        t, w = step + 1, max(warmup, 1)
        return t / w if t < w else max(train.min_lr_frac, (w / t) ** train.decay_power)
    if step < warmup:
        return (step + 1) / warmup
    if train.decay == "wsd":
        cool = cooldown_steps(train, total)
        return 1.0 if step < total - cool else cooldown.factor(train, 1.0, step - (total - cool), cool)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    floor = train.min_lr_frac
    if train.decay == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if train.decay == "linear":
        return 1 - (1 - floor) * progress
    return 1.0


def autocast_dtype(train: TrainConfig, dev: torch.device) -> torch.dtype | None:
    """The forward's autocast dtype: `train.autocast`, whose `auto` is bf16 on CUDA only.
    Losses, norms and the router's softmax stay in fp32 under it (`_loss`, RMSNorm's opmath)."""
    if train.autocast == "auto":
        return torch.bfloat16 if dev.type == "cuda" else None
    return torch.bfloat16 if train.autocast == "bfloat16" else None


def adamw(groups: list[dict], train: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW over the muP groups, each at train.lr x its lr_scale; `fused` on CUDA (one
    kernel for all parameters), torch's default (foreach) implementation elsewhere."""
    return torch.optim.AdamW([{**g, "lr": train.lr * g.get("lr_scale", 1.0)} for g in groups],
                             lr=train.lr, betas=(train.beta1, train.beta2), fused=fused or None)
