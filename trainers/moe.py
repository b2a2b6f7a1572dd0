"""Mixture-of-experts FFN: token-choice top-k routing over gated experts (xformer's 3B/1B MoE).

A bias-free router (width -> n_experts) scores each token; the token goes to its top
`n_active_experts` experts, each a `GatedFFN` of width d_h, and their outputs are summed,
weighted by the router's softmax probabilities (not renormalised over the chosen k, as
in Switch and OLMoE, so the LM loss trains the router even at k = 1).

Load balancing (Switch / GShard): aux = n_experts * sum_e f_e * P_e, with f_e the
fraction of the N*k token-to-expert assignments that went to expert e and P_e the mean
router probability of e. It is 1 when routing is uniform and grows as it collapses.
`LM.aux_loss()` averages it over layers and multiplies by the config's `router_aux_loss`
(default 0.01); the training loop adds that to the objective.

Why a loop over experts with index_select / index_add and not a padded grouped bmm:
every expert runs exactly on the tokens routed to it, so no token is dropped (no capacity
factor), no FLOP is spent on padding (the measured FLOPs equal the accounting's active
FLOPs), and each expert is an ordinary `GatedFFN`, so muP, init and export treat it like
any FFN. The price is one host sync per layer (the per-expert counts) and n_experts small
matmuls instead of one grouped one, which torch has no stable public kernel for.

The same code compiles without a graph break: the counts come from a scatter-add (not
`bincount`, whose output size depends on the data), and `tolist()` gives them to
torch.compile as symbolic sizes (`capture_scalar_outputs`, set by
`shapesweep.trainers.compiled`). Every expert runs on its slice, empty or not, so a graph
does not branch on a count: an expert no token reached does no FLOPs and gets a zero
gradient (AdamW then applies its momentum and weight decay, as in a grouped-matmul MoE).
"""

from __future__ import annotations

import torch
from shapesweep.trainers.ffn import GatedFFN
from torch import nn


class MoEFFN(nn.Module):
    """n_experts gated FFNs width -> d_h -> d_out, each token through its top n_active."""

    def __init__(self, width: int, d_h: int, d_out: int, n_experts: int, n_active: int,
                 activation: str, bias: bool):
        super().__init__()
        self.d_out, self.n_active = d_out, n_active
        self.router = nn.Linear(width, n_experts, bias=False)
        self.experts = nn.ModuleList(GatedFFN(width, d_h, d_out, activation, bias)
                                     for _ in range(n_experts))
        self.aux_loss: torch.Tensor | None = None  # load-balancing loss of the last forward
        self.load: torch.Tensor | None = None  # tokens each expert received in the last forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probs = self.router(tokens).float().softmax(-1)  # [N, E]
        weight, chosen = probs.topk(self.n_active, dim=-1)  # [N, k]
        assigned = chosen.flatten()
        order = assigned.argsort()  # assignments grouped by expert
        load = torch.zeros(len(self.experts), dtype=torch.long, device=x.device).scatter_add_(
            0, assigned, torch.ones_like(assigned))
        counts = load.tolist()  # the one host sync
        token = order // self.n_active
        weight = weight.flatten()[order]
        out = tokens.new_zeros(len(tokens), self.d_out)
        for expert, rows, w in zip(self.experts, token.split(counts), weight.split(counts),
                                   strict=True):
            y = expert(tokens.index_select(0, rows)) * w[:, None]
            out.index_add_(0, rows, y.to(out.dtype))
        share = load.float() / chosen.numel()
        self.aux_loss = len(self.experts) * (share * probs.mean(0)).sum()
        self.load = load.detach()
        return out.reshape(*x.shape[:-1], self.d_out)


def make_moe(s) -> MoEFFN:
    """The mixture of experts a `LayerShape` with n_experts > 1 describes."""
    return MoEFFN(int(s.width), int(s.d_h), int(s.ffn_out), int(s.n_experts),
                  int(s.n_active_experts), s.activation, s.bias)
