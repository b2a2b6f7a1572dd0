"""What one Ray trial is given, as types: Tune's `config` of a trial is `{"spec": spec}`, the
spec being `shapesweep.sweep.search.trials.trial_spec`'s dict (JSON-safe: it travels through
Ray and Optuna). The trainable trains its `document`; the driver files its result by its ids
and `row`; the progress display and the trackers name the trial from it.

Types only, nothing imported at run time: the sweep's driver, its workers and `--help` all
may import this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # search imports the driver's trainable: the spec's type is read, not imported
    from shapesweep.sweep.search.trials import TrialSpec


class TrialConfig(TypedDict):
    """Tune's `config` of one trial (`param_space`'s, resolved)."""

    spec: TrialSpec
