"""Typed configs: every registered model family's, and the training recipe's re-export.

These are the currency between every part of shapesweep. Each family's config lives in
its own module under `shapesweep.families` (listed in `base.FAMILY_MODULES`, registered by
the registry itself); `make_config` and `FAMILIES` read the registry. The shared field
types, LM building blocks and built-in config classes are re-exported here for convenience.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from shapesweep.families import base
from shapesweep.families.base import (  # noqa: F401 (re-exported)
    MAX_DIM,
    MAX_SEED,
    MAX_TOKENS,
    MAX_VOCAB,
    Count,
    Dim,
    IntCount,
    PositiveCount,
    PositiveInt,
    parse_count,
)
from shapesweep.families.conventional import ConventionalConfig  # noqa: F401 (re-exported)
from shapesweep.families.hourglass import HourglassConfig  # noqa: F401 (re-exported)
from shapesweep.families.lm import (  # noqa: F401 (re-exported)
    GATED,
    MOE_ACTIVATIONS,
    MOE_FIELDS,
    Activation,
    LayerShape,
    moe_problem,
)
from shapesweep.families.variable_width import Shape, VariableWidthConfig  # noqa: F401 (re-exported)
from shapesweep.families.vision_mlp import VisionMLPConfig  # noqa: F401 (re-exported)

# The recipe is the trainer's (shapesweep.trainers.recipe); spaces and candidate files read it.
from shapesweep.trainers.recipe import TrainConfig  # noqa: F401 (re-exported)


class _Families(Mapping):
    """family name -> config class, live over the registry (a family registered later is in)."""

    def __getitem__(self, name: str) -> type[BaseModel]:
        if name not in base.names():
            raise KeyError(name)
        return base.get(name).config

    def __iter__(self) -> Iterator[str]:
        return iter(base.names())

    def __len__(self) -> int:
        return len(base.names())


FAMILIES: Mapping[str, type[BaseModel]] = _Families()


def train_document(train: Mapping[str, object], family: str) -> dict[str, Any]:
    """A candidate document's `train:` block for `family`: `train` (a recipe's set keys) less
    the keys that family's task never reads (a language model's: images per step, the
    denoising noise; they would read as settings it trains with)."""
    unread = base.get(family).task.unread_train_keys
    return {k: v for k, v in train.items() if k not in unread}


def config_key(config: BaseModel) -> str:
    """A stable 12-hex hash of a model config's shape (what makes two candidates the same)."""
    payload = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def make_config(fields: Mapping[str, object]) -> BaseModel:
    """Build the typed config for `fields['family']` (pydantic errors propagate)."""
    return base.get(fields.get("family")).config.model_validate(fields)
