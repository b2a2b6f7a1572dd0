"""A space's `budget:`: the one metric every candidate meets, within a tolerance."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from shapesweep.search_spaces.configs import Count
from shapesweep.search_spaces.strict import StrictModel

METRICS = ("non_embedding_params", "total_params", "flops_per_token", "active_params")


class Budget(StrictModel):
    """Exactly one target metric, or `match` (+ `metric`): the metric of a reference config."""

    non_embedding_params: Count | None = None
    total_params: Count | None = None
    flops_per_token: Count | None = None
    active_params: Count | None = None  # a mixture of experts' per-token parameters
    match: dict[str, Any] | None = None
    metric: Literal["non_embedding_params", "total_params", "flops_per_token",
                    "active_params"] | None = None
    tolerance: float = Field(default=0.01, gt=0)

    @model_validator(mode="after")
    def _one_target(self) -> Budget:
        given = [m for m in METRICS if getattr(self, m) is not None]
        if self.match is None and len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(METRICS)} (or match:), got {given or 'none'}")
        if self.match is not None and given:
            raise ValueError(f"give either match: (with metric:) or {given[0]}, not both")
        if self.metric is not None and self.match is None:
            raise ValueError("metric: only goes with match:")
        for m in given:
            if not 0 < getattr(self, m) < math.inf:
                raise ValueError(f"{m} must be a positive number")
        return self

    @property
    def target_metric(self) -> str:
        if self.match is not None:
            return self.metric or "non_embedding_params"
        return next(m for m in METRICS if getattr(self, m) is not None)
