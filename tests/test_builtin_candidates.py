"""Every candidate of every CPU-sized built-in space (the `-small` twins and the demo) builds
with exactly its accounted parameters and takes real training steps on the built-in data.
Their runs are in docs/small-sweeps.md; this keeps them runnable."""

from __future__ import annotations

import math

import pytest

from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import list_builtin, load_space
from shapesweep.trainers.loop import train
from shapesweep.trainers.models import build_model

CPU_SPACES = [name for name, _ in list_builtin() if name.endswith("-small") or name.startswith("demo-")]


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def test_every_full_space_has_its_cpu_twin_listed():
    assert len(CPU_SPACES) == 16  # 14 small twins + the two demo spaces (quick and full)


@pytest.mark.parametrize("name", CPU_SPACES)
def test_every_candidate_builds_exactly_and_trains(name):
    space = load_space(name)
    candidates = plan(space).candidates
    assert candidates
    recipe = space.train.model_copy(update={"tokens": None, "steps": 2, "eval_every": 2,
                                            "eval_tokens": 256})
    for candidate in candidates:
        model = build_model(candidate.config)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable == candidate.accounting.params_total  # a fixed W_in is params_frozen
        result = train(candidate.config, recipe)
        assert result.steps == 2 and math.isfinite(result.val_loss), candidate.key
        assert result.params_measured == trainable
