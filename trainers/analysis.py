"""xformer §4's representation analysis of a trained LM, per layer, on held-out sequences.

- **Matrix entropy of the residual stream** after each block (§4.2, Fig. 7). The stream is the
  model's whole global residual stream: d_model wide for a constant-width model, as wide as the
  widest layer for the ><former, whose wide stream the xformer paper takes as its hidden state.
  The paper's Eq. 2 was lost from its text; it follows Queipo-de-Llano et al. (2025, "Attention
  sinks and compression valleys in LLMs are two sides of the same coin"), whose matrix entropy
  is that of Skean et al. (2025, "Layer by layer"): for one sequence's tokens x features
  matrix Z itself (not centred: a massive activation on one token is exactly what makes a
  compression valley), with singular values s_i, p_i = s_i^2 / sum_j s_j^2 and
  H(Z) = -sum_i p_i log p_i / log r, r = min(tokens, features) the rank Z can have. 1: every
  direction carries the same energy; 0: one direction carries all of it. Each sequence is its
  own matrix; a layer's value is the mean over sequences.
- **MLP activation density** (§4.1): the fraction of inner FFN activations with |a| > threshold,
  for each of `THRESHOLDS` (xformer counts a SwiGLU dimension active above a threshold;
  its Fig. 5 uses 0.1). The inner activation is the input of the FFN's down projection:
  act(gate) * up for swiglu, geglu and simple_gated, act(up) for relu and gelu, and for the
  hourglass FFN the k sub-blocks' inner activations pooled. Any FFN module names that
  projection `down` (a mixture of experts: each expert's, on the tokens routed to it).
- **Logit lens** (§4.3, Fig. 8; nostalgebraist 2020): each layer's stream decoded as the
  model decodes its last one (`LM.decode`: the final RMSNorm over the coordinates the
  unembedding reads, then the unembedding), and per token the target's log probability, the
  entropy of the decoded distribution, and the symmetrized KL divergence (the mean of the two
  directions) between this layer's and the previous one's decoded distributions (layer 1's
  previous is the embedding). A layer's value is the mean over tokens.

Tokens: whole held-out sequences holding at least `TOKENS_PER_FEATURE` tokens per stream
feature in all (and at least `MIN_TOKENS`), so the wider ><former stream is analysed on more
of them; one forward pass per batch of sequences, with hooks on the blocks. The xformer paper used
WikiText-2's 253K tokens; a few per feature keep it a small part of a trial. Every measure is
taken inside the forward pass, where a sharded (FSDP) model's decoder weights are gathered.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from shapesweep.common import UserError
from shapesweep.families.base import of
from shapesweep.trainers.lm import LM, LMBlock

THRESHOLDS = (0.01, 0.1, 1.0)
MIN_TOKENS = 4096
TOKENS_PER_FEATURE = 8  # analysed tokens per feature of the residual stream, in all
LOGIT_ELEMENTS = 2**24  # decoded logits held at once per layer (tokens x vocab), bounding memory
LENS = ("lens_logprob", "lens_entropy", "lens_kl")


def wanted(model_config, train) -> bool:
    """Whether a trial ends with the analysis: `train.analysis`, else its family's default
    (`FamilySpec.analysis`: on for xformer's variable-width family, off otherwise)."""
    spec = of(model_config)
    if train.analysis and not spec.task.reads_tokens:
        raise UserError("the representation analysis needs a language model (residual stream "
                        f"of tokens); {model_config.family} has none", key="train.analysis")
    if train.analysis is None:
        return spec.analysis
    return train.analysis


def matrix_entropy(z: torch.Tensor) -> torch.Tensor:
    """Normalized matrix entropy (see the module docstring) of each tokens x features matrix
    in `z` [..., tokens, features]: one value per leading index, float64; NaN when the rank
    bound is below 2, 0 for an all-zero matrix."""
    z = z.detach().double()
    rank = min(z.shape[-2], z.shape[-1])
    if rank < 2:
        return torch.full(z.shape[:-2], math.nan, dtype=torch.float64, device=z.device)
    energy = torch.linalg.svdvals(z).square()
    total = energy.sum(-1, keepdim=True)
    p = energy / total.clamp_min(torch.finfo(torch.float64).tiny)
    return -torch.special.xlogy(p, p).sum(-1) / math.log(rank)


def above(a: torch.Tensor, thresholds=THRESHOLDS) -> torch.Tensor:
    """How many entries of `a` have |a| > t, for each threshold t (float64 counts)."""
    magnitude = a.detach().abs().flatten()
    return torch.stack([(magnitude > t).sum() for t in thresholds]).double().cpu()


def _lm(model: nn.Module) -> LM:
    """`model` as the LM whose blocks, stream and decoder the analysis reads."""
    if not isinstance(model, LM):
        raise UserError(f"the representation analysis reads shapesweep's LM, not a {type(model).__name__}",
                        key="train.analysis")
    return model


def down_projections(block: LMBlock) -> list[nn.Module]:
    """The modules whose input is the block's inner FFN activation (see the module docstring)."""
    return [m for name, m in block.ffn.named_modules() if name.rsplit(".", 1)[-1] == "down"]


def check(model: nn.Module) -> None:
    """Refuse, before training, a model whose FFN the analysis cannot read."""
    for layer, block in enumerate(_lm(model).blocks, start=1):
        if not down_projections(block):
            raise UserError(f"layer {layer}'s FFN ({type(block.ffn).__name__}) has no `down` "
                            "projection for the activation density", key="train.analysis")


def sequences(val_x: torch.Tensor, val_y: torch.Tensor, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The first held-out sequences (inputs, targets) holding max(MIN_TOKENS, TOKENS_PER_FEATURE
    x the model's stream width) tokens; all of them if fewer are held out."""
    tokens = max(MIN_TOKENS, TOKENS_PER_FEATURE * _lm(model).stream_width)
    n_seq = max(1, math.ceil(tokens / val_x.shape[1]))
    return val_x[:n_seq], val_y[:n_seq]


class _Lens:
    """Logit-lens sums of one batch: each layer's stream decoded in chunks of tokens, with the
    previous layer's (log) probabilities kept for the KL."""

    def __init__(self, model: LM, targets: torch.Tensor, sums: torch.Tensor):
        self.model, self.targets, self.sums = model, targets.flatten(), sums
        self.chunk = max(1, LOGIT_ELEMENTS // model.config.vocab_size)
        self.previous: list[tuple[torch.Tensor, torch.Tensor]] = []  # per chunk: (log p, p)

    def __call__(self, layer: int | None, stream: torch.Tensor) -> None:
        """Decode `stream` (after block `layer`; None: the embedding) and add its sums."""
        current = []
        for i, h in enumerate(stream.flatten(0, -2).split(self.chunk)):
            logp = F.log_softmax(self.model.decode(h).float(), dim=-1)
            p = logp.exp()
            current.append((logp, p))
            if layer is None:
                continue
            start = i * self.chunk
            target = logp.gather(1, self.targets[start:start + len(h), None].to(logp.device))
            entropy = -(p * logp).sum(-1)
            logq, q = self.previous[i]
            kl = 0.5 * ((p - q) * (logp - logq)).sum(-1)
            self.sums[layer] += torch.stack([target.sum(), entropy.sum(), kl.sum()]).double().cpu()
        self.previous = current


@torch.no_grad()
def analyse(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast=contextlib.nullcontext,
            thresholds=THRESHOLDS) -> list[dict]:
    """One row per (layer, threshold) for the held-out sequences `x` and their next tokens `y`
    [sequences, seq_len]: `layer` (1-based), `width` (the block's own width), `matrix_entropy`
    (the residual stream's after the block, mean over sequences), `lens_logprob`,
    `lens_entropy`, `lens_kl` (mean over tokens), `activation_density`, `threshold`."""
    model = _lm(model)
    n_layers, device = len(model.blocks), next(model.parameters()).device
    entropy = torch.zeros(n_layers, dtype=torch.float64)
    lens = torch.zeros(n_layers, len(LENS), dtype=torch.float64)
    counts = torch.zeros(n_layers, len(thresholds), dtype=torch.float64)
    sizes = [0] * n_layers
    # sequences per forward: the lens holds 4 tensors of tokens x vocab (log p and p, twice)
    per_batch = max(1, LOGIT_ELEMENTS * 4 // (x.shape[1] * model.config.vocab_size))
    state: dict = {}

    def before_first(module, inputs):
        state["lens"](None, inputs[0])

    def after_block(layer, module, inputs, stream):
        with torch.autocast(stream.device.type, enabled=False):  # the SVD in float64
            entropy[layer] += matrix_entropy(stream).sum().cpu()
        state["lens"](layer, stream)

    def before_down(layer, module, inputs):
        counts[layer] += above(inputs[0], thresholds)
        sizes[layer] += inputs[0].numel()

    handles = [model.blocks[0].register_forward_pre_hook(before_first)]
    for layer, block in enumerate(model.blocks):
        handles.append(block.register_forward_hook(lambda *a, layer=layer: after_block(layer, *a)))
        for down in down_projections(block):
            handles.append(down.register_forward_pre_hook(lambda *a, layer=layer: before_down(layer, *a)))
    training = model.training
    model.eval()
    try:
        for xs, ys in zip(x.split(per_batch), y.split(per_batch), strict=True):
            state["lens"] = _Lens(model, ys, lens)
            with autocast():
                model(xs.to(device))
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    entropy /= len(x)
    lens /= y.numel()
    return [{"layer": layer + 1, "width": block.width, "matrix_entropy": float(entropy[layer]),
             **dict(zip(LENS, lens[layer].tolist(), strict=True)),
             "activation_density": float(counts[layer][i]) / max(sizes[layer], 1), "threshold": t}
            for layer, block in enumerate(model.blocks) for i, t in enumerate(thresholds)]
