"""The hourglass family (hourglass-ffn): each FFN is k residual gated sub-blocks of bottleneck
width d_h, each with its own norm (`shapesweep.trainers.ffn.HourglassFFN`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from shapesweep.families.base import Depth, FamilySpec, Stored, lm_shape_text, value
from shapesweep.families.counts import lm_account, uniform_totals
from shapesweep.families.lm import LayerShape, LMBase, uniform_shape


class HourglassConfig(LMBase):
    """hourglass-ffn: each FFN is k residual SwiGLU sub-blocks of bottleneck width d_h."""

    family: Literal["hourglass"] = "hourglass"
    k: Annotated[Depth, Stored()] = 4  # sub-blocks in sequence: as deep as layers
    activation: Annotated[Literal["swiglu", "geglu"], Stored()] = "swiglu"

    @staticmethod
    def block(c: Any) -> LayerShape:  # a HourglassConfig or the solver's namespace: LMBase.block
        # takes an LMBase, which has no `k`, so a narrower type here would break its override
        return uniform_shape(c, k=c.k)


SPEC = FamilySpec(
    name="hourglass",
    config=HourglassConfig,
    account=lm_account,
    vector_totals=lambda c, seq_len: uniform_totals(HourglassConfig.block(c), c, seq_len),
    model="shapesweep.trainers.lm:LM",
    colors={"hourglass": "#2a9d3a"},
    shape_text=lambda row: f"{lm_shape_text(row)} k={value(row, 'k')}",
    label_fields=("d_h", "k", "activation"),
    ratio_series=True,
)
