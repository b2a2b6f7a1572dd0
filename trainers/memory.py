"""Will a candidate fit in memory to train? Asked before torch allocates anything.

A model too large for the device otherwise dies deep inside torch's allocator (or the
OS kills the process). Planning never allocates, so a space of 1-3B-parameter shapes
still plans on a laptop; this check runs when training starts, from the accounting:
fp32 weights + gradients + AdamW's two moments (16 bytes per parameter) plus a rough
activation term for one micro-batch. It refuses only what cannot fit at all.
"""

from __future__ import annotations

import os

import torch

from search_spaces.accounting import account
from search_spaces.configs import TrainConfig, VisionMLPConfig, config_key
from search_spaces.errors import UserError

STATE_BYTES = 16  # per parameter: fp32 weight, gradient, AdamW exp_avg and exp_avg_sq
ACTIVATION_WIDTHS = 24  # kept activations per token per layer, in units of the layer width (rough)


def training_bytes(config, train: TrainConfig) -> int:
    """Rough bytes to train `config` under `train`: parameter states plus one micro-batch's
    activations (fp32; logits and their gradient for an LM's vocabulary)."""
    accounting = account(config, train.seq_len)
    states = STATE_BYTES * (accounting.params_total + accounting.params_frozen)
    if isinstance(config, VisionMLPConfig):
        examples, per_example = train.batch_size, config.d_x + config.d_out
    else:
        sequences = max(1, train.batch_tokens // train.seq_len)
        examples = min(train.micro_batch_size or sequences, sequences) * train.seq_len
        per_example = 3 * config.vocab_size
    per_example += ACTIVATION_WIDTHS * accounting.avg_layer_width * len(accounting.widths)
    return int(states + 4 * examples * per_example)


def device_bytes(device: torch.device) -> int:
    """The device's memory: physical RAM for the CPU, the GPU's total for CUDA."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(config, train: TrainConfig, device: torch.device | str) -> None:
    """Raise UserError when training `config` needs more memory than `device` has."""
    device = torch.device(device)
    need, have = training_bytes(config, train), device_bytes(device)
    if need > have:
        params = account(config, train.seq_len).params_total
        raise UserError(f"{config.family} candidate {config_key(config)} ({params:,} parameters) "
                        f"needs about {need / 2**30:,.1f} GiB to train (fp32 weights, gradients, "
                        f"AdamW states and activations); {device.type} has {have / 2**30:,.1f} GiB",
                        key="model")
