"""Typed configs: one per model family, plus the training recipe.

These are the currency between every part of shapesweep. The accounting
(`search_spaces.accounting`) and the torch models (`trainers.models`) are both
built from `config.layer_shapes()`, so the parameter count the solver matches
and the `sum(numel)` of the built model cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

Activation = Literal["relu", "gelu", "swiglu", "geglu", "simple_gated"]
GATED = ("swiglu", "geglu", "simple_gated")
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
            norm_order=self.norm_order,
        )


class ConventionalConfig(_LMBase):
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


class VariableWidthConfig(_LMBase):
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
            from search_spaces.widths import solve_widths

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
        from search_spaces.widths import layer_shapes_for

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
    warmup_frac: Annotated[float, Field(ge=0, lt=1)] = 0.05
    decay: Literal["cosine", "linear", "constant"] = "cosine"
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
    # How weights start (trainers.mup): normal | scaled | xavier | mup. Unset: mup under
    # `parametrization: mup`, else normal; `init: mup` alone turns muP on.
    init: Literal["normal", "scaled", "xavier", "mup"] | None = None

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

    # Seed 002 §4's representation analysis at the end of an LM trial (trainers.analysis):
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
