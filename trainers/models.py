"""`build_model(config)`: the torch model for any family config in `shapesweep.search_spaces.configs`.

The model is built from `config.layer_shapes()` (LM) or the vision config's fields,
the same source `shapesweep.search_spaces.accounting.account` counts, so its trainable
`sum(p.numel())` equals `account(config).params_total`. Weights come out with torch's
default init; `shapesweep.trainers.mup.configure` sets the real init and optimizer groups.
"""

from __future__ import annotations

from shapesweep.search_spaces.configs import VisionMLPConfig
from shapesweep.trainers.lm import LM
from shapesweep.trainers.vision import VisionMLP
from torch import nn

__all__ = ["LM", "VisionMLP", "build_model", "count_params"]


def build_model(config) -> nn.Module:
    """LM families: idx[B, T] -> logits[B, T, vocab]; vision_mlp: x[B, d_x] -> y[B, d_out]."""
    if isinstance(config, VisionMLPConfig):
        return VisionMLP(config)
    return LM(config)


def count_params(model: nn.Module) -> tuple[int, int]:
    """(trainable, frozen) parameter counts, comparable to params_total / params_frozen."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return trainable, frozen
