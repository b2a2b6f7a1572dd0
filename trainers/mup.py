"""Initialisation and AdamW parameter groups: standard parametrization or muP.

muP (Yang et al., "Tensor Programs V"; the Adam column of their table 3), relative to
a base width `b` at which it coincides with standard parametrization:

- hidden matrices of a layer of width w (attention, FFN, seed 002's resize
  projections): init std ~ sqrt(b / w), Adam lr scaled by b / w. Every matrix of a
  variable-width layer uses that layer's own width (a projection, its fan-in).
- embeddings, norms, biases, scalars, a vision input projection: width-independent.
- the readout: its output is multiplied by b / width (`model.output_mult`); attention
  logits are scaled by 1/head_dim instead of 1/sqrt(head_dim) (`Attention.scale`), both
  equal to the standard values at the base width. The 1/head_dim rule assumes head_dim
  grows with width (n_heads fixed across the sweep).

Weight decay applies to matrices only; norms, biases, embeddings and scalars get none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import nn

from trainers.ffn import GatedFFN
from trainers.lm import LM, Attention
from trainers.vision import VisionMLP

LM_STD = 0.02  # GPT-2 / OLMo init std at the base width

# (parameter, init function, decays, lr_scale)
Rule = tuple[nn.Parameter, Callable[[torch.Tensor], None], bool, float]


def _normal(std: float) -> Callable[[torch.Tensor], None]:
    return lambda t: nn.init.normal_(t, mean=0.0, std=std)


def _const(value: float) -> Callable[[torch.Tensor], None]:
    return lambda t: nn.init.constant_(t, value)


def _linear(layer: nn.Linear, std: float, lr_scale: float) -> Iterator[Rule]:
    yield layer.weight, _normal(std), True, lr_scale
    if layer.bias is not None:
        yield layer.bias, _const(0.0), False, 1.0


def _lm_rules(model: LM, mup: bool, base: int) -> Iterator[Rule]:
    n_writes = sum(1 + len(getattr(b.ffn, "subs", [None])) for b in model.blocks)
    residual = 1 / math.sqrt(n_writes)  # GPT-2: outputs into the residual shrink with depth
    yield model.wte.weight, _normal(LM_STD), False, 1.0
    for layer, block in enumerate(model.blocks):
        width_mult = block.width / base if mup else 1.0
        for name, module in block.named_modules():
            if isinstance(module, nn.Linear):
                writes_residual = name.rsplit(".", 1)[-1] in ("o", "down")
                std = LM_STD / math.sqrt(width_mult) * (residual if writes_residual else 1.0)
                yield from _linear(module, std, 1.0 / width_mult)
            elif isinstance(module, nn.RMSNorm):
                yield module.weight, _const(1.0), False, 1.0
            elif isinstance(module, GatedFFN) and module.alpha is not None:
                yield module.alpha, _const(0.1), False, 1.0
            elif isinstance(module, Attention):  # standard: None = 1/sqrt(head_dim)
                module.scale = 1 / math.sqrt(module.head_dim * width_mult) if mup else None
        if str(layer) in model.resizers:
            proj = model.resizers[str(layer)]
            fan_in_mult = proj.in_features / base if mup else 1.0
            yield from _linear(proj, LM_STD / math.sqrt(fan_in_mult), 1.0 / fan_in_mult)
    yield model.final_norm.weight, _const(1.0), False, 1.0
    if model.lm_head is not None:
        yield from _linear(model.lm_head, LM_STD, 1.0)
    model.output_mult = base / model.readout if mup else 1.0  # the readout's fan-in


def _vision_rules(model: VisionMLP, mup: bool, base: int) -> Iterator[Rule]:
    c = model.config
    width_mult = c.d_z / base if mup else 1.0
    # Seed 004's fixed projection is a Gaussian / sqrt(d_x); the trained one starts the same.
    yield from _linear(model.w_in, 1 / math.sqrt(c.d_x), 1.0)
    for block in model.blocks:
        yield from _linear(block.w1, 1 / math.sqrt(c.d_z), 1.0 / width_mult)
        yield from _linear(block.w2, 1 / math.sqrt(c.d_h * c.n_layers), 1.0 / width_mult)
    yield from _linear(model.w_out, 1 / math.sqrt(c.d_z), 1.0)
    model.output_mult = base / c.d_z if mup else 1.0


def configure(model: nn.Module, config, train) -> list[dict]:
    """Initialise `model` for `train.parametrization` and return its AdamW param groups.

    Deterministic under `torch.manual_seed`. Each group holds `params`, `weight_decay` and
    `lr_scale` (the loop uses lr = schedule * train.lr * lr_scale). Frozen parameters
    (a fixed vision W_in) are initialised but left out of the groups.
    """
    mup, base = train.parametrization == "mup", train.mup_base_width
    rules = _vision_rules(model, mup, base) if isinstance(model, VisionMLP) else _lm_rules(model, mup, base)
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
