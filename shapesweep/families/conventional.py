"""The conventional family: narrow-wide-narrow FFN (ffn-chapter; simple-gated's FFN as an
activation), optionally a mixture of experts. The baseline the other LM families are compared to.
"""

from __future__ import annotations

from typing import Literal

from shapesweep.families.base import LLAMA_EXPORTERS, FamilySpec
from shapesweep.families.counts import lm_account, uniform_totals
from shapesweep.families.lm import MoELMBase


class ConventionalConfig(MoELMBase):
    """Narrow-wide-narrow FFN (ffn-chapter; simple-gated's FFN as an activation)."""

    family: Literal["conventional"] = "conventional"


SPEC = FamilySpec(
    name="conventional",
    config=ConventionalConfig,
    account=lm_account,
    vector_totals=lambda c, seq_len: uniform_totals(ConventionalConfig.block(c), c, seq_len),
    model="shapesweep.trainers.lm:LM",
    colors={"conventional": "#7b3fa0"},
    baseline=True,
    # Llama's layout (hf_export refuses the settings Llama lacks: experts, post-norm)
    exporters=LLAMA_EXPORTERS,
)
