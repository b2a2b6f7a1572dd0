"""The conventional family: narrow-wide-narrow FFN (ffn-chapter; simple-gated's FFN as an
activation), optionally a mixture of experts. The baseline the other LM families are compared to.
"""

from __future__ import annotations

from typing import Literal

from shapesweep.families.base import FamilySpec, register
from shapesweep.families.lm import MoELMBase
from shapesweep.search_spaces.accounting import lm_account, uniform_totals


class ConventionalConfig(MoELMBase):
    """Narrow-wide-narrow FFN (ffn-chapter; simple-gated's FFN as an activation)."""

    family: Literal["conventional"] = "conventional"


SPEC = register(FamilySpec(
    name="conventional",
    config=ConventionalConfig,
    account=lm_account,
    vector_totals=lambda c, seq_len: uniform_totals(ConventionalConfig.block(c), c, seq_len),
    model="shapesweep.trainers.lm:LM",
    colors={"conventional": "#7b3fa0"},
))
