"""How a variant's or a tuned value's `train:` keys go over the space's recipe."""

from __future__ import annotations

from typing import Any

from shapesweep.search_spaces.configs import TrainConfig

# Keys that say one thing several ways: a variant giving one replaces the space's others.
ALTERNATIVES = (("tokens", "tokens_per_param", "steps"), ("warmup_frac", "warmup_tokens"))

TrainKeys = dict[str, Any]  # train key -> a value as written (TrainConfig validates it)


def overlay(base: TrainConfig, own: TrainKeys | None) -> TrainKeys:
    """`base`'s settings with `own`'s keys over them, key by key; a key of `ALTERNATIVES`
    in `own` replaces its alternatives in `base` (warmup_tokens over a warmup_frac)."""
    fields = base.model_dump(exclude_unset=True)
    for group in ALTERNATIVES:
        if set(group) & set(own or {}):
            fields = {k: x for k, x in fields.items() if k not in group}
    return fields | (own or {})


def merge_train(base: TrainConfig, own: TrainKeys | None) -> TrainConfig:
    """A variant's `train:` merged over the space's (ValidationError when bad)."""
    return TrainConfig.model_validate(overlay(base, own))
