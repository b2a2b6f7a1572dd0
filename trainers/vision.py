"""hourglass-mlp's residual MLP on images: W_in, L blocks z + W2 act(W1 norm(z)), head W_out;
the torch side of `shapesweep.families.vision_mlp` (its model and init rules)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from shapesweep.families.vision_mlp import VisionMLPConfig
from shapesweep.trainers.lm import Modules
from shapesweep.trainers.mup import Base, InitMode, Rule, linear_rules
from shapesweep.trainers.objective import mse_loss


class ResidualMLPBlock(nn.Module):
    """z + W2 act(W1 rmsnorm(z)); the norm has no weights (hourglass-mlp counts none)."""

    def __init__(self, d_z: int, d_h: int, activation: str, bias: bool):
        super().__init__()
        self.branch_mult = 1.0  # depth-muP's (shapesweep.trainers.mup)
        self.norm = nn.RMSNorm(d_z, elementwise_affine=False)
        self.w1 = nn.Linear(d_z, d_h, bias=bias)
        self.w2 = nn.Linear(d_h, d_z, bias=bias)
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.w2(self.act(self.w1(self.norm(z))))
        return z + (h * self.branch_mult if self.branch_mult != 1.0 else h)


class VisionMLP(nn.Module):
    """d_x -> d_z (fixed random or trained) -> L residual blocks -> d_out.

    A fixed W_in keeps requires_grad=False: it is part of the state (and of
    `params_frozen`) but never trained.
    """

    def __init__(self, config: VisionMLPConfig):
        super().__init__()
        self.config = config
        c = config
        self.w_in = nn.Linear(c.d_x, c.d_z, bias=c.bias)
        if c.input_projection == "fixed":
            self.w_in.requires_grad_(False)
        self.blocks: Modules[ResidualMLPBlock] = Modules(
            ResidualMLPBlock(c.d_z, c.d_h, c.activation, c.bias) for _ in range(c.n_layers)
        )
        self.w_out = nn.Linear(c.d_z, c.d_out, bias=c.bias)
        self.output_mult = 1.0  # muP's head multiplier (set by shapesweep.trainers.mup.configure)

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None, z_loss: float = 0.0):
        """The images [B, d_out]; given `targets`, the training (MSE, MSE) instead (`z_loss`
        is the LMs' and ignored)."""
        z = self.w_in(x)
        for block in self.blocks:
            z = block(z)
        return self.decode(z) if targets is None else self.objective(z, targets, z_loss)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        out = self.w_out(z)
        return out * self.output_mult if self.output_mult != 1.0 else out

    def objective(self, z: torch.Tensor, targets: torch.Tensor,
                  z_loss: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(MSE, MSE) of the head's output: compiled as one region with the head."""
        return mse_loss(self.decode(z), targets)


def init_rules(model: VisionMLP, mode: InitMode, base: Base) -> Iterator[Rule]:
    """hourglass-mlp states no init beyond a random Gaussian W_in: each matrix's `normal` std is
    1/sqrt(fan_in), and a block's one residual write counts once per layer (`mup` module:
    W1 reads d_z, W2 reads d_h, each block is one residual branch)."""
    c = model.config
    branch_mult, branch_lr = base.depth_scales(c.n_layers, mode, per_layer=1)
    if mode.mup and base.depth:  # depth-muP: the multiplier carries the depth
        residual = 1 / math.sqrt(base.branches(1))
    else:
        residual = 1 / math.sqrt(c.n_layers) if mode.depth_scaled else 1.0
    up, down = base.fan_in_mult(c.d_z, False, mode), base.fan_in_mult(c.d_h, True, mode)
    # hourglass-mlp's fixed projection is a Gaussian / sqrt(d_x); the trained one starts the same.
    yield from linear_rules(model.w_in, 1 / math.sqrt(c.d_x), 1.0, mode)
    for block in model.blocks:
        block.branch_mult = branch_mult
        yield from linear_rules(block.w1, 1 / math.sqrt(c.d_z), branch_lr / up, mode)
        yield from linear_rules(block.w2, residual / math.sqrt(c.d_h), branch_lr / down, mode)
    yield from linear_rules(model.w_out, 1 / math.sqrt(c.d_z), 1.0, mode)
    model.output_mult = base.width / c.d_z if mode.mup else 1.0
