"""Typed configs: one per model family, plus the training recipe.

These are the currency between every part of shapesweep. The accounting
(`shapesweep.search_spaces.accounting`) and the torch models (`shapesweep.trainers.models`) are both
built from `config.layer_shapes()`, so the parameter count the solver matches
and the `sum(numel)` of the built model cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_serializer,
    model_validator,
)

Activation = Literal["relu", "gelu", "swiglu", "geglu", "simple_gated"]
GATED = ("swiglu", "geglu", "simple_gated")
MOE_ACTIVATIONS = ("swiglu", "geglu")  # experts are plain gated FFNs (no seed 003 residual scale)
MOE_FIELDS = ("n_experts", "n_active_experts", "router_aux_loss", "width_match")
MOE_FAMILIES = ("conventional", "variable_width")
Shape = Literal["constant", "grow", "shrink", "diamond", "bottleneck"]

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def parse_count(value: Any) -> Any:
    """'113.2M', '1.5B', '2e9', '50_000' and plain numbers -> a number."""
    if isinstance(value, bool) or not isinstance(value, str):
        return value
    text = value.strip().replace("_", "").replace(",", "")
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)", text)
    if not match:
        raise ValueError(f"cannot read {value!r} as a count (examples: 113.2M, 1.5B, 2e9)")
    number = float(match.group(1)) * _SUFFIX[match.group(2).upper()]
    return int(number) if number.is_integer() else number


MAX_DIM = 2**20  # any one dimension (width, depth, heads, ...): far beyond any real model
MAX_VOCAB = 2**24
MAX_TOKENS = 10**15  # a trial's token budget
MAX_SEED = 2**32  # seeds are 0 <= seed < MAX_SEED (torch and numpy take them)

Count = Annotated[float, BeforeValidator(parse_count)]
IntCount = Annotated[int, BeforeValidator(parse_count)]
PositiveCount = Annotated[int, BeforeValidator(parse_count), Field(gt=0, le=MAX_TOKENS)]
PositiveInt = Annotated[int, Field(gt=0)]
Dim = Annotated[int, Field(gt=0, le=MAX_DIM)]


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _LMBase(_Strict):
    """Fields every decoder-only LM family shares."""

    d_model: Dim
    n_layers: Dim
    n_heads: Dim
    head_dim: Dim | None = None  # default d_model // n_heads
    n_kv_heads: Dim | None = None  # default n_heads (MHA); fewer gives GQA
    d_h: Dim
    activation: Activation = "swiglu"
    bias: bool = False
    vocab_size: Annotated[int, Field(gt=0, le=MAX_VOCAB)] = 256
    tie_embeddings: bool = True
    norm_order: Literal["pre", "post"] = "pre"

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

    def _uniform_shape(self, k: int) -> LayerShape:
        return LayerShape(
            width=self.d_model, attn_in=self.d_model, ffn_out=self.d_model,
            n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
            d_h=self.d_h, k=k, activation=self.activation, bias=self.bias,
            norm_order=self.norm_order, **self._experts(),
        )

    def _experts(self) -> dict[str, int]:
        """LayerShape's expert fields; none (LayerShape's dense default) unless MoE is set."""
        return {}


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


class _MoELMBase(_LMBase):
    """An LM family whose FFN may be a mixture of experts (seed 002's 3B/1B MoE).

    `n_experts` > 1 makes every FFN `n_experts` gated experts of width `d_h` with top
    `n_active_experts` token-choice routing; `router_aux_loss` weighs the load-balancing
    loss added to the training objective; variable_width's `width_match` says whether its
    solved widths match total (default, seed 002) or active parameters. Unset (or
    n_experts 1): the dense FFN, and the config dumps and hashes as a dense config always has.
    """

    n_experts: Dim | None = None
    n_active_experts: Dim | None = None
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

    def _experts(self) -> dict[str, int]:
        if self.n_experts is None:
            return {}
        return {"n_experts": self.n_experts, "n_active_experts": self.n_active_experts}

    @model_serializer(mode="wrap")
    def _dense_dump(self, handler):
        """A dense config leaves the MoE fields out, so its dump and config_key are unchanged."""
        data = handler(self)
        if self.n_experts is None:
            for name in MOE_FIELDS:
                data.pop(name, None)
        return data


class ConventionalConfig(_MoELMBase):
    """Narrow-wide-narrow FFN (seed 001; seed 003's simple gated FFN as an activation)."""

    family: Literal["conventional"] = "conventional"

    def layer_shapes(self) -> list[LayerShape]:
        return [self._uniform_shape(0)] * self.n_layers


class HourglassConfig(_LMBase):
    """Seed 000: each FFN is k residual SwiGLU sub-blocks of bottleneck width d_h."""

    family: Literal["hourglass"] = "hourglass"
    k: Dim = 4
    activation: Literal["swiglu", "geglu"] = "swiglu"

    def layer_shapes(self) -> list[LayerShape]:
        return [self._uniform_shape(self.k)] * self.n_layers


class VariableWidthConfig(_MoELMBase):
    """Seed 002: per-layer widths on a fixed global residual stream.

    `d_model` is the baseline width D (embeddings keep it), `d_h` the baseline FFN
    width; layer l gets width `widths[l]` and FFN width round(d_h * widths[l] / D).
    Without `widths`, they are solved from (shape, beta, alpha) so the model matches
    the constant-width baseline's parameters (seed 002, Appendix A).
    """

    family: Literal["variable_width"] = "variable_width"
    shape: Shape = "bottleneck"
    beta: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    alpha: Annotated[float, Field(gt=0.0)] = 0.3  # with beta 0.5: seed 002 Table 2 avg widths within 1%
    widths: list[Dim] | None = None
    width_multiple: Dim | None = None  # default 2 * n_heads (even head_dim)
    resize: Literal["carry", "zero", "projection"] = "carry"
    # What the solved widths match with a mixture of experts: all parameters or the active ones.
    width_match: Literal["total_params", "active_params"] = "total_params"

    @model_validator(mode="after")
    def _resolve_widths(self):
        if self.head_dim is not None and self.head_dim * self.n_heads != self.d_model:
            raise ValueError("variable_width derives head_dim per layer; leave head_dim unset")
        if self.width_multiple is None:
            object.__setattr__(self, "width_multiple", 2 * self.n_heads)
        if self.shape == "bottleneck" and self.alpha >= 1:
            raise ValueError(f"shape 'bottleneck' needs alpha < 1 (got {self.alpha})")
        if self.shape == "diamond" and self.alpha <= 1:
            raise ValueError(f"shape 'diamond' needs alpha > 1 (got {self.alpha})")
        if self.widths is None:
            from shapesweep.search_spaces.widths import solve_widths

            object.__setattr__(self, "widths", solve_widths(self))
        if len(self.widths) != self.n_layers:
            raise ValueError(f"widths has {len(self.widths)} entries for n_layers={self.n_layers}")
        bad = [w for w in self.widths if w % (2 * self.n_heads)]
        if bad:
            raise ValueError(f"widths {bad} are not multiples of 2*n_heads={2 * self.n_heads} (even head_dim)")
        return self

    def layer_d_h(self, width: float) -> float:
        return self.d_h * width / self.d_model

    def layer_shapes(self) -> list[LayerShape]:
        from shapesweep.search_spaces.widths import layer_shapes_for

        return layer_shapes_for(self, self.widths, integer=True)


class VisionMLPConfig(_Strict):
    """Seed 004: residual MLP on images, d_x -> d_z, L blocks d_z -> d_h -> d_z, head -> d_out."""

    family: Literal["vision_mlp"] = "vision_mlp"
    d_x: Dim = 64
    d_z: Dim
    d_h: Dim
    n_layers: Dim
    d_out: Dim = 64
    input_projection: Literal["fixed", "trained"] = "trained"
    activation: Literal["relu", "gelu"] = "gelu"
    bias: bool = False
    task: Literal["denoise", "superres", "genclass"] = "denoise"

    @property
    def d_model(self) -> int:  # the residual width, for plots that speak of d_model
        return self.d_z

    @property
    def ffn_ratio(self) -> float:
        return self.d_h / self.d_z

    @property
    def width_depth_ratio(self) -> float:
        return self.d_z / self.n_layers


LMConfig = ConventionalConfig | HourglassConfig | VariableWidthConfig
ModelConfig = Annotated[
    ConventionalConfig | HourglassConfig | VariableWidthConfig | VisionMLPConfig,
    Field(discriminator="family"),
]
FAMILIES: dict[str, type[BaseModel]] = {
    "conventional": ConventionalConfig,
    "hourglass": HourglassConfig,
    "variable_width": VariableWidthConfig,
    "vision_mlp": VisionMLPConfig,
}


class TrainConfig(_Strict):
    """The short-trial training recipe (the `train:` block of a space or candidate)."""

    tokens: PositiveCount | None = None  # LM token budget; or give steps
    steps: Annotated[int, Field(gt=0, le=MAX_TOKENS)] | None = None
    seq_len: Dim = 128
    batch_tokens: PositiveCount = 4096  # tokens per optimizer step (LM)
    micro_batch_size: PositiveInt | None = None  # sequences per forward; default all
    batch_size: PositiveInt = 128  # images per step (vision)
    lr: Annotated[float, Field(gt=0)] = 3e-3
    warmup_frac: Annotated[float, Field(ge=0, lt=1)] | None = 0.05  # None with warmup_tokens
    decay: Literal["cosine", "linear", "constant", "power"] = "cosine"
    min_lr_frac: Annotated[float, Field(ge=0, le=1)] = 0.1
    weight_decay: Annotated[float, Field(ge=0)] = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: Annotated[float, Field(ge=0)] = 1.0
    z_loss: Annotated[float, Field(ge=0)] = 0.0
    parametrization: Literal["standard", "mup"] = "standard"
    mup_base_width: PositiveInt = 64
    eval_every: PositiveInt | None = None  # steps; default ~10 evaluations per trial
    eval_tokens: PositiveCount = 32768  # LM validation tokens per evaluation
    seed: Annotated[int, Field(ge=0, lt=MAX_SEED)] = 0
    compile: bool = False  # torch.compile (CUDA only)
    noise_std: Annotated[float, Field(gt=0)] = 0.25  # vision denoising
    # How weights start (shapesweep.trainers.mup): normal | scaled | xavier | mup. Unset: mup under
    # `parametrization: mup`, else normal; `init: mup` alone turns muP on.
    init: Literal["normal", "scaled", "xavier", "mup"] | None = None
    # Paper recipes. tokens_per_param (seed 002: 50): the budget is this x the candidate's
    # params_total, embeddings included (SearchSpace.train_for resolves it into `tokens`).
    tokens_per_param: Annotated[float, Field(gt=0, le=MAX_TOKENS)] | None = None
    warmup_tokens: Annotated[int, BeforeValidator(parse_count), Field(ge=0, le=MAX_TOKENS)] | None = None
    # ^ seed 000: warmup in tokens (images for vision), an alternative to warmup_frac
    decay_power: Annotated[float, Field(gt=0)] = 0.5  # `decay: power`'s exponent p

    @model_validator(mode="after")
    def _one_of_each(self):
        """A budget and a warmup are each given one way: tokens or tokens_per_param, and
        warmup_frac or warmup_tokens (which sets warmup_frac to None)."""
        if self.tokens is not None and self.tokens_per_param is not None:
            raise ValueError("give tokens or tokens_per_param, not both")
        if self.warmup_tokens is not None:
            if self.warmup_frac is not None and "warmup_frac" in self.model_fields_set:
                raise ValueError("give warmup_frac or warmup_tokens, not both")
            object.__setattr__(self, "warmup_frac", None)
        elif self.warmup_frac is None:
            raise ValueError("give warmup_frac or warmup_tokens")
        return self

    def for_params(self, params: int) -> TrainConfig:
        """This recipe with `tokens_per_param` turned into `tokens` for a model of `params`."""
        if self.tokens_per_param is None:
            return self
        fields = self.model_dump(exclude_unset=True) | {"tokens": round(self.tokens_per_param * params)}
        fields.pop("tokens_per_param")
        return TrainConfig.model_validate(fields)

    @model_validator(mode="after")
    def _resolve_init(self):
        """muP is one choice with two names: `init: mup` and `parametrization: mup` go together."""
        if self.init is None:
            object.__setattr__(self, "init", "mup" if self.parametrization == "mup" else "normal")
        elif self.init == "mup" and "parametrization" not in self.model_fields_set:
            object.__setattr__(self, "parametrization", "mup")
        elif (self.init == "mup") != (self.parametrization == "mup"):
            raise ValueError(f"init {self.init!r} contradicts parametrization "
                             f"{self.parametrization!r} (muP is init: mup with parametrization: "
                             "mup; give one of them)")
        return self

    @model_validator(mode="after")
    def _whole_sequences(self):
        """A step trains on whole sequences: below seq_len, batch_tokens would silently
        become one sequence (the loop takes max(1, batch_tokens // seq_len) of them)."""
        if self.batch_tokens < self.seq_len:
            raise ValueError(f"batch_tokens={self.batch_tokens} is less than one sequence "
                             f"(seq_len={self.seq_len})")
        return self

    # Seed 002 §4's representation analysis at the end of an LM trial (shapesweep.trainers.analysis):
    # true | false; unset: on for variable_width models (constant width included), else off.
    analysis: bool | None = None


def config_key(config: BaseModel) -> str:
    """A stable 12-hex hash of a model config's shape (what makes two candidates the same)."""
    payload = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def make_config(fields: dict[str, Any]) -> BaseModel:
    """Build the typed config for `fields['family']` (pydantic errors propagate)."""
    family = fields.get("family")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    return FAMILIES[family].model_validate(fields)
