"""Ray Train runs that end without waiting on a State API no one serves.

Written for Ray 2.60 (Ray Train v2); it uses two private names, both here and only here.
Ray Train v2 starts, with every run, a detached `PlacementGroupCleaner` actor that polls
the controller's liveness through the State API (`ray.util.state.get_actor`, timeout 10 s),
so it can remove the worker group's placement group if the controller dies. The State API
is served by Ray's dashboard, which a sweep's local Ray runs without (`include_dashboard=
False`; `ray[tune]` does not ship it): each poll then waits out its timeout, and stopping
the cleaner at the end of every run waits for the poll in flight, ~12 s per data-parallel
trial (`benchmarks/bench_train_stop.py` measures it). Ray has no setting for this.

So in the local Ray a sweep starts for itself (no dashboard), data-parallel trials run
without that callback: there it could never see a controller die anyway (every query
fails), and a run that ends removes its placement group itself, as does the end of the
sweep's job for one that did not. On a cluster (`--address`, which may serve the State
API), or a Ray started by someone else, Ray's default stays; so it does on a Ray without
these private names.
"""

from __future__ import annotations

from typing import Any


def _cleaner_callback() -> type | None:
    try:  # private: ray/train/v2/_internal/callbacks/placement_group_callback.py (2.60)
        from ray.train.v2._internal.callbacks.placement_group_callback import (
            PlacementGroupCleanerCallback,
        )
    except ImportError:
        return None
    return PlacementGroupCleanerCallback


def without_cleaner(trainer: type) -> type:
    """`trainer` (a Ray Train v2 trainer class) without the placement-group cleaner; the
    class itself where Ray has no such callback or no `_create_default_callbacks` (private)."""
    cleaner = _cleaner_callback()
    if cleaner is None or not hasattr(trainer, "_create_default_callbacks"):
        return trainer

    class WithoutCleaner(trainer):
        def _create_default_callbacks(self) -> list[Any]:
            return [c for c in super()._create_default_callbacks() if not isinstance(c, cleaner)]

    WithoutCleaner.__name__ = WithoutCleaner.__qualname__ = trainer.__name__
    return WithoutCleaner
