"""The variable-width family (xformer's ><former): per-layer widths on one global residual
stream, solved to match the constant-width baseline (`shapesweep.search_spaces.widths`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from shapesweep.families.base import Dim, FamilySpec, Stored, lm_shape_text, register, value
from shapesweep.families.lm import LayerShape, MoELMBase
from shapesweep.search_spaces.accounting import Accounting, lm_account
from shapesweep.search_spaces.widths import (
    end_widths,
    layer_shapes_for,
    resize_params,
    solve_widths,
)

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


SPEC = register(FamilySpec(
    name="variable_width",
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
    inert=lambda row: frozenset({"beta", "alpha"}) if _constant(row) else frozenset(),
))
