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

Each family's spec names its rules (`init=`): `lm_rules` here for every LM family, which
asks each block's modules for their roles (`init_roles()`: the residual writers and the
fused matrices); seed 004's in `shapesweep.trainers.vision.init_rules`.

Weight decay applies to matrices only; norms, biases, embeddings and scalars get none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from shapesweep.trainers.ffn import GatedFFN
from shapesweep.trainers.lm import LM, Attention
from torch import nn

from shapesweep.families.base import load, of

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


def linear_rules(layer: nn.Linear, std: float, lr_scale: float, mode: InitMode,
                 parts: list[int] | None = None) -> Iterator[Rule]:
    init = _xavier(parts or [layer.out_features]) if mode.xavier else _normal(std)
    yield layer.weight, init, True, lr_scale
    if layer.bias is not None:
        yield layer.bias, _const(0.0), False, 1.0


def _roles(block: nn.Module) -> tuple[set[int], dict[int, list[int]]]:
    """The block's matrices that write the residual stream, and the fused ones with the
    matrices they stand for (q|k|v, gate|up), as its modules declare in `init_roles()`."""
    writers: set[int] = set()
    fused: dict[int, list[int]] = {}
    for module in block.modules():
        if hasattr(module, "init_roles"):
            residual, parts = module.init_roles()
            writers |= {id(layer) for layer in residual}
            fused |= {id(layer): p for layer, p in parts.items()}
    return writers, fused


def lm_rules(model: LM, mode: InitMode, base: int) -> Iterator[Rule]:
    """The rules of the decoder-only LM (`shapesweep.trainers.lm.LM`), every LM family's."""
    depth = 1 / math.sqrt(2 * len(model.blocks))  # an attention and an FFN write per layer
    residual = depth if mode.depth_scaled else 1.0
    yield model.wte.weight, _normal(LM_STD), False, 1.0
    for layer, block in enumerate(model.blocks):
        width_mult = block.width / base if mode.mup else 1.0
        writers, fused = _roles(block)
        for module in block.modules():
            if isinstance(module, nn.Linear):
                std = LM_STD / math.sqrt(width_mult) * (residual if id(module) in writers else 1.0)
                yield from linear_rules(module, std, 1.0 / width_mult, mode, fused.get(id(module)))
            elif isinstance(module, nn.RMSNorm):
                yield module.weight, _const(1.0), False, 1.0
            elif isinstance(module, GatedFFN) and module.alpha is not None:
                yield module.alpha, _const(0.1), False, 1.0
            elif isinstance(module, Attention):  # standard: None = 1/sqrt(head_dim)
                module.scale = 1 / math.sqrt(module.head_dim * width_mult) if mode.mup else None
        if str(layer) in model.resizers:
            proj = model.resizers[str(layer)]
            fan_in_mult = proj.in_features / base if mode.mup else 1.0
            yield from linear_rules(proj, LM_STD / math.sqrt(fan_in_mult), 1.0 / fan_in_mult, mode)
    yield model.final_norm.weight, _const(1.0), False, 1.0
    if model.lm_head is not None:
        yield from linear_rules(model.lm_head, LM_STD, 1.0, mode)
    model.output_mult = base / model.readout if mode.mup else 1.0  # the readout's fan-in


def configure(model: nn.Module, config, train) -> list[dict]:
    """Initialise `model` by `train.init` and return its AdamW param groups.

    Deterministic under `torch.manual_seed`. Each group holds `params`, `weight_decay` and
    `lr_scale` (the loop uses lr = schedule * train.lr * lr_scale). Frozen parameters
    (a fixed vision W_in) are initialised but left out of the groups.
    """
    rules = load(of(config).init)(model, MODES[train.init], train.mup_base_width)  # the family's
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
