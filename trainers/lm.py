"""Decoder-only language model for the conventional, hourglass and variable-width families.

One block implementation driven by `LayerShape`. All blocks share one global residual
stream as wide as the widest layer (xformer); block l reads and writes its leading
slice of it, so a constant-width model is the special case where the slice is everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar, overload

import torch
import torch.nn.functional as F
from torch import nn

from shapesweep.families.lm import LayerShape
from shapesweep.families.variable_width import end_widths
from shapesweep.trainers.ffn import HourglassFFN, make_ffn
from shapesweep.trainers.moe import MoEFFN, make_moe
from shapesweep.trainers.objective import lm_loss


def _widen(h: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad the last dim of `h` to `width` (a block's write into the leading coordinates)."""
    pad = width - h.shape[-1]
    return F.pad(h, (0, pad)) if pad else h


_M = TypeVar("_M", bound=nn.Module)
if TYPE_CHECKING:  # how the type checker sees the containers below; at run time torch's own

    class Modules(nn.ModuleList, Generic[_M]):
        """An `nn.ModuleList` of `_M`s (`Modules[LMBlock]`): its items typed."""

        def __iter__(self) -> Iterator[_M]: ...
        @overload
        def __getitem__(self, idx: slice) -> nn.ModuleList: ...
        @overload
        def __getitem__(self, idx: int) -> _M: ...
        def __getitem__(self, idx: int | slice) -> nn.ModuleList | _M: ...

    class ModuleMap(nn.ModuleDict, Generic[_M]):
        """An `nn.ModuleDict` of `_M`s (`ModuleMap[nn.Linear]`): its values typed."""

        def __getitem__(self, key: str) -> _M: ...
else:
    Modules, ModuleMap = nn.ModuleList, nn.ModuleDict


class Rotary(nn.Module):
    """RoPE, rotate-half form, with cos/sin tables as (non-persistent) buffers."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_len: int = 4096, base: float = 10000.0):
        super().__init__()
        self.head_dim, self.base = head_dim, base
        cos, sin = self._tables(max_len, None)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _tables(self, n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.base ** -(torch.arange(0, self.head_dim, 2, device=device) / self.head_dim)
        freqs = torch.outer(torch.arange(n, device=device, dtype=torch.float32), inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, H, T, head_dim]
        T = x.shape[-2]
        if T > self.cos.shape[0]:  # longer than built for: rebuild once (a graph break if compiled)
            self.cos, self.sin = self._tables(2 * T, x.device)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    """Causal self-attention with optional GQA, reading `attn_in` and writing `width` coordinates."""

    def __init__(self, s: LayerShape, rotary: Rotary | None = None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = int(s.n_heads), int(s.n_kv_heads), int(s.head_dim)
        self.q_dim, self.kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.qkv = nn.Linear(int(s.attn_in), self.q_dim + 2 * self.kv_dim, bias=s.bias)
        self.o = nn.Linear(self.q_dim, int(s.width), bias=s.bias)
        self.rotary = rotary or Rotary(self.head_dim)  # layers of one head_dim share tables
        self.scale: float | None = None  # None = 1/sqrt(head_dim); muP sets its own

    def init_roles(self) -> tuple[list[nn.Linear], dict[nn.Linear, list[int]], list[nn.Linear]]:
        """For `shapesweep.trainers.mup`: `o` writes the residual stream; q|k|v is fused;
        nothing reads an FFN's inner width."""
        return [self.o], {self.qkv: [self.q_dim, self.kv_dim, self.kv_dim]}, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                           enable_gqa=self.n_kv_heads != self.n_heads)
        return self.o(y.transpose(1, 2).reshape(B, T, self.q_dim))


class Stage(nn.Module):
    """What `LM.hidden` runs, layer by layer: a module from the residual stream to the stream
    that reads and writes its leading `width` coordinates (a block, or a compiled region of
    alike blocks: `shapesweep.trainers.compiled.Region`)."""

    width: int

    def forward(self, stream: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class LMBlock(Stage):
    """What every family's block is (`FamilySpec.block`; torchtitan's `TransformerBlock`):
    built from its layer's `LayerShape` and the layer's shared `Rotary`, a `Stage` with what
    the trainer reads from a block: `LM` (`width`, the `ffn`'s routers), muP (`n_branches`,
    `set_branch_mult`, the modules' `init_roles()`), the analysis (`ffn`'s `down`
    projections), the compiled regions (`width`) and the torch export (`attn.scale`,
    `branch_mult`). Attributes only: a subclass sets them in its own `__init__`."""

    attn: Attention
    ffn: nn.Module
    n_branches: int  # residual writes (depth-muP's branches)
    branch_mult: float  # depth-muP's multiplier of each residual write, 1 otherwise

    def set_branch_mult(self, mult: float) -> None:
        """Scale every residual write of this block by `mult` (depth-muP)."""
        raise NotImplementedError


class Block(LMBlock):
    """Attention then FFN, pre-norm or OLMo-2 post-norm (norm on the output, before the add).

    `branch_mult` (depth-muP's, 1 otherwise) scales each residual write: the attention's and
    the FFN's (an hourglass FFN scales its own sub-blocks' writes).
    """

    def __init__(self, s: LayerShape, rotary: Rotary | None = None):
        super().__init__()
        self.width, self.attn_in, self.ffn_out = int(s.width), int(s.attn_in), int(s.ffn_out)
        self.pre = s.norm_order == "pre"
        self.attn = Attention(s, rotary)
        self.attn_norm = nn.RMSNorm(self.attn_in if self.pre else self.width)
        self.ffn = make_moe(s) if s.n_experts > 1 else make_ffn(s)
        # An FFN that maps the stream itself (hourglass: its own norms and residual adds) needs no norm.
        self.ffn_norm = (None if getattr(self.ffn, "updates_stream", False)
                         else nn.RMSNorm(self.width if self.pre else self.ffn_out))
        self.n_branches = 1 + getattr(self.ffn, "n_branches", 1)  # residual writes
        self.branch_mult = 1.0

    def set_branch_mult(self, mult: float) -> None:
        """Scale every residual write of this block by `mult` (depth-muP)."""
        self.branch_mult = mult
        if isinstance(self.ffn, HourglassFFN):  # the FFN that updates the stream (no ffn_norm)
            self.ffn.branch_mult = mult

    def _scaled(self, h: torch.Tensor) -> torch.Tensor:
        return h * self.branch_mult if self.branch_mult != 1.0 else h

    def forward(self, stream: torch.Tensor) -> torch.Tensor:
        S = stream.shape[-1]
        x = stream[..., : self.attn_in]
        h = self.attn(self.attn_norm(x)) if self.pre else self.attn_norm(self.attn(x))
        stream = stream + _widen(self._scaled(h), S)
        if self.ffn_norm is None:
            return self.ffn(stream)
        x = stream[..., : self.width]
        h = self.ffn(self.ffn_norm(x)) if self.pre else self.ffn_norm(self.ffn(x))
        return stream + _widen(self._scaled(h), S)


class LM(nn.Module):
    """Token embedding -> blocks on a global residual stream -> final RMSNorm -> unembedding.

    `block` is the family's (`FamilySpec.block`): built from each layer's `LayerShape` and the
    layer's shared `Rotary`, it maps the stream to the stream, reading and writing its leading
    `width` coordinates; `Block` unless a family brings its own."""

    def __init__(self, config, block: Callable[[LayerShape, Rotary], LMBlock] = Block):
        super().__init__()
        self.config = config
        shapes = config.layer_shapes()
        self.d_model = D = config.d_model
        self.widths = [int(s.width) for s in shapes]
        self.stream_width = max(D, *self.widths)
        self.resize = getattr(config, "resize", "carry")
        # Columns the embedding feeds layer 1 / coordinates the readout sees (D and D except
        # in the zero / projection resize modes, where the rest could never affect the output).
        self.embed_in, self.readout = end_widths(config, self.widths)
        table = max(self.embed_in, self.readout) if config.tie_embeddings else self.embed_in
        self.wte = nn.Embedding(config.vocab_size, table)
        rotaries = {hd: Rotary(hd) for hd in sorted({int(s.head_dim) for s in shapes})}
        self.blocks: Modules[LMBlock] = Modules(block(s, rotaries[int(s.head_dim)]) for s in shapes)
        # What `hidden` runs, as (first layer, module): None runs each block; a compiled trial
        # may run consecutive blocks of one shape as one region (shapesweep.trainers.compiled)
        self.stages: list[tuple[int, Stage]] | None = None
        # found once, not per micro-step: a dense model's aux_loss is then a plain 0.0
        self._routed: tuple[MoEFFN, ...] = tuple(b.ffn for b in self.blocks if isinstance(b.ffn, MoEFFN))
        # xformer's projection ablation: grown coordinates predicted from the previous layer.
        self.resizers: ModuleMap[nn.Linear] = ModuleMap()
        if self.resize == "projection":
            for layer, (a, b) in enumerate(zip(self.widths[:-1], self.widths[1:], strict=True), start=1):
                if b > a:
                    self.resizers[str(layer)] = nn.Linear(a, b - a, bias=config.bias)
        self.final_norm = nn.RMSNorm(self.readout)
        self.lm_head = (None if config.tie_embeddings
                        else nn.Linear(self.readout, config.vocab_size, bias=False))
        self.output_mult = 1.0  # muP's logit multiplier (set by shapesweep.trainers.mup.configure)

    def aux_loss(self) -> torch.Tensor | float:
        """The routers' load-balancing loss of the last forward (mean over layers) times the
        config's `router_aux_loss`; 0 for a dense model. The loop adds it to the objective."""
        if not self._routed:
            return 0.0
        return self.config.router_aux_loss * torch.stack([f.aux_loss for f in self._routed
                                                        if f.aux_loss is not None]).mean()

    def _grow(self, stream: torch.Tensor, layer: int, a: int, b: int) -> torch.Tensor:
        """Resize at the boundary into `layer` when the width grows a -> b (zero / projection)."""
        if self.resize == "carry" or b <= a:
            return stream
        if self.resize == "projection" and layer > 0:
            fill = self.resizers[str(layer)](stream[..., :a])
        else:
            fill = stream.new_zeros(*stream.shape[:-1], b - a)
        return torch.cat([stream[..., :a], fill, stream[..., b:]], dim=-1)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                z_loss: float = 0.0):
        """Logits [B, T, vocab]; given `targets`, the training (objective, reported loss)
        instead: cross-entropy (+ z-loss) of the readout, plus the routers' aux loss."""
        stream = self.hidden(idx)
        if targets is None:
            return self.decode(stream)
        objective, reported = self.objective(stream, targets, z_loss)
        return (objective + self.aux_loss() if self._routed else objective), reported

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """The residual stream after the last block."""
        # zero / projection: the embedding is truncated to layer 1's width on the way in
        stream = _widen(self.wte(idx)[..., : self.embed_in], self.stream_width)
        prev = self.embed_in
        for layer, stage in self.stages or enumerate(self.blocks):
            stream = self._grow(stream, layer, prev, stage.width)
            stream = stage(stream)
            prev = stage.width
        return stream

    def objective(self, stream: torch.Tensor, targets: torch.Tensor,
                  z_loss: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(CE + z-loss, CE) of the readout: one compiled region with the unembedding, so the
        logits are never held in fp32 (`shapesweep.trainers.objective`)."""
        return lm_loss(self.decode(stream), targets, z_loss)

    def decode(self, stream: torch.Tensor) -> torch.Tensor:
        """Logits of a residual stream: the final norm over the coordinates the readout sees
        (the last layer's state is read only where it can be non-zero on the way out), then the
        unembedding. The forward pass's last step, and the logit lens's decoder for every layer."""
        x = self.final_norm(stream[..., : self.readout])
        logits = (self.lm_head(x) if self.lm_head is not None
                  else F.linear(x, self.wte.weight[:, : self.readout]))
        return logits * self.output_mult if self.output_mult != 1.0 else logits
