"""What the decoder-only LM families share: `LayerShape`, the common config fields, and the
optional mixture-of-experts FFN. The accounting (`shapesweep.families.counts`) and
the torch model (`shapesweep.trainers.lm`) are both built from `config.layer_shapes()`,
so the parameter count the solver matches and the built model's `sum(numel)` cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_serializer, model_validator

from shapesweep.families.base import MAX_VOCAB, SOLVABLE, Depth, Dim, Stored, Strict

Activation = Literal["relu", "gelu", "swiglu", "geglu", "simple_gated"]
GATED = ("swiglu", "geglu", "simple_gated")
MOE_ACTIVATIONS = ("swiglu", "geglu")  # plain gated experts (no simple-gated residual scale)
MOE_FIELDS = ("n_experts", "n_active_experts", "router_aux_loss", "width_match")


@dataclass(frozen=True)
class LayerShape:
    """The dimensions of one transformer block, as both the accounting and the model see them.

    `attn_in` is how many residual coordinates the attention reads (less than `width`
    when the coordinates above it are still zero, e.g. the ><former's first layer);
    `ffn_out` is how many the FFN writes (less than `width` when nothing downstream
    reads the rest, e.g. its last layer). Fields may be numpy arrays in the vectorised
    solver; the models always see ints.
    """

    width: Any
    attn_in: Any
    ffn_out: Any
    n_heads: Any
    n_kv_heads: Any
    head_dim: Any
    d_h: Any
    k: int  # hourglass sub-blocks; 0 means a conventional FFN
    activation: str
    bias: bool
    norm_order: str
    n_experts: Any = 1  # > 1: a mixture of `n_experts` FFNs of width d_h (shapesweep.trainers.moe)
    n_active_experts: Any = 1  # experts each token is routed to


def uniform_shape(c: LMBase, k: int = 0) -> LayerShape:
    """The one block shape of a constant-width LM. `c` is a config or, in the vectorised
    solver, a namespace of numpy arrays whose head_dim / n_kv_heads / experts may be unset."""
    head_dim = c.head_dim if c.head_dim is not None else c.d_model / c.n_heads
    return LayerShape(
        width=c.d_model, attn_in=c.d_model, ffn_out=c.d_model, n_heads=c.n_heads,
        n_kv_heads=c.n_kv_heads if c.n_kv_heads is not None else c.n_heads, head_dim=head_dim,
        d_h=c.d_h, k=k, activation=c.activation, bias=c.bias, norm_order=c.norm_order,
        **expert_fields(c),
    )


def expert_fields(c: LMBase) -> dict[str, Any]:
    """LayerShape's expert fields; none (LayerShape's dense default) unless MoE is set."""
    experts = {name: getattr(c, name, None) for name in ("n_experts", "n_active_experts")}
    return {name: v for name, v in experts.items() if v is not None}


class LMBase(Strict):
    """Fields every decoder-only LM family shares."""

    d_model: Annotated[Dim, Stored(), SOLVABLE]
    n_layers: Annotated[Depth, Stored(), SOLVABLE]
    n_heads: Annotated[Dim, Stored()]
    head_dim: Annotated[Dim | None, Stored()] = None  # default d_model // n_heads
    n_kv_heads: Annotated[Dim | None, Stored()] = None  # default n_heads (MHA); fewer gives GQA
    d_h: Annotated[Dim, Stored(), SOLVABLE]
    activation: Annotated[Activation, Stored()] = "swiglu"
    bias: Annotated[bool, Stored(hover=False)] = False
    vocab_size: Annotated[int, Field(gt=0, le=MAX_VOCAB), Stored(hover=False)] = 256
    tie_embeddings: Annotated[bool, Stored(hover=False)] = True
    norm_order: Annotated[Literal["pre", "post"], Stored(hover=False)] = "pre"

    @model_validator(mode="after")
    def _resolve_heads(self):
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads} "
                    "(set head_dim explicitly or pick a divisible d_model)"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        return self

    @property
    def ffn_ratio(self) -> float:
        return self.d_h / self.d_model

    @property
    def width_depth_ratio(self) -> float:
        return self.d_model / self.n_layers

    @staticmethod
    def block(c: LMBase) -> LayerShape:
        """The shape every layer has (a constant-width family); `c` as in `uniform_shape`."""
        return uniform_shape(c)

    def layer_shapes(self) -> list[LayerShape]:
        return [self.block(self)] * self.n_layers


def moe_problem(n_experts, n_active_experts, activation: str) -> tuple[str, str] | None:
    """(field, why) when these mixture-of-experts settings are invalid, else None: the one
    rule both a config and a space's fixed values are checked by."""
    if n_experts is None or n_experts == 1:
        if n_active_experts not in (None, 1):
            return "n_active_experts", f"n_active_experts={n_active_experts} needs n_experts > 1"
        return None
    if n_active_experts is None:
        return "n_active_experts", f"n_experts={n_experts} needs n_active_experts (experts per token)"
    if not 1 <= n_active_experts <= n_experts:
        return ("n_active_experts",
                f"n_active_experts={n_active_experts} must be between 1 and n_experts={n_experts}")
    if activation not in MOE_ACTIVATIONS:
        return "activation", (f"a mixture of experts needs a gated activation "
                              f"({', '.join(MOE_ACTIVATIONS)}), got {activation}")
    return None


class MoELMBase(LMBase):
    """An LM family whose FFN may be a mixture of experts (xformer's 3B/1B MoE).

    `n_experts` > 1 makes every FFN `n_experts` gated experts of width `d_h` with top
    `n_active_experts` token-choice routing; `router_aux_loss` weighs the load-balancing
    loss added to the training objective; variable_width's `width_match` says whether its
    solved widths match total (default, xformer) or active parameters. Unset (or
    n_experts 1): the dense FFN, and the config dumps and hashes as a dense config always has.
    """

    n_experts: Annotated[Dim | None, Stored(hover=False)] = None
    n_active_experts: Annotated[Dim | None, Stored(hover=False)] = None
    router_aux_loss: Annotated[float, Field(ge=0)] = 0.01

    @model_validator(mode="after")
    def _resolve_experts(self):
        problem = moe_problem(self.n_experts, self.n_active_experts, self.activation)
        if problem:
            raise ValueError(problem[1])
        if self.n_experts == 1:  # one expert is the dense FFN: the same config, the same key
            object.__setattr__(self, "n_experts", None)
            object.__setattr__(self, "n_active_experts", None)
        if self.n_experts is None and "router_aux_loss" in self.model_fields_set:
            raise ValueError("router_aux_loss needs a mixture of experts (n_experts > 1)")
        if self.n_experts is None and "width_match" in self.model_fields_set:
            object.__setattr__(self, "width_match", "total_params")  # dense: active is total
        return self

    @model_serializer(mode="wrap")
    def _dense_dump(self, handler):
        """A dense config leaves the MoE fields out, so its dump and config_key are unchanged."""
        data = handler(self)
        if self.n_experts is None:
            for name in MOE_FIELDS:
                data.pop(name, None)
        return data


def has_experts(config_class: type) -> bool:
    """Whether a family's FFN may be a mixture of experts."""
    return issubclass(config_class, MoELMBase)
