"""Will a candidate fit in memory to train? Asked before torch allocates anything.

A model too large for the device otherwise dies deep inside torch's allocator (or the
OS kills the process). Planning never allocates, so a space of 1-3B-parameter shapes
still plans on a laptop; this check runs when training starts, from the accounting:
fp32 weights + gradients + AdamW's two moments (16 bytes per parameter) plus a rough,
low activation term for one micro-batch (the loop's fp32 logits and their gradient, and
a few residual-width tensors per layer). Low on purpose: it refuses only what cannot fit.
"""

from __future__ import annotations

import os

import torch
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, config_key

from shapesweep.common import UserError
from shapesweep.families.base import of

STATE_BYTES = 16  # per parameter: fp32 weight, gradient, AdamW exp_avg and exp_avg_sq
LAYER_WIDTHS = 8  # activations kept per token per layer, in layer widths (a floor, not a fit)


def training_bytes(config, train: TrainConfig, device: torch.device, shards: int = 1) -> int:
    """Rough bytes to train `config` under `train` on `device`: parameter states (split over
    `shards` FSDP ranks) plus one micro-batch's activations (bf16 on CUDA, where the loop
    autocasts; else fp32)."""
    accounting = account(config, train.seq_len)
    states = STATE_BYTES * (accounting.params_total + accounting.params_frozen) // shards
    width = 2 if device.type == "cuda" else 4
    layers = LAYER_WIDTHS * accounting.avg_layer_width * len(accounting.widths) * width
    if not of(config).lm:  # images: d_x in, d_out out
        examples, per_example = train.batch_size, 4 * (config.d_x + config.d_out) + layers
    else:
        sequences = max(1, train.batch_tokens // train.seq_len)
        examples = min(train.micro_batch_size or sequences, sequences) * train.seq_len
        per_example = 2 * 4 * config.vocab_size + layers  # fp32 logits and their gradient
    return int(states + examples * per_example)


def device_bytes(device: torch.device) -> int:
    """The device's memory: physical RAM for the CPU, the GPU's total for CUDA (a trial
    sharing the GPU may see less free; the total is what no trial can exceed)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(config, train: TrainConfig, device: torch.device | str, shards: int = 1) -> None:
    """Raise UserError when training `config` (its states split over `shards` FSDP ranks)
    needs more memory than `device` has."""
    device = torch.device(device)
    need, have = training_bytes(config, train, device, shards), device_bytes(device)
    if need > have:
        params = account(config, train.seq_len).params_total
        smaller = STATE_BYTES * params // shards < have and of(config).lm
        hint = "; a smaller train.micro_batch_size may fit" if smaller else ""
        raise UserError(f"{config.family} candidate {config_key(config)} ({params:,} parameters) "
                        f"needs about {need / 2**30:,.1f} GiB to train (fp32 weights, gradients, "
                        f"AdamW states and activations); {device.type} has {have / 2**30:,.1f} GiB"
                        f"{hint}", key="model")
