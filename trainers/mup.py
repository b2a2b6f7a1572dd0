"""Initialisation and AdamW parameter groups: one table of init modes, muP among them.

`train.init` picks a row of `MODES`; every family goes through the same rules, so two
models with the same attention shapes start with the same attention weights:

- `normal` (OLMo-2, seed 000): every matrix and embedding N(0, 0.02); norms 1, biases 0.
- `scaled`: `normal`, with each residual-writing matrix (attention output, the FFN's last
  projection, each hourglass sub-block's last projection) times 1/sqrt(2 * n_layers).
  It counts layers (an attention and an FFN write per layer), never FFN sub-blocks.
- `xavier` (seed 003): every projection matrix xavier-uniform with gain 1, the same at
  every depth (a fused q|k|v or gate|up matrix as its separate parts); embeddings normal.
- `mup`: `scaled` plus muP's width rules (below).

muP (Yang et al., "Tensor Programs V"; the Adam column of their table 3), relative to
a base width `b` at which it coincides with `scaled`:

- hidden matrices of a layer of width w (attention, FFN, seed 002's resize
  projections): init std ~ sqrt(b / w), Adam lr scaled by b / w. Every matrix of a
  variable-width layer uses that layer's own width (a projection, its fan-in).
- embeddings, norms, biases, scalars, a vision input projection: width-independent.
- the readout: its output is multiplied by b / width (`model.output_mult`); attention
  logits are scaled by 1/head_dim instead of 1/sqrt(head_dim) (`Attention.scale`), both
  equal to the standard values at the base width. The 1/head_dim rule assumes head_dim
  grows with width (n_heads fixed across the sweep).

Vision (seed 004, which states no init beyond a random Gaussian W_in): each matrix's
`normal` std is 1/sqrt(fan_in) instead of 0.02, and a block's one residual write counts
once per layer (1/sqrt(n_layers) under `scaled` / `mup`).

Weight decay applies to matrices only; norms, biases, embeddings and scalars get none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from shapesweep.trainers.ffn import GatedFFN
from shapesweep.trainers.lm import LM, Attention
from shapesweep.trainers.vision import VisionMLP
from torch import nn

LM_STD = 0.02  # GPT-2 / OLMo init std at the base width


@dataclass(frozen=True)
class InitMode:
    xavier: bool  # matrices xavier-uniform (gain 1) instead of N(0, std)
    depth_scaled: bool  # residual writes x 1/sqrt(writes per layer * n_layers)
    mup: bool  # muP's width rules: std, lr, readout multiplier, attention scale


MODES = {
    "normal": InitMode(xavier=False, depth_scaled=False, mup=False),
    "scaled": InitMode(xavier=False, depth_scaled=True, mup=False),
    "xavier": InitMode(xavier=True, depth_scaled=False, mup=False),
    "mup": InitMode(xavier=False, depth_scaled=True, mup=True),
}

# (parameter, init function, decays, lr_scale)
Rule = tuple[nn.Parameter, Callable[[torch.Tensor], None], bool, float]


def _normal(std: float) -> Callable[[torch.Tensor], None]:
    return lambda t: nn.init.normal_(t, mean=0.0, std=std)


def _const(value: float) -> Callable[[torch.Tensor], None]:
    return lambda t: nn.init.constant_(t, value)


def _xavier(parts: list[int]) -> Callable[[torch.Tensor], None]:
    """Xavier-uniform on each block of rows: a fused matrix starts as its parts would."""
    def init(t: torch.Tensor) -> None:
        for block in t.split(parts, dim=0):
            nn.init.xavier_uniform_(block, gain=1.0)
    return init


def _linear(layer: nn.Linear, std: float, lr_scale: float, mode: InitMode,
            parts: list[int] | None = None) -> Iterator[Rule]:
    init = _xavier(parts or [layer.out_features]) if mode.xavier else _normal(std)
    yield layer.weight, init, True, lr_scale
    if layer.bias is not None:
        yield layer.bias, _const(0.0), False, 1.0


def _parts(name: str, module: nn.Linear, block) -> list[int]:
    """The separate matrices a fused one stands for (q|k|v, gate|up)."""
    if name.endswith("qkv"):
        a = block.attn
        return [a.q_dim, a.kv_dim, a.kv_dim]
    if name.endswith("gate_up"):
        return [module.out_features // 2] * 2
    return [module.out_features]


def _lm_rules(model: LM, mode: InitMode, base: int) -> Iterator[Rule]:
    depth = 1 / math.sqrt(2 * len(model.blocks))  # an attention and an FFN write per layer
    residual = depth if mode.depth_scaled else 1.0
    yield model.wte.weight, _normal(LM_STD), False, 1.0
    for layer, block in enumerate(model.blocks):
        width_mult = block.width / base if mode.mup else 1.0
        for name, module in block.named_modules():
            if isinstance(module, nn.Linear):
                writes_residual = name.rsplit(".", 1)[-1] in ("o", "down")
                std = LM_STD / math.sqrt(width_mult) * (residual if writes_residual else 1.0)
                yield from _linear(module, std, 1.0 / width_mult, mode, _parts(name, module, block))
            elif isinstance(module, nn.RMSNorm):
                yield module.weight, _const(1.0), False, 1.0
            elif isinstance(module, GatedFFN) and module.alpha is not None:
                yield module.alpha, _const(0.1), False, 1.0
            elif isinstance(module, Attention):  # standard: None = 1/sqrt(head_dim)
                module.scale = 1 / math.sqrt(module.head_dim * width_mult) if mode.mup else None
        if str(layer) in model.resizers:
            proj = model.resizers[str(layer)]
            fan_in_mult = proj.in_features / base if mode.mup else 1.0
            yield from _linear(proj, LM_STD / math.sqrt(fan_in_mult), 1.0 / fan_in_mult, mode)
    yield model.final_norm.weight, _const(1.0), False, 1.0
    if model.lm_head is not None:
        yield from _linear(model.lm_head, LM_STD, 1.0, mode)
    model.output_mult = base / model.readout if mode.mup else 1.0  # the readout's fan-in


def _vision_rules(model: VisionMLP, mode: InitMode, base: int) -> Iterator[Rule]:
    c = model.config
    width_mult = c.d_z / base if mode.mup else 1.0
    residual = 1 / math.sqrt(c.n_layers) if mode.depth_scaled else 1.0  # one write per block
    # Seed 004's fixed projection is a Gaussian / sqrt(d_x); the trained one starts the same.
    yield from _linear(model.w_in, 1 / math.sqrt(c.d_x), 1.0, mode)
    for block in model.blocks:
        yield from _linear(block.w1, 1 / math.sqrt(c.d_z), 1.0 / width_mult, mode)
        yield from _linear(block.w2, residual / math.sqrt(c.d_h), 1.0 / width_mult, mode)
    yield from _linear(model.w_out, 1 / math.sqrt(c.d_z), 1.0, mode)
    model.output_mult = base / c.d_z if mode.mup else 1.0


def configure(model: nn.Module, config, train) -> list[dict]:
    """Initialise `model` by `train.init` and return its AdamW param groups.

    Deterministic under `torch.manual_seed`. Each group holds `params`, `weight_decay` and
    `lr_scale` (the loop uses lr = schedule * train.lr * lr_scale). Frozen parameters
    (a fixed vision W_in) are initialised but left out of the groups.
    """
    mode, base = MODES[train.init], train.mup_base_width
    rules = (_vision_rules if isinstance(model, VisionMLP) else _lm_rules)(model, mode, base)
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    seen: set[int] = set()
    with torch.no_grad():
        for param, init, decays, lr_scale in rules:
            init(param)
            seen.add(id(param))
            if param.requires_grad:
                key = (train.weight_decay if decays else 0.0, lr_scale)
                groups.setdefault(key, []).append(param)
    missed = [name for name, p in model.named_parameters() if id(p) not in seen]
    if missed:
        raise RuntimeError(f"configure has no init rule for parameters {missed}")
    return [{"params": params, "weight_decay": wd, "lr_scale": lr_scale}
            for (wd, lr_scale), params in groups.items()]
