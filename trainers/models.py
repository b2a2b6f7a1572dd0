"""`build_model(config)`: the torch model for any registered family's config.

Each family's spec (`shapesweep.families`) names its builder ("module:callable"), imported
here only when a model is built, so planning never imports torch. The built-in LMs are
built from `config.layer_shapes()`, the same source `shapesweep.search_spaces.accounting.account`
counts, so a model's trainable `sum(p.numel())` equals `account(config).params_total`.
Weights come out with torch's default init; `shapesweep.trainers.mup.configure` sets the
real init and optimizer groups.
"""

from __future__ import annotations

from pydantic import BaseModel
from torch import nn

from shapesweep.families import base

__all__ = ["blocks_of", "build_model", "count_params"]


def build_model(config: BaseModel) -> nn.Module:
    """LM families: idx[B, T] -> logits[B, T, vocab]; vision_mlp: x[B, d_x] -> y[B, d_out].
    A family that names a `block` has its model stack that block."""
    spec = base.of(config)
    model = base.load(spec.model)
    return model(config, block=base.load(spec.block)) if spec.block else model(config)


def count_params(model: nn.Module) -> tuple[int, int]:
    """(trainable, frozen) parameter counts, comparable to params_total / params_frozen."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return trainable, frozen


def blocks_of(model: nn.Module) -> nn.ModuleList:
    """The model's blocks: every family's model keeps them in order in an `nn.ModuleList`
    named `blocks` (an LM's `LMBlock`s, hourglass-mlp's residual MLP blocks)."""
    blocks = model.get_submodule("blocks")
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError(f"{type(model).__name__}.blocks is a {type(blocks).__name__}, not an nn.ModuleList")
    return blocks
