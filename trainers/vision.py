"""Seed 004's residual MLP on images: W_in, L blocks z + W2 act(W1 norm(z)), head W_out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from shapesweep.search_spaces.configs import VisionMLPConfig
from torch import nn


class ResidualMLPBlock(nn.Module):
    """z + W2 act(W1 rmsnorm(z)); the norm has no weights (seed 004 counts none)."""

    def __init__(self, d_z: int, d_h: int, activation: str, bias: bool):
        super().__init__()
        self.norm = nn.RMSNorm(d_z, elementwise_affine=False)
        self.w1 = nn.Linear(d_z, d_h, bias=bias)
        self.w2 = nn.Linear(d_h, d_z, bias=bias)
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.w2(self.act(self.w1(self.norm(z))))


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
        self.blocks = nn.ModuleList(
            ResidualMLPBlock(c.d_z, c.d_h, c.activation, c.bias) for _ in range(c.n_layers)
        )
        self.w_out = nn.Linear(c.d_z, c.d_out, bias=c.bias)
        self.output_mult = 1.0  # muP's head multiplier (set by shapesweep.trainers.mup.configure)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.w_in(x)
        for block in self.blocks:
            z = block(z)
        out = self.w_out(z)
        return out * self.output_mult if self.output_mult != 1.0 else out
