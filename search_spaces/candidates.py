"""What the solver hands on: `Candidate` (one solved shape), `Dropped` (a grid point and
why it is not one), `Plan` (all of them for a space), and a candidate's trainable document."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from shapesweep.families.base import STORED
from shapesweep.search_spaces.accounting import Accounting
from shapesweep.search_spaces.configs import TrainConfig, config_key, train_document
from shapesweep.search_spaces.schema import BASELINE_VARIANT, SearchSpace

METRIC_COLUMN = {"non_embedding_params": "params_non_embedding", "total_params": "params_total",
                 "flops_per_token": "flops_per_token", "active_params": "params_active"}
SHAPE_COLUMNS = STORED  # every family's fields marked Stored (live: a family registered later too)
MAX_DROPPED = 20  # dropped grid points kept (with reasons) for the user to see
ACCOUNTING_COLUMNS = tuple(f.name for f in dataclasses.fields(Accounting) if f.name != "widths")

Row = dict[str, Any]  # one flat result-store row


@dataclass
class Candidate:
    """One solved shape: its typed config, exact accounting and relative budget error."""

    config: Any  # the family's pydantic config (families.base: each family its own class)
    accounting: Accounting
    budget_error: float
    variant: str = ""
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = config_key(self.config)

    def to_row(self) -> Row:
        """Flat result-store row: key, family, shape columns, accounting columns, budget_error."""
        dump = self.config.model_dump(mode="json")
        row: Row = {"key": self.key, "family": self.config.family, "variant": self.variant}
        row |= {name: dump[name] for name in SHAPE_COLUMNS if name in dump}
        row["ffn_ratio"] = float(self.config.ffn_ratio)
        row["width_depth_ratio"] = float(self.config.width_depth_ratio)
        row["widths"] = list(self.accounting.widths)
        row |= {name: getattr(self.accounting, name) for name in ACCOUNTING_COLUMNS}
        row["budget_error"] = float(self.budget_error)
        return row


def short_value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass
class Dropped:
    """A grid point that did not become a candidate, and why (invalid, or off budget)."""

    variant: str
    point: dict[str, Any]
    reason: str

    def __str__(self) -> str:
        point = " ".join(f"{k}={short_value(v)}" for k, v in self.point.items()) or "(fixed point)"
        return f"{self.variant}: {point}: {self.reason}"


@dataclass
class Plan:
    """The solver's answer: candidates sorted by |budget_error|, the pruning counts, and
    the first MAX_DROPPED grid points that were dropped, with their reasons."""

    space: SearchSpace
    metric: str
    targets: dict[str, float]
    candidates: list[Candidate]
    counts: dict[str, int]
    dropped: list[Dropped] = field(default_factory=list)

    def counts_line(self) -> str:
        c = self.counts
        return (f"{c['raw']} raw points -> {c['feasible']} feasible -> "
                f"{c['within_tolerance']} within tolerance -> {c['unique']} unique candidates")

    def dropped_lines(self, limit: int = 10) -> list[str]:
        """'dropped N of M grid points' and one line per dropped point (up to `limit`)."""
        total = self.counts["raw"] - self.counts["within_tolerance"]
        if total <= 0:
            return []
        lines = [f"dropped {total} of {self.counts['raw']} grid points:"]
        lines += [f"  {d}" for d in self.dropped[:limit]]
        if total > min(limit, len(self.dropped)):
            lines.append(f"  ... and {total - min(limit, len(self.dropped))} more")
        return lines + self.baseline_warning()

    def baseline_warning(self) -> list[str]:
        """A warning line when the space has a baseline variant and none of its points became a
        candidate: every comparison with it (`status`, the report) would be missing."""
        names = {v.name for v in self.space.resolved()}
        if BASELINE_VARIANT not in names or any(c.variant == BASELINE_VARIANT for c in self.candidates):
            return []
        why = next((d.reason for d in self.dropped if d.variant == BASELINE_VARIANT),
                   f"none within the tolerance {self.space.budget.tolerance:g}")
        return [f"warning: variant {BASELINE_VARIANT!r} has no candidate ({why}): no other "
                "candidate will be compared with it; widen budget.tolerance or put the baseline on budget"]


def candidate_document(candidate: Candidate, train: TrainConfig) -> dict[str, Any]:
    """The YAML/JSON document `shapesweep train CONFIG` accepts for this candidate."""
    model, family = candidate.config.model_dump(mode="json", exclude={"family"}), candidate.config.family
    return {"family": family, "model": model,
            "train": train_document(train.model_dump(mode="json", exclude_none=True), family)}
