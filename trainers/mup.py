"""Initialisation and AdamW parameter groups: one table of init modes, muP among them.

`train.init` picks a row of `MODES`; every family goes through the same rules, so two
models with the same attention shapes start with the same q/k/v weights, and with the same
residual-write variance in all (the attention output is a residual write: see `scaled`):

- `normal` (OLMo-2, hourglass-ffn): every matrix and embedding N(0, 0.02); norms 1, biases 0.
- `scaled`: `normal`, with each residual-writing matrix (attention output, the FFN's last
  projection, each hourglass sub-block's last projection) times r = 1/sqrt(W), W the model's
  residual writes: n_layers x (1 attention + the FFN's writes: 1, or k for an hourglass FFN).
  A conventional model has W = 2 n_layers (GPT-2's 1/sqrt(2 n_layers)); every family counts
  the same way, so two models with the same writes start with the same residual-write
  variance (before 2026-12-03 it counted 2 n_layers for every family, which gave a k-sub-block
  hourglass model (1+k)/2 times the variance: issue 56).
- `xavier` (simple-gated): every projection matrix xavier-uniform with gain 1, the same at
  every depth (a fused q|k|v or gate|up matrix as its separate parts); embeddings normal.
- `mup`: `scaled` at muP's base shape, plus muP's rules below.

muP (Yang et al., "Tensor Programs V", the Adam column of their table 3) is a rule *per
matrix*, by that matrix's own fan-in relative to the same matrix in a base model (`Base`:
residual width b = `mup_base_width`, FFN inner width b_h = `mup_base_d_h`, default 4b).
At the base shape every rule below reduces to `scaled`:

| matrix                                                            | fan-in           | base fan-in | init std                  | Adam lr x    |
|-------------------------------------------------------------------|------------------|-------------|---------------------------|--------------|
| q/k/v (fused qkv)                                                 | attn_in          | b           | 0.02 sqrt(b / fan_in)     | b / fan_in   |
| attention output o (writes the stream)                            | n_heads head_dim | b           | 0.02 sqrt(b / fan_in) r   | b / fan_in   |
| FFN up / gate (each hourglass sub-block, each expert), MoE router | width            | b           | 0.02 sqrt(b / fan_in)     | b / fan_in   |
| FFN down (writes the stream)                                      | d_h              | b_h         | 0.02 sqrt(b_h / fan_in) r | b_h / fan_in |
| ><former resize projection                                        | its input width  | b           | 0.02 sqrt(b / fan_in)     | b / fan_in   |
| embedding, norms, biases, scalars                                 | -                | -           | as `normal`               | 1            |
| readout                                                           | readout width    | b           | 0.02; logits x b / fan_in | 1            |

r is the residual-write factor: 1/sqrt(W) (`scaled`). Attention logits are scaled
by 1/head_dim instead of 1/sqrt(head_dim) (`Attention.scale`: 1/sqrt(head_dim x q_dim / b),
equal to the standard value at the base width; the rule assumes head_dim grows with width,
n_heads fixed across the sweep). Before this table, every matrix of a block was scaled by
the block's residual width, the down projection included, so an FFN whose d_h/d_model
differed from the base's trained its down projection at another effective rate.

Depth-muP (`train.depth_mup`): with m the model's depth relative to the base's and the
choice's exponent alpha, every residual branch's output is multiplied by m^-alpha
(`Block.branch_mult`, `HourglassFFN.branch_mult`), every matrix inside a branch trains at
lr x m^(alpha - 1), and r is the base model's (the multiplier carries the depth). At m = 1
it is plain muP. The choices differ in how they count depth (B: the model's residual
branches, = W; L: its layers):

| `depth_mup`           | alpha | m                  | branch output x | branch matrices' Adam lr x | Adam eps x | source                                  |
|-----------------------|-------|--------------------|-----------------|----------------------------|------------|-----------------------------------------|
| `true` (or `tp6`)     | 1/2   | B / (2 base_depth) | m^-1/2          | m^-1/2                     | 1          | Yang et al., "Tensor Programs VI", Adam |
| `completep`           | 1     | L / base_depth     | 1 / m           | 1                          | 1 / m      | Dey et al. 2025, CompleteP, as written  |
| `completep-subblocks` | 1     | B / (2 base_depth) | 1 / m           | 1                          | 1          | this project's CompleteP over branches  |

base_depth is `mup_base_depth`. `tp6` and `completep-subblocks` count every residual branch
(each hourglass sub-block writes the stream and is a branch of its own) against a
conventional base of 2 x base_depth branches, whose r is 1/sqrt(2 base_depth): a k 8
hourglass at L 4 has m = 36 / 8 and each branch x 0.22 under `completep-subblocks`, the
variant the lr-transfer study's depth sweeps first ran under the name `completep`
(docs/lr-transfer.md). `completep` is the paper's rule: m = L / L_base counts layers (one
multiplier for a layer's attention and FFN writes alike), so that k 8 hourglass at L_base
is plain muP; its base is the same model at L_base layers (r = 1/sqrt(W L_base / L)), and
its Adam epsilon is CompleteP's depth rule, eps x m^-alpha on every parameter group, as the
paper's reference implementation applies it (EleutherAI nanoGPT-mup, branch `completep`,
`configure_optimizers`). CompleteP's width factor on eps (x m_N^-1) and its width-scaled
weight decay are muP's choices here and stay off under every rule; norms inside a branch
keep lr x 1 (CompleteP's m^(alpha - 1) is 1 at alpha = 1).

Vision (hourglass-mlp, which states no init beyond a random Gaussian W_in): each matrix's
`normal` std is 1/sqrt(fan_in) instead of 0.02, and a block's one residual write counts
once per layer (1/sqrt(n_layers) under `scaled` / `mup`); muP's lr and depth rules as above,
W1 reading d_z (base b) and W2 reading d_h (base b_h), one branch per block.

Each family's spec names its rules (`init=`): `lm_rules` here for every LM family, which
asks each block's modules for their roles (`init_roles()`: the residual writers, the fused
matrices and the matrices that read the FFN's inner width); hourglass-mlp's in
`shapesweep.trainers.vision.init_rules`.

Weight decay applies to matrices only; norms, biases, embeddings and scalars get none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from shapesweep.families.base import load, of
from shapesweep.trainers.ffn import GatedFFN
from shapesweep.trainers.lm import LM, Attention, LMBlock
from shapesweep.trainers.models import blocks_of

LM_STD = 0.02  # GPT-2 / OLMo init std at the base width
# `train.depth_mup` -> (its exponent, whether it counts layers (else residual branches), eps rule)
DEPTH_RULES = {True: (0.5, False, False), "tp6": (0.5, False, False),
               "completep": (1.0, True, True), "completep-subblocks": (1.0, False, False)}
ADAM_EPS = 1e-8  # torch's AdamW default, which the loop uses (CompleteP scales it per group)


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

# What initialises a parameter in place (torch.nn.init's functions also return it, unused here)
Init = Callable[[torch.Tensor], object]
# (parameter, init function, decays, lr_scale)
Rule = tuple[torch.Tensor, Init, bool, float]


def _normal(std: float) -> Init:
    return lambda t: nn.init.normal_(t, mean=0.0, std=std)


def _const(value: float) -> Init:
    return lambda t: nn.init.constant_(t, value)


def _xavier(parts: list[int]) -> Init:
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


@dataclass(frozen=True)
class Base:
    """muP's base shape: the model at which every rule reduces to `scaled` (see the table)."""

    width: int  # b: residual width (and attention width, n_heads x head_dim)
    d_h: int  # b_h: FFN inner width
    depth: int | None  # layers of a conventional base model; None: no depth-muP
    depth_alpha: float = 0.5  # depth-muP's exponent: 1/2 Tensor Programs VI, 1 CompleteP
    counts_layers: bool = False  # depth m = L / depth (CompleteP), else branches / (2 depth)
    scales_eps: bool = False  # Adam eps x m^-alpha (CompleteP)

    @classmethod
    def of(cls, train) -> Base:
        alpha, layers, eps = DEPTH_RULES[train.depth_mup] if train.depth_mup else (0.5, False, False)
        return cls(width=train.mup_base_width,
                   d_h=train.mup_base_d_h or 4 * train.mup_base_width,
                   depth=train.mup_base_depth if train.depth_mup else None,
                   depth_alpha=alpha, counts_layers=layers, scales_eps=eps)

    def fan_in_mult(self, fan_in: int, reads_inner: bool, mode: InitMode) -> float:
        """fan_in / the base's fan-in of the same matrix (1 outside muP)."""
        return fan_in / (self.d_h if reads_inner else self.width) if mode.mup else 1.0

    def branches(self, per_layer: int) -> int:
        """B_base: the residual branches of a base model with `per_layer` writes a layer."""
        return per_layer * (self.depth or 0)

    def depth_mult(self, branches: int, per_layer: int = 2, layers: int | None = None) -> float:
        """m: the model's depth over the base's, in layers (CompleteP; `layers`, else
        branches / per_layer) or in residual branches (B / B_base)."""
        if self.counts_layers:
            return (layers if layers is not None else branches / per_layer) / (self.depth or 1)
        return branches / self.branches(per_layer)

    def depth_scales(self, branches: int, mode: InitMode, per_layer: int = 2,
                     layers: int | None = None) -> tuple[float, float]:
        """Depth-muP's branch multiplier m^-alpha and its branch matrices' lr factor
        m^(alpha - 1); (1, 1) without it."""
        if not (mode.mup and self.depth):
            return 1.0, 1.0
        m = self.depth_mult(branches, per_layer, layers)
        return m ** -self.depth_alpha, m ** (self.depth_alpha - 1)

    def eps_scale(self, model: nn.Module, mode: InitMode) -> float:
        """CompleteP's Adam epsilon factor (L / L_base)^-alpha; 1 for every other rule."""
        if not (mode.mup and self.depth and self.scales_eps):
            return 1.0
        return (len(blocks_of(model)) / self.depth) ** -self.depth_alpha


@runtime_checkable
class Roles(Protocol):
    """A module that declares its matrices' roles for initialisation (see `_roles`)."""

    def init_roles(self) -> tuple[list[nn.Linear], dict[nn.Linear, list[int]], list[nn.Linear]]: ...


def _roles(block: LMBlock) -> tuple[set[int], dict[int, list[int]], set[int]]:
    """The block's matrices that write the residual stream, the fused ones with the
    matrices they stand for (q|k|v, gate|up), and those whose fan-in is the FFN's inner
    width, as its modules declare in `init_roles()`."""
    writers: set[int] = set()
    fused: dict[int, list[int]] = {}
    inner: set[int] = set()
    for module in block.modules():
        if isinstance(module, Roles):  # it has `init_roles`
            residual, parts, reads_inner = module.init_roles()
            writers |= {id(layer) for layer in residual}
            fused |= {id(layer): p for layer, p in parts.items()}
            inner |= {id(layer) for layer in reads_inner}
    return writers, fused, inner


def lm_rules(model: LM, mode: InitMode, base: Base) -> Iterator[Rule]:
    """The rules of the decoder-only LM (`shapesweep.trainers.lm.LM`), every LM family's."""
    writes = sum(block.n_branches for block in model.blocks)  # W: every residual write
    layers = len(model.blocks)
    branch_mult, branch_lr = base.depth_scales(writes, mode, layers=layers)
    if mode.mup and base.depth:  # depth-muP: the multiplier carries the depth, r is the base's
        base_writes = writes * base.depth / layers if base.counts_layers else base.branches(2)
        residual = 1 / math.sqrt(base_writes)
    else:
        residual = 1 / math.sqrt(writes) if mode.depth_scaled else 1.0
    yield model.wte.weight, _normal(LM_STD), False, 1.0
    for layer, block in enumerate(model.blocks):
        block.set_branch_mult(branch_mult)
        writers, fused, inner = _roles(block)
        for module in block.modules():
            if isinstance(module, nn.Linear):
                mult = base.fan_in_mult(module.in_features, id(module) in inner, mode)
                std = LM_STD / math.sqrt(mult) * (residual if id(module) in writers else 1.0)
                yield from linear_rules(module, std, branch_lr / mult, mode,
                                        fused.get(id(module)))
            elif isinstance(module, nn.RMSNorm):
                yield module.weight, _const(1.0), False, 1.0
            elif isinstance(module, GatedFFN) and module.alpha is not None:
                yield module.alpha, _const(0.1), False, 1.0
            elif isinstance(module, Attention):  # standard: None = 1/sqrt(head_dim)
                width_mult = base.fan_in_mult(module.q_dim, False, mode)
                module.scale = 1 / math.sqrt(module.head_dim * width_mult) if mode.mup else None
        if str(layer) in model.resizers:
            proj = model.resizers[str(layer)]
            mult = base.fan_in_mult(proj.in_features, False, mode)
            yield from linear_rules(proj, LM_STD / math.sqrt(mult), 1.0 / mult, mode)
    yield model.final_norm.weight, _const(1.0), False, 1.0
    if model.lm_head is not None:
        yield from linear_rules(model.lm_head, LM_STD, 1.0, mode)
    model.output_mult = base.width / model.readout if mode.mup else 1.0  # the readout's fan-in


def configure(model: nn.Module, config, train) -> list[dict]:
    """Initialise `model` by `train.init` and return its AdamW param groups.

    Deterministic under `torch.manual_seed`. Each group holds `params`, `weight_decay` and
    `lr_scale` (the loop uses lr = schedule * train.lr * lr_scale). Frozen parameters
    (a fixed vision W_in) are initialised but left out of the groups.
    """
    mode, base = MODES[train.init], Base.of(train)
    rules = load(of(config).init)(model, mode, base)  # the family's
    groups: dict[tuple[float, float], list[torch.Tensor]] = {}
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
    eps = base.eps_scale(model, mode)  # CompleteP's; AdamW reads a group's own "eps"
    return [{"params": params, "weight_decay": wd, "lr_scale": lr_scale,
             **({"eps": ADAM_EPS * eps} if eps != 1.0 else {})}
            for (wd, lr_scale), params in groups.items()]
