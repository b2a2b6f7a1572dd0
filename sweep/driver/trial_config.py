"""What one Ray trial is given, as types: Tune's `config` of a trial is `{"spec": spec}`, the
spec being `shapesweep.sweep.search.trials.trial_spec`'s dict (JSON-safe: it travels through
Ray and Optuna). The trainable trains its `document`; the driver files its result by its ids
and `row`; the progress display and the trackers name the trial from it.

Types only, no imports beyond typing: the sweep's driver, its workers and `--help` all may
import this module.
"""

from __future__ import annotations

from typing import Any, TypedDict


class CandidateDocument(TypedDict):
    """The YAML/JSON document `shapesweep train CONFIG` accepts
    (`shapesweep.search_spaces.candidates.candidate_document`)."""

    family: str
    model: dict[str, object]
    train: dict[str, Any]  # TrainConfig's fields (`TrainConfig(**train)` checks each)


class TrialSpecDict(TypedDict):
    """One trial: its ids, the candidate document it trains, its candidate's result row
    (shape and accounting columns), the objectives a multi-objective search reads, its data."""

    trial_id: str  # KEY-sSEED, or KEY-tHASH-sSEED with tuned values
    key: str
    tuned_json: str
    seed: int
    document: CandidateDocument
    row: dict[str, object]
    objectives: dict[str, float]
    data: str | None
    device: str | None


class TrialConfig(TypedDict):
    """Tune's `config` of one trial (`param_space`'s, resolved)."""

    spec: TrialSpecDict
