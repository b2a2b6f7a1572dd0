"""A study's fixed-versus-adaptive section (issue 58): one space run twice on the same seeds,
once on every seed and once with adaptive seeds `{min, max}`; what the adaptive run saved
(trials, the trials' summed time and the span from first start to last end) and, per
comparison with the baseline, whether the two verdicts agree: the same verdict, one resolved
where the other is open (reported as such, never counted as agreement), or reversed (better
in one, worse in the other: the adaptive design must never do this).

The fixed sweep's verdicts are its Holm-adjusted intervals (the report's comparison table);
the adaptive sweep's are its sequential decisions (`shapesweep.results.sequential`, kept in
its looks.json and read through `status`'s records).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.study_spec import Study
from shapesweep.results.tuned import loss_sign


@dataclass(frozen=True)
class Cost:
    trials: int
    trial_s: float  # the trials' wall_time_s summed
    span_s: float  # first trial's start to last trial's end


def sweep_cost(study: Study, name: str) -> Cost:
    """What sweep `name` of the study's store spent (nothing run: zeros)."""
    store = ParquetStore(str(study.store))
    trials = store.load_trials([name]) if study.store.is_dir() and name in store.sweeps() else pd.DataFrame()
    if trials.empty:
        return Cost(0, 0.0, 0.0)
    took = trials["wall_time_s"].astype(float).fillna(0.0)
    ends = pd.to_datetime(trials["finished_at"], utc=True)
    starts = ends - pd.to_timedelta(took, unit="s")
    return Cost(len(trials), float(took.sum()), float((ends.max() - starts.min()).total_seconds()))


def fixed_verdict(lower: float, upper: float, metric: str) -> str:
    """better / worse / open from a Holm-adjusted interval of candidate - baseline."""
    if not (lower == lower and upper == upper):
        return "no result"
    low, high = sorted((loss_sign(metric) * lower, loss_sign(metric) * upper))  # as a loss: down is better
    return "better" if high < 0 else "worse" if low > 0 else "open"


def adaptive_verdict(candidate: dict) -> str:
    """better / worse from a resolved sequential decision; else open (futile, max, open)."""
    state = candidate.get("sequential_state")
    if state in ("resolved-better", "resolved-worse"):
        return state.removeprefix("resolved-")
    return f"open ({state})" if state else "no result"


def agreement_of(fixed: str, adaptive: str) -> str:
    resolved = {"better", "worse"}
    if fixed in resolved and adaptive in resolved:
        return "agrees" if fixed == adaptive else "REVERSED"
    if fixed in resolved or adaptive in resolved:
        return "resolved vs open"
    return "agrees (both open)" if fixed == "open" and adaptive.startswith("open") else "no result"


def _saving(fixed: float, adaptive: float) -> str:
    return f"{1 - adaptive / fixed:.0%}" if fixed > 0 else "-"


def agreement_lines(study: Study, rows: list[tuple[str, float, float, dict | None]]) -> list[str]:
    """The section's Markdown: `rows` are (variant, the fixed sweep's Holm lower and upper,
    the adaptive sweep's record of that variant), one per comparison with the baseline."""
    assert study.agreement is not None
    fixed, adaptive = study.agreement
    low, high = study.adaptive[adaptive]
    a, b = sweep_cost(study, fixed), sweep_cost(study, adaptive)
    lines = [f"Sweep `{fixed}` on seeds {', '.join(map(str, study.seeds))}; sweep `{adaptive}` on "
             f"adaptive seeds {{min: {low}, max: {high}}} (the same seeds, fewer where decided).", "",
             "| | trials | trial time (s) | span (s) |", "|---|---|---|---|",
             f"| `{fixed}` (fixed) | {a.trials} | {a.trial_s:.0f} | {a.span_s:.0f} |",
             f"| `{adaptive}` (adaptive) | {b.trials} | {b.trial_s:.0f} | {b.span_s:.0f} |",
             f"| saved | {a.trials - b.trials} ({_saving(a.trials, b.trials)}) | "
             f"{a.trial_s - b.trial_s:.0f} ({_saving(a.trial_s, b.trial_s)}) | "
             f"{a.span_s - b.span_s:.0f} ({_saving(a.span_s, b.span_s)}) |", "",
             "| comparison | fixed (Holm) | adaptive (sequential) | seeds used | stopped at look | agreement |",
             "|---|---|---|---|---|---|"]
    counts: dict[str, int] = {}
    for variant, lower, upper, record in rows:
        one = fixed_verdict(lower, upper, study.metric)
        other = adaptive_verdict(record or {})
        verdict = agreement_of(one, other)
        counts[verdict] = counts.get(verdict, 0) + 1
        seeds = (record or {}).get("seeds_used", "-")
        look = (record or {}).get("decided_look") or "-"
        lines.append(f"| {variant} vs baseline | {one} | {other} | {seeds} | {look} | {verdict} |")
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    reversed_ = counts.get("REVERSED", 0)
    lines += ["", f"Verdicts: {summary}; " + (f"**{reversed_} reversed**." if reversed_ else "none reversed.")]
    return lines
