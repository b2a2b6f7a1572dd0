"""Exact parameter, FLOP and KV-cache accounting primitives: the one place these numbers
come from. Family modules build their `account` from them; this module imports no family
(only `LayerShape`), so families sit above it and below the generic
`shapesweep.search_spaces.accounting.account`.

Counting convention (hourglass-ffn): attention = Q, K, V, O (+ biases); FFN = every FFN
matrix (+ biases, simple-gated's residual scale, and the hourglass sub-block norms);
norms = the remaining RMSNorm weights (per-layer attention/FFN norms and the final
norm); non-embedding = attention + FFN + norms (+ xformer's resize projections);
total adds the token embedding and, if untied, the unembedding. Both ends are D wide
except in xformer's zero/projection resize modes, where `variable_width.end_widths` drops
the embedding columns and readout coordinates that can never affect the output.

Training FLOPs per token follow PaLM's MFU convention:
6 * (matmul weights, unembedding included) + 12 * sum_layers(n_heads * head_dim) * seq_len.

Mixture of experts (xformer's MoE): the FFN counts all `n_experts` experts plus the
router (width x n_experts, no bias); `params_active` counts only `n_active_experts`
experts per layer (+ the router), and the matmul weights behind the FLOPs are the active ones.

Every function here is plain arithmetic, so `LayerShape` fields may be numpy arrays
(the vectorised solver evaluates a million candidates in one call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from shapesweep.families.lm import GATED, LayerShape, LMBase

# one model's number, or the vectorised solver's column of a million candidates' numbers
Count = int | float | np.ndarray


def block_counts(s: LayerShape) -> dict[str, Any]:
    """Parameters and per-token costs of one transformer block."""
    q = s.n_heads * s.head_dim
    kv = s.n_kv_heads * s.head_dim
    attn_matmul = s.attn_in * (q + 2 * kv) + q * s.width
    attention = attn_matmul + ((q + 2 * kv + s.width) if s.bias else 0)
    pre = s.norm_order == "pre"
    attn_norm = s.attn_in if pre else s.width
    inactive = 0  # parameters of the experts a token is not routed to
    if s.k == 0:
        n_in = 2 if s.activation in GATED else 1
        ffn_matmul = n_in * s.width * s.d_h + s.d_h * s.ffn_out
        ffn = ffn_matmul + ((n_in * s.d_h + s.ffn_out) if s.bias else 0)
        ffn = ffn + (1 if s.activation == "simple_gated" else 0)
        norms = attn_norm + (s.width if pre else s.ffn_out)
        # Mixture of experts: n_experts such FFNs + a bias-free router (width -> n_experts);
        # a token runs the router and n_active_experts of them.
        router = s.width * s.n_experts * (s.n_experts > 1)
        inactive = (s.n_experts - s.n_active_experts) * ffn
        ffn_matmul = s.n_active_experts * ffn_matmul + router
        ffn = s.n_experts * ffn + router
    else:  # hourglass: k residual gated sub-blocks, each with its own norm
        ffn_matmul = s.k * 3 * s.width * s.d_h
        ffn = ffn_matmul + s.k * (s.width + ((2 * s.d_h + s.width) if s.bias else 0))
        norms = attn_norm
    return {
        "attention": attention,
        "ffn": ffn,
        "ffn_inactive": inactive,
        "norms": norms,
        "matmul": attn_matmul + ffn_matmul,
        "attn_width": q,
        "kv_cache": 2 * kv,
        "width": s.width,
    }


def blocks_total(shapes: list[LayerShape], n_layers: Count | None = None) -> dict[str, Any]:
    """Sum of `block_counts` over layers; `n_layers` scales one shared shape instead."""
    if n_layers is not None:
        one = block_counts(shapes[0])
        totals = {k: v * n_layers for k, v in one.items()}
    else:
        totals = {}
        for counts in map(block_counts, shapes):
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
    totals["non_embedding_blocks"] = totals["attention"] + totals["ffn"] + totals["norms"]
    return totals


@dataclass(frozen=True)
class Accounting:
    """What a candidate costs. Field names are result-store columns."""

    params_total: int
    params_active: int  # params_total less the experts a token is not routed to (MoE)
    params_non_embedding: int
    params_attention: int
    params_ffn: int
    params_norms: int
    params_embedding: int
    params_other: int  # resize projections (xformer) or vision W_in / W_out
    params_frozen: int  # not trained (hourglass-mlp's fixed input projection)
    flops_per_token: int  # training (forward + backward); per image for vision
    kv_cache_per_token: int  # elements, all layers
    avg_layer_width: float
    widths: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lm_totals(blocks: Mapping[str, Count], d_model, vocab_size, tie_embeddings, seq_len, extra=0,
              ends: tuple[Count, Count] | None = None):
    """Whole-model numbers from summed block counts (arrays allowed).

    `ends` = (embedding columns read, readout width) when they differ from d_model."""
    embed_in, readout = (d_model, d_model) if ends is None else ends
    columns = np.maximum(embed_in, readout) if tie_embeddings else embed_in + readout
    embedding = vocab_size * columns
    non_embedding = blocks["non_embedding_blocks"] + readout + extra  # + final norm
    matmul = blocks["matmul"] + vocab_size * readout + extra  # unembedding is a matmul
    return {
        "params_total": non_embedding + embedding,
        "params_active": non_embedding + embedding - blocks["ffn_inactive"],
        "params_non_embedding": non_embedding,
        "params_attention": blocks["attention"],
        "params_ffn": blocks["ffn"],
        "params_norms": blocks["norms"] + readout,
        "params_embedding": embedding,
        "params_other": extra,
        "flops_per_token": 6 * matmul + 12 * blocks["attn_width"] * seq_len,
        "kv_cache_per_token": blocks["kv_cache"],
    }


def uniform_totals(shape: LayerShape, c: LMBase, seq_len) -> dict[str, Any]:
    """Whole-model numbers of an LM whose `c.n_layers` layers all have `shape` (arrays allowed:
    the vectorised solver calls this on columns, `lm_account` on one config)."""
    blocks = blocks_total([shape], n_layers=c.n_layers)
    return lm_totals(blocks, c.d_model, c.vocab_size, c.tie_embeddings, seq_len)


def lm_account(config, seq_len: int, extra: float = 0,
               ends: tuple[int, int] | None = None) -> Accounting:
    """Exact accounting of an LM config from its `layer_shapes()`; `extra` parameters outside
    the blocks and `ends` as in `lm_totals`."""
    shapes = config.layer_shapes()
    widths = [int(s.width) for s in shapes]
    uniform = all(s is shapes[0] for s in shapes)  # conventional/hourglass: one shape, L times
    blocks = blocks_total(shapes[:1], n_layers=len(shapes)) if uniform else blocks_total(shapes)
    totals = lm_totals(blocks, config.d_model, config.vocab_size,
                       config.tie_embeddings, seq_len, extra, ends)
    return Accounting(**{k: int(v) for k, v in totals.items()}, params_frozen=0,
                      avg_layer_width=sum(widths) / len(widths), widths=widths)

