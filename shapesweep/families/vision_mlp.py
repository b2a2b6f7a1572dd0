"""The vision_mlp family (hourglass-mlp): a residual MLP on images, d_x -> d_z, L blocks
d_z -> d_h -> d_z, head -> d_out. Its torch model is `shapesweep.trainers.vision.VisionMLP`,
its init rules `shapesweep.trainers.vision.init_rules`; nothing else names this family.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from shapesweep.families.base import (
    SOLVABLE,
    Depth,
    Dim,
    FamilySpec,
    Stored,
    Strict,
    value,
)
from shapesweep.families.counts import Accounting
from shapesweep.families.task import IMAGES


class VisionMLPConfig(Strict):
    """hourglass-mlp's residual MLP: d_x -> d_z, L blocks d_z -> d_h -> d_z, head -> d_out."""

    family: Literal["vision_mlp"] = "vision_mlp"
    d_x: Annotated[Dim, Stored()] = 64
    d_z: Annotated[Dim, Stored(), SOLVABLE]
    d_h: Annotated[Dim, Stored(), SOLVABLE]
    n_layers: Annotated[Depth, Stored(), SOLVABLE]
    d_out: Annotated[Dim, Stored()] = 64
    input_projection: Annotated[Literal["fixed", "trained"], Stored()] = "trained"
    activation: Annotated[Literal["relu", "gelu"], Stored()] = "gelu"
    bias: Annotated[bool, Stored(hover=False)] = False
    task: Annotated[Literal["denoise", "superres", "genclass"], Stored()] = "denoise"

    @property
    def d_model(self) -> int:  # the residual width, for plots that speak of d_model
        return self.d_z

    @property
    def ffn_ratio(self) -> float:
        return self.d_h / self.d_z

    @property
    def width_depth_ratio(self) -> float:
        return self.d_z / self.n_layers


def vision_totals(c: VisionMLPConfig, seq_len: int = 0) -> dict[str, Any]:
    """hourglass-mlp: W_in (d_x*d_z) + L blocks (2*d_z*d_h) + W_out (d_z*d_out); norms carry no
    weights. `c` is a config or a namespace of numpy arrays (the solver); no sequence."""
    w_in = c.d_x * c.d_z + (c.d_z if c.bias else 0)
    blocks = c.n_layers * (2 * c.d_z * c.d_h + ((c.d_h + c.d_z) if c.bias else 0))
    w_out = c.d_z * c.d_out + (c.d_out if c.bias else 0)
    trained_in = c.input_projection == "trained"
    trainable = blocks + w_out + (w_in if trained_in else 0)
    # Backward of W_in needs only its weight gradient (the image needs none); with a frozen
    # W_in, block 1's first matmul needs only its weight gradient too.
    flops = 6 * (2 * c.n_layers * c.d_z * c.d_h + c.d_z * c.d_out)
    flops += 4 * c.d_x * c.d_z if trained_in else 2 * c.d_x * c.d_z - 2 * c.d_z * c.d_h
    return {
        "params_total": trainable,
        "params_active": trainable,
        "params_non_embedding": trainable,
        "params_attention": 0,
        "params_ffn": blocks,
        "params_norms": 0,
        "params_embedding": 0,
        "params_other": w_out + (w_in if trained_in else 0),
        "params_frozen": 0 if trained_in else w_in,
        "flops_per_token": flops,
        "kv_cache_per_token": 0,
    }


def _account(c: VisionMLPConfig, seq_len: int) -> Accounting:
    return Accounting(**vision_totals(c), avg_layer_width=float(c.d_z), widths=[c.d_z] * c.n_layers)


def _design(row: dict) -> str:
    """The hourglass-mlp paper's two MLP designs apart."""
    if row.get("d_z") is None or row.get("d_h") is None:
        return "vision_mlp"
    wide = row["d_h"] < row["d_z"]
    return f"vision_mlp ({'wide-narrow-wide' if wide else 'narrow-wide-narrow'})"


SPEC = FamilySpec(
    name="vision_mlp",
    config=VisionMLPConfig,
    account=_account,
    vector_totals=vision_totals,
    model="shapesweep.trainers.vision:VisionMLP",
    init="shapesweep.trainers.vision:init_rules",
    block=None,  # VisionMLP stacks its own residual MLP blocks
    task=IMAGES,
    exporters={},  # yaml and json only
    width="d_z",
    colors={"vision_mlp (wide-narrow-wide)": "#d62728", "vision_mlp (narrow-wide-narrow)": "#7f7f7f"},
    design=_design,
    label_fields=("d_h", "activation", "input_projection"),
    shape_text=lambda row: (f"d_z={value(row, 'd_z')} d_h={value(row, 'd_h')} "
                            f"L={value(row, 'n_layers')}"),
)
