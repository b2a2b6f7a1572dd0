"""The variable-width family (xformer's ><former): per-layer widths on one global residual
stream, solved to match the constant-width baseline; the width solver is this family's own.

The ><former keeps one global residual stream as wide as its widest layer; layer l
reads and writes the leading `widths[l]` coordinates. Between layers the stream is
resized without parameters (or with a learned projection, the paper's ablation):

- carry (default): coordinates a narrow layer skips pass through untouched and are
  read again when the width grows; the embedding fills the first D, the unembedding
  reads the first D.
- zero: as if the state were truncated on shrink and zero-padded on growth (also at
  the embedding -> first layer and last layer -> unembedding boundaries).
- projection: as zero, but between layers the grown coordinates are predicted by a
  learned linear map of the previous layer's state.

`layer_shapes_for` turns widths into `LayerShape`s whose `attn_in` / `ffn_out` leave
out coordinates that are provably zero on input or never read on output, so no
parameter is allocated that cannot affect the output (xformer's "valid" count).
`end_widths` does the same for the two ends (embedding, final norm, unembedding).
The same closed forms work on floats, which is what the parameter-matching solve uses.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from shapesweep.families.base import Dim, FamilySpec, Stored, lm_shape_text, value
from shapesweep.families.counts import Accounting, blocks_total, lm_account
from shapesweep.families.lm import LayerShape, MoELMBase, expert_fields

Shape = Literal["constant", "grow", "shrink", "diamond", "bottleneck"]


class VariableWidthConfig(MoELMBase):
    """xformer: per-layer widths on a fixed global residual stream.

    `d_model` is the baseline width D (embeddings keep it), `d_h` the baseline FFN
    width; layer l gets width `widths[l]` and FFN width round(d_h * widths[l] / D).
    Without `widths`, they are solved from (shape, beta, alpha) so the model matches
    the constant-width baseline's parameters (xformer, Appendix A).
    """

    family: Literal["variable_width"] = "variable_width"
    shape: Annotated[Shape, Stored()] = "bottleneck"
    beta: Annotated[float, Field(ge=0.0, le=1.0), Stored()] = 0.5
    # with beta 0.5: xformer Table 2 avg widths within 1%
    alpha: Annotated[float, Field(gt=0.0), Stored()] = 0.3
    widths: list[Dim] | None = None  # stored as the `widths` column of every family
    width_multiple: Dim | None = None  # default 2 * n_heads (even head_dim)
    resize: Annotated[Literal["carry", "zero", "projection"], Stored(hover=False)] = "carry"
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
        return layer_shapes_for(self, self.widths, integer=True)


# ---------------------------------------------------------------- the width schedule


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def layer_shapes_for(cfg: VariableWidthConfig, widths, integer: bool) -> list[LayerShape]:
    """Per-layer shapes for `widths` (ints for the model, floats for the solve)."""
    D, L = cfg.d_model, len(widths)
    if cfg.resize == "carry":  # the stream's width before and after each layer, in one pass each
        before, after = _running_max(D, widths), _running_max(D, widths[::-1])[::-1]
    shapes = []
    for i, w in enumerate(widths):
        if cfg.resize == "carry":
            attn_in = min(w, before[i])
            ffn_out = min(w, after[i])
        else:
            prev = D if i == 0 else widths[i - 1]
            nxt = D if i == L - 1 else widths[i + 1]
            attn_in = min(w, prev) if (cfg.resize == "zero" or i == 0) else w
            ffn_out = min(w, nxt)
        d_h = cfg.layer_d_h(w)
        shapes.append(
            LayerShape(
                width=w, attn_in=attn_in, ffn_out=ffn_out, n_heads=cfg.n_heads,
                n_kv_heads=cfg.n_kv_heads, head_dim=w / cfg.n_heads,
                d_h=max(1, _round_half_up(d_h)) if integer else d_h, k=0,
                activation=cfg.activation, bias=cfg.bias, norm_order=cfg.norm_order,
                **expert_fields(cfg),
            )
        )
    if integer:
        shapes = [
            LayerShape(**{**s.__dict__, "head_dim": int(s.width) // cfg.n_heads}) for s in shapes
        ]
    return shapes


def _running_max(first, widths) -> list:
    """[max(first, *widths[:i]) for each i]: linear, where taking each prefix's max anew is
    quadratic in depth (4,096 layers took 59 s to solve)."""
    out, widest = [], first
    for w in widths:
        out.append(widest)
        widest = max(widest, w)
    return out


def end_widths(cfg, widths) -> tuple[int, int]:
    """(embedding columns layer 1 can read, readout coordinates that can be non-zero).

    carry keeps D at both ends. zero / projection truncate the embedding to layer 1's
    width (coordinates [w_1:D) are zeroed or overwritten before anything reads them again)
    and zero-pad the last layer's state back to D, so the final norm and the unembedding
    need only min(D, w_L) coordinates. A tied table needs the larger of the two; an
    untied embedding only the first. Other families (no `resize`) keep D at both ends.
    """
    D = cfg.d_model
    if getattr(cfg, "resize", "carry") == "carry":
        return D, D
    return min(D, widths[0]), min(D, widths[-1])


def resize_params(cfg: VariableWidthConfig, widths) -> float:
    """Parameters of the learned growth projections (resize='projection' only)."""
    if cfg.resize != "projection":
        return 0
    total = 0
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        if b > a:
            total += a * (b - a) + ((b - a) if cfg.bias else 0)
    return total


def bottleneck_index(cfg: VariableWidthConfig) -> int:
    """0-based index of the layer whose width is alpha * D."""
    L = cfg.n_layers
    if cfg.shape == "grow":
        return 0
    if cfg.shape == "shrink":
        return L - 1
    return min(L - 1, max(0, _round_half_up(cfg.beta * L) - 1))


def geometric_widths(cfg: VariableWidthConfig, endpoint: float) -> list[float]:
    """Continuous widths: geometric from `endpoint` to alpha*D at the bottleneck and back."""
    L, b, mid = cfg.n_layers, bottleneck_index(cfg), cfg.alpha * cfg.d_model
    widths = []
    for i in range(L):
        if i <= b:
            t = i / b if b > 0 else 1.0
            widths.append(endpoint ** (1 - t) * mid**t)
        else:
            t = (i - b) / (L - 1 - b)
            widths.append(mid ** (1 - t) * endpoint**t)
    return widths


def _valid_params(cfg: VariableWidthConfig, widths) -> float:
    shapes = layer_shapes_for(cfg, widths, integer=False)
    blocks = blocks_total(shapes)
    inactive = blocks["ffn_inactive"] if cfg.width_match == "active_params" else 0
    return blocks["non_embedding_blocks"] - inactive + resize_params(cfg, widths)


def solve_widths(cfg: VariableWidthConfig) -> list[int]:
    """Widths that match the constant-width baseline's parameters (xformer, Appendix A).

    A mixture of experts matches total parameters (as xformer does) unless `width_match`
    is active_params. The endpoint width is found by bisection on the exact (continuous) valid-parameter
    count, which already contains the paper's endpoint corrections; widths are then
    rounded to `width_multiple`.
    """
    D, m = cfg.d_model, cfg.width_multiple or 2 * cfg.n_heads  # the validator's default
    if cfg.shape == "constant":
        return [D] * cfg.n_layers
    target = _valid_params(cfg, [float(D)] * cfg.n_layers)
    lo, hi = 1e-3 * D, 1e3 * D
    if _valid_params(cfg, geometric_widths(cfg, lo)) > target:
        raise ValueError(
            f"alpha={cfg.alpha} alone exceeds the constant-width budget; no endpoint width matches it"
        )
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if _valid_params(cfg, geometric_widths(cfg, mid)) < target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return [max(m, m * _round_half_up(w / m)) for w in geometric_widths(cfg, (lo + hi) / 2)]


def _account(config: VariableWidthConfig, seq_len: int) -> Accounting:
    """The resize projections are extra parameters; zero / projection narrow both ends."""
    return lm_account(config, seq_len, resize_params(config, config.widths),
                      end_widths(config, config.widths))


def _design(row: dict) -> str:
    """The xformer paper's width shapes apart (and non-default resize methods)."""
    if not isinstance(row.get("shape"), str):
        return "variable_width"
    resize = row.get("resize")
    detail = row["shape"] if row["shape"] == "constant" or resize in (None, "carry") \
        else f"{row['shape']}, {resize}"
    return f"variable_width ({detail})"


def _constant(row: dict) -> bool:
    """A constant-width model: β and α place no bottleneck."""
    return row.get("shape") == "constant"


SPEC = FamilySpec(
    name="variable_width",
    figures_name="vformer",  # bench_gpu.py files its figures under the paper's name
    config=VariableWidthConfig,
    account=_account,
    model="shapesweep.trainers.lm:LM",  # vector_totals None: widths are solved per config
    colors={"variable_width": "#1f77b4", "variable_width (bottleneck)": "#1f77b4",
            "variable_width (constant)": "#8c564b", "variable_width (grow)": "#ff7f0e",
            "variable_width (shrink)": "#d62728", "variable_width (diamond)": "#17becf"},
    design=_design,
    shape_text=lambda row: (f"{lm_shape_text(row)} constant" if _constant(row) else
                            f"{lm_shape_text(row)} {value(row, 'shape')} "
                            f"β={value(row, 'beta')} α={value(row, 'alpha')}"),
    shows_widths=True,
    label_fields=("d_h", "shape", "beta", "alpha", "resize", "activation"),
    inert=lambda row: frozenset({"beta", "alpha"}) if _constant(row) else frozenset(),
    constant=_constant,
    analysis=True,  # xformer measures its representations; `shape: constant` is the baseline
)
