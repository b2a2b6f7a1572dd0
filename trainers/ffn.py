"""Feed-forward networks of every family, sized by one `LayerShape`.

Each FFN reads the `width` leading residual coordinates and returns `ffn_out` of them
(fewer when nothing downstream reads the rest, xformer). The hourglass FFN is itself
residual, so it maps the stream to the updated stream instead of returning a delta.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from shapesweep.families.lm import LayerShape

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "gelu": F.gelu, "swiglu": F.silu, "geglu": F.gelu, "simple_gated": F.gelu}


class MLP(nn.Module):
    """The ffn-chapter's narrow-wide-narrow FFN: down(act(up(x)))."""

    def __init__(self, width: int, d_h: int, d_out: int, activation: str, bias: bool):
        super().__init__()
        self.up = nn.Linear(width, d_h, bias=bias)
        self.down = nn.Linear(d_h, d_out, bias=bias)
        self.act = ACTIVATIONS[activation]

    def init_roles(self) -> tuple[list[nn.Linear], dict[nn.Linear, list[int]], list[nn.Linear]]:
        """For `shapesweep.trainers.mup`: `down` writes the residual stream and reads d_h."""
        return [self.down], {}, [self.down]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class GatedFFN(nn.Module):
    """down(act(gate(x)) * up(x)), gate and up fused into one matmul.

    With `residual_scale` it is simple-gated's simple gated FFN: GELU gate plus a learned
    scalar alpha (init 0.1) times the FFN input.
    """

    def __init__(self, width: int, d_h: int, d_out: int, activation: str, bias: bool,
                 residual_scale: bool = False):
        super().__init__()
        self.gate_up = nn.Linear(width, 2 * d_h, bias=bias)
        self.down = nn.Linear(d_h, d_out, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.alpha = nn.Parameter(torch.tensor(0.1)) if residual_scale else None

    def init_roles(self) -> tuple[list[nn.Linear], dict[nn.Linear, list[int]], list[nn.Linear]]:
        """For `shapesweep.trainers.mup`: `down` writes the residual stream and reads d_h;
        gate|up is fused."""
        return [self.down], {self.gate_up: [self.down.in_features] * 2}, [self.down]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        out = self.down(self.act(gate) * up)
        if self.alpha is not None:
            out = out + self.alpha * x[..., : out.shape[-1]]
        return out


class HourglassFFN(nn.Module):
    """hourglass-ffn: k residual gated sub-blocks of bottleneck width d_h, each with its own norm.

    Pre-norm: x = x + sub_j(norm_j(x)); post-norm (OLMo-2 order): x = x + norm_j(sub_j(x)).
    It maps the stream to the updated stream (`updates_stream`), so its block adds no norm.
    Each sub-block is a residual branch of its own (depth-muP counts k of them, and scales
    each write by `branch_mult`).
    """

    updates_stream = True

    def __init__(self, s: LayerShape):
        super().__init__()
        self.width, self.pre = int(s.width), s.norm_order == "pre"
        self.subs = nn.ModuleList(
            GatedFFN(self.width, int(s.d_h), self.width, s.activation, s.bias) for _ in range(s.k)
        )
        self.norms = nn.ModuleList(nn.RMSNorm(self.width) for _ in range(s.k))
        self.n_branches = len(self.subs)
        self.branch_mult = 1.0  # depth-muP's (shapesweep.trainers.mup)

    def forward(self, stream: torch.Tensor) -> torch.Tensor:
        pad = stream.shape[-1] - self.width
        for sub, norm in zip(self.subs, self.norms, strict=True):
            x = stream[..., : self.width]
            delta = sub(norm(x)) if self.pre else norm(sub(x))
            if self.branch_mult != 1.0:
                delta = delta * self.branch_mult
            stream = stream + F.pad(delta, (0, pad))
        return stream


def make_ffn(s: LayerShape) -> nn.Module:
    """The FFN a `LayerShape` describes (hourglass when k > 0)."""
    if s.k:
        return HourglassFFN(s)
    width, d_h, d_out = int(s.width), int(s.d_h), int(s.ffn_out)
    if s.activation in ("relu", "gelu"):
        return MLP(width, d_h, d_out, s.activation, s.bias)
    return GatedFFN(width, d_h, d_out, s.activation, s.bias,
                    residual_scale=s.activation == "simple_gated")
