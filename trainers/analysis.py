"""Seed 002 §4's representation analysis of a trained LM, per layer, on held-out tokens.

- **Matrix entropy of the residual stream** after each block. The stream is the model's
  whole global residual stream: d_model wide for a constant-width model, as wide as the
  widest layer for the ><former, whose wide stream seed 002 takes as its hidden state.
  Seed 002's Eq. 2 was lost from the seed text; this is the definition it cites (Skean et
  al. 2025; Queipo-de-Llano et al.): center the tokens x features matrix Z over tokens, take
  its singular values s_i, p_i = s_i^2 / sum_j s_j^2 (the covariance spectrum, normalised),
  H = -sum_i p_i log p_i / log r, with r = min(tokens - 1, features) the rank a centered
  Z can have. 1: every direction carries the same variance; 0: all variance in one.
- **MLP activation density**: the fraction of inner FFN activations with |a| > threshold,
  for each of `THRESHOLDS` (seed 002 counts a SwiGLU dimension active above a threshold;
  its Fig. 5 uses 0.1). The inner activation is the input of the FFN's down projection:
  act(gate) * up for swiglu, geglu and simple_gated, act(up) for relu and gelu, and for the
  hourglass FFN the k sub-blocks' inner activations pooled. Any FFN module names that
  projection `down` (a mixture of experts: each expert's, on the tokens routed to it).

One forward pass over `ANALYSIS_TOKENS` validation tokens, with forward hooks on the blocks;
seed 002 used WikiText-2's 253K tokens, a few thousand keep it a small part of a trial.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from shapesweep.common import UserError

THRESHOLDS = (0.01, 0.1, 1.0)
ANALYSIS_TOKENS = 4096


def wanted(model_config, train) -> bool:
    """Whether a trial ends with the analysis: `train.analysis`, else on for variable-width
    models (seed 002's family: its constant-width baseline is `shape: constant`), off otherwise."""
    language_model = hasattr(model_config, "layer_shapes")
    if train.analysis and not language_model:
        raise UserError("the representation analysis needs a language model (residual stream "
                        f"of tokens); {model_config.family} has none", key="train.analysis")
    if train.analysis is None:
        return model_config.family == "variable_width"
    return train.analysis


def matrix_entropy(z: torch.Tensor) -> float:
    """Normalized matrix entropy of a tokens x features matrix (see the module docstring)."""
    z = z.detach().double()
    z = z - z.mean(0)
    bound = min(z.shape[0] - 1, z.shape[1])
    if bound < 2:
        return math.nan  # one direction at most: nothing to spread over
    energy = torch.linalg.svdvals(z).square()
    if energy.sum() == 0:
        return 0.0  # every token the same point
    p = energy / energy.sum()
    p = p[p > 0]
    return float(-(p * p.log()).sum() / math.log(bound))


def above(a: torch.Tensor, thresholds=THRESHOLDS) -> torch.Tensor:
    """How many entries of `a` have |a| > t, for each threshold t (float64 counts)."""
    magnitude = a.detach().abs().flatten()
    return torch.stack([(magnitude > t).sum() for t in thresholds]).double().cpu()


def down_projections(block: nn.Module) -> list[nn.Module]:
    """The modules whose input is the block's inner FFN activation (see the module docstring)."""
    return [m for name, m in block.ffn.named_modules() if name.rsplit(".", 1)[-1] == "down"]


def check(model: nn.Module) -> None:
    """Refuse, before training, a model whose FFN the analysis cannot read."""
    for layer, block in enumerate(model.blocks, start=1):
        if not down_projections(block):
            raise UserError(f"layer {layer}'s FFN ({type(block.ffn).__name__}) has no `down` "
                            "projection for the activation density", key="train.analysis")


@torch.no_grad()
def analyse(model: nn.Module, tokens: torch.Tensor, autocast=contextlib.nullcontext,
            thresholds=THRESHOLDS) -> list[dict]:
    """One row per (layer, threshold): `layer` (1-based), `width` (the block's own width),
    `matrix_entropy` (the residual stream's after the block), `activation_density`, `threshold`."""
    entropy: dict[int, float] = {}
    counts = {layer: torch.zeros(len(thresholds), dtype=torch.float64) for layer in range(len(model.blocks))}
    sizes = dict.fromkeys(counts, 0)

    def after_block(layer, module, inputs, stream):
        with torch.autocast(stream.device.type, enabled=False):  # the SVD in float64
            entropy[layer] = matrix_entropy(stream.flatten(0, -2))

    def before_down(layer, module, inputs):
        counts[layer] += above(inputs[0], thresholds)
        sizes[layer] += inputs[0].numel()

    handles = []
    for layer, block in enumerate(model.blocks):
        handles.append(block.register_forward_hook(lambda *a, layer=layer: after_block(layer, *a)))
        for down in down_projections(block):
            handles.append(down.register_forward_pre_hook(lambda *a, layer=layer: before_down(layer, *a)))
    training = model.training
    model.eval()
    try:
        with autocast():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    return [{"layer": layer + 1, "width": block.width, "matrix_entropy": entropy[layer],
             "activation_density": float(counts[layer][i]) / max(sizes[layer], 1), "threshold": t}
            for layer, block in enumerate(model.blocks) for i, t in enumerate(thresholds)]


def analysis_tokens(val_x: torch.Tensor) -> torch.Tensor:
    """The first validation windows holding `ANALYSIS_TOKENS` tokens (all, if fewer are held out)."""
    n_seq = max(1, math.ceil(ANALYSIS_TOKENS / val_x.shape[1]))
    return val_x[:n_seq]
