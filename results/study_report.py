"""A study's report (`studies/NAME/report.md`), from its store alone: per sweep each
candidate's mean and sd over the measure seeds, each comparison's paired difference with
its family's Holm-adjusted interval, the machines the trials ran on, and each decision.

The statistics are the ones `status` prints (shapesweep.results.stats, .multiplicity): a
comparison is candidate minus baseline over the seeds both completed; the comparisons of
one family, whichever sweeps they span (one baseline shared by several sweeps is one
family), are Holm-adjusted together, their intervals Bonferroni at 1 - alpha/m. A study
whose data are not complete (a planned trial missing, or trials on another machine than
the study names) lists what is missing and states no decision. A study of a fixed and an
adaptive sweep (`agreement:`) adds what the adaptive one saved and whether each verdict
agrees (shapesweep.results.study_agreement); an adaptive sweep's candidates need only the
seeds its looks gave them. The text holds no time,
path or version of the machine that writes it, so the same store gives the same bytes.
"""

from __future__ import annotations

import hashlib
import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from shapesweep.results.multiplicity import adjusted_p, interval_confidence, paired_p
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.planned import complete_comparisons, planned_candidates
from shapesweep.results.roles import with_seed_roles
from shapesweep.results.stats import ROLE_COLUMN, canonical_tuned_column, compare, paired_rows
from shapesweep.results.study_agreement import agreement_lines
from shapesweep.results.study_spec import Decision, Pair, Study, candidate_labels
from shapesweep.search_spaces.solver import plan

ADJUST = "holm"
MACHINE_COLUMNS = ("cpu_model", "torch_version", "device_name")
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@dataclass
class SweepData:
    """One sweep's candidates (records of `complete_comparisons`) and measure-seed values."""

    name: str
    ran: bool
    candidates: list[dict]
    values: dict[str, pd.Series]  # label -> final metric per measure seed (its chosen value)
    machines: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class PairResult:
    """A comparison's paired difference: pairs, mean, sd, p (raw, Holm) and Holm interval."""

    pair: Pair
    n: int
    mean: float
    sd: float
    p: float
    p_adjusted: float
    lower: float
    upper: float
    confidence: float
    family_size: int

    def value(self, name: str) -> float:
        return float(getattr(self, name))


def sweep_data(study: Study, name: str) -> SweepData:
    """What the study's store holds of sweep `name` (a sweep not run: its planned candidates)."""
    root = str(study.store)
    store = ParquetStore(root)
    trials = store.load_trials([name]) if study.store.is_dir() and name in store.sweeps() else pd.DataFrame()
    labels = candidate_labels(study.spaces[name])
    if trials.empty:
        rows = [c.to_row() for c in plan(study.spaces[name]).candidates]
        pending = [{"variant": r["variant"], "key": r["key"], "label": labels[r["key"]], "state": "pending",
                    "n_seeds": 0, "seeds": [], "missing_seeds": list(study.seeds)} for r in rows]
        return SweepData(name, False, pending, {})
    trials = with_seed_roles(trials, root)
    compared = compare(trials, study.metric, "baseline", adjust=ADJUST)
    document = complete_comparisons(trials, name, root, study.metric, "baseline",
                                    planned_candidates(root, name), compared=compared, adjust=ADJUST)
    for candidate in document["candidates"]:
        candidate["label"] = labels.get(str(candidate["key"]), candidate["variant"] or candidate["key"])
    values = {labels.get(str(row.key), str(row.variant)): _seed_values(trials, study.metric, str(row.key), str(row.tuned))
              for row in compared.itertuples() if row.state == "measured"}
    machines = Counter(tuple(str(v) if pd.notna(v) else "unrecorded" for v in row)
                       for row in trials.reindex(columns=list(MACHINE_COLUMNS)).itertuples(index=False))
    return SweepData(name, True, document["candidates"], values, machines)


def _seed_values(trials: pd.DataFrame, metric: str, key: str, tuned: str) -> pd.Series:
    """The final metric per seed of the completed measure trials of `key` at value `tuned`."""
    measure = ~trials[ROLE_COLUMN].fillna(False).astype(bool)
    own = (trials["key"] == key) & (trials["status"] == "completed") & measure & trials[metric].notna()
    own &= canonical_tuned_column(trials["tuned_json"]) == tuned
    return trials[own].groupby("seed")[metric].mean()


def missing_trials(study: Study, data: dict[str, SweepData]) -> list[str]:
    """One line per planned candidate that lacks a measure seed of the study (or its result)."""
    lines = []
    for name in study.sweeps:
        for c in data[name].candidates:
            done = {int(s) for s in c.get("seeds") or []} if c["state"] == "measured" else set()
            lacking = [s for s in _wanted(study, name, c) if s not in done]
            if lacking:
                lines.append(f"{name}/{c['label']}: seeds {', '.join(map(str, lacking))} "
                             f"({c['state']})")
    return lines


def _wanted(study: Study, name: str, candidate: dict) -> list[int]:
    """The seeds a candidate must have: the study's, or an adaptive sweep's first min and
    then those its looks gave it (`seeds_used`; all of max until its sweep has looked)."""
    if name not in study.adaptive:
        return list(study.seeds)
    low, high = study.adaptive[name]
    used = candidate.get("seeds_used")
    return list(range(max(low, used) if isinstance(used, int) and used else high))


def machine_problems(study: Study, data: dict[str, SweepData]) -> list[str]:
    """Trials that ran on another machine than the study names (none named: none)."""
    problems = []
    for name in study.sweeps:
        for machine, count in sorted(data[name].machines.items()):
            wrong = [f"{column} {value!r}" for column, value in zip(MACHINE_COLUMNS, machine, strict=True)
                     if column in study.machine and study.machine[column] != value]
            if wrong:
                problems.append(f"{name}: {count} trials ran on {', '.join(wrong)}")
    return problems


def pair_results(every: list[Pair], seeds: list[int], data: dict[str, SweepData]) -> list[PairResult]:
    """Each comparison's paired difference over `seeds`, Holm-adjusted over its family (every
    comparison of that family, whichever sweeps it spans), in the order of `every`."""
    results: dict[Pair, PairResult] = {}
    for family in dict.fromkeys(p.family for p in every):
        pairs = [p for p in every if p.family == family]
        diff = np.array([_differences(p, data, seeds) for p in pairs])
        n, mean, sd, _, _ = paired_rows(diff)
        p = paired_p(n, mean, sd)
        level = interval_confidence(p, ADJUST)
        _, _, _, low, high = paired_rows(diff, level)
        p_adj = adjusted_p(p, ADJUST)
        size = int((~np.isnan(p)).sum())
        for i, pair in enumerate(pairs):
            spread = float(sd[i]) if n[i] >= 2 else np.nan
            results[pair] = PairResult(pair, int(n[i]), float(mean[i]), spread, float(p[i]),
                                       float(p_adj[i]), float(low[i]), float(high[i]), level, size)
    return [results[p] for p in every]


def _differences(pair: Pair, data: dict[str, SweepData], seeds: list[int]) -> list[float]:
    """candidate - baseline per study seed (NaN where either side has no completed trial)."""
    nothing = pd.Series(dtype=float)
    of = data[pair.sweep].values.get(pair.of, nothing).reindex(seeds)
    vs = data[pair.vs_sweep].values.get(pair.vs, nothing).reindex(seeds)
    return (of - vs).astype(float).tolist()


def decide(decision: Decision, results: list[PairResult]) -> tuple[bool, float]:
    """Whether the rule holds, and the value it tested."""
    result = next(r for r in results if r.pair == decision.pair)
    value = result.value(decision.field)
    return bool(value == value and OPERATORS[decision.op](value, decision.bound)), value


def _number(x: float, digits: int = 4) -> str:
    return "-" if x != x else f"{x:+.{digits}f}" if digits else f"{x:.3g}"


def _plain(x: float) -> str:
    return "-" if x != x else f"{x:.4f}"


def _candidate_table(study: Study, sweep: SweepData) -> list[str]:
    metric = study.metric
    lines = [f"| variant | state | seeds | mean {metric} | sd |", "|---|---|---|---|---|"]
    for c in sweep.candidates:
        mean, sd = c.get(f"{metric}_mean"), c.get(f"{metric}_std")
        lines.append(f"| {c['label']} | {c['state']} | {c['n_seeds']} | "
                     f"{_plain(np.nan if mean is None else mean)} | {_plain(np.nan if sd is None else sd)} |")
    return lines


def _comparison_table(study: Study, results: list[PairResult]) -> list[str]:
    lines = []
    for family in dict.fromkeys(r.pair.family for r in results):
        own = [r for r in results if r.pair.family == family]
        level = own[0].confidence
        lines += [f"Family `{family}`: {own[0].family_size} comparisons with a p-value, Holm-adjusted; "
                  f"intervals Bonferroni at {100 * level:.2f}%.", "",
                  f"| comparison | pairs | {study.quantity} (mean) | sd | lower | upper | p | p (Holm) |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r.pair.label} | {r.n} | {_number(r.mean)} | {_plain(r.sd)} | {_number(r.lower)} | "
                  f"{_number(r.upper)} | {_number(r.p, 0)} | {_number(r.p_adjusted, 0)} |" for r in own]
        lines.append("")
    return lines


def _machine_lines(study: Study, data: dict[str, SweepData]) -> list[str]:
    total: Counter = Counter()
    for sweep in data.values():
        total.update(sweep.machines)
    wanted = ", ".join(f"{k} {v!r}" for k, v in study.machine.items()) or "any (none named)"
    lines = [f"Required: {wanted}.", "", "| CPU | torch | device | trials |", "|---|---|---|---|"]
    lines += [f"| {cpu} | {torch} | {device} | {n} |"
              for (cpu, torch, device), n in sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))]
    return lines if total else [f"Required: {wanted}.", "", "No trial has run."]


def _decision_lines(study: Study, results: list[PairResult], withheld: list[str]) -> list[str]:
    lines = []
    for decision in study.decisions:
        head = f"- `{decision.quantity}` of {decision.pair.label}: rule `{decision.text}`"
        if withheld:
            lines.append(f"{head}: **no decision** (data incomplete)")
            continue
        holds, value = decide(decision, results)
        sentence = decision.holds if holds else decision.fails
        lines.append(f"{head}: {decision.field} = {_number(value, 4 if decision.field != 'p_adjusted' else 0)}"
                     f" -> **{'holds' if holds else 'does not hold'}**" + (f". {sentence}" if sentence else ""))
    return lines


def render(study: Study, data: dict[str, SweepData]) -> str:
    """The report's Markdown (the module docstring says what it holds)."""
    missing = missing_trials(study, data)
    elsewhere = machine_problems(study, data)
    results = pair_results(study.pairs, study.seeds, data)
    digest = hashlib.sha256(study.text.encode()).hexdigest()[:12]
    lines = [f"# Study `{study.name}`", "", f"Question: {study.question.strip()}", "",
             f"Generated by `shapesweep study report {study.name}` from `studies/{study.name}/store` "
             f"(study.yaml sha256 {digest}); measure seeds {', '.join(map(str, study.seeds))}; "
             f"metric {study.metric}.", "", "## Data", ""]
    if missing or elsewhere:
        lines += ["**Incomplete: no decision.** Missing trials:" if missing else "**No decision:**", ""]
        lines += [f"- {line}" for line in missing + elsewhere]
    else:
        lines.append(f"Complete: every planned candidate of every sweep has seeds "
                     f"{', '.join(map(str, study.seeds))}.")
    lines += ["", "## Machine", "", *_machine_lines(study, data), ""]
    for name, sweep in data.items():
        lines += [f"## Sweep `{name}` (space `{study.spaces[name].name}`)", ""]
        lines += [*_candidate_table(study, sweep), ""] if sweep.ran else ["Not run yet.", ""]
    lines += ["## Comparisons", "", *_comparison_table(study, results)]
    if study.agreement is not None:
        lines += ["## Fixed vs adaptive seeds", "", *_agreement(study, results, data), ""]
    lines += ["## Decision", ""]
    lines += _decision_lines(study, results, missing + elsewhere)
    return "\n".join(lines) + "\n"


def _agreement(study: Study, results: list[PairResult], data: dict[str, SweepData]) -> list[str]:
    """The fixed sweep's comparisons with its baseline beside the adaptive sweep's decisions."""
    assert study.agreement is not None
    fixed, adaptive = study.agreement
    records = {c["variant"]: c for c in data[adaptive].candidates}
    rows = [(r.pair.of, r.lower, r.upper, records.get(r.pair.of)) for r in results
            if r.pair.sweep == fixed and r.pair.vs_sweep == fixed and r.pair.vs == "baseline"]
    return agreement_lines(study, rows)


def write_report(study: Study) -> tuple[str, bool]:
    """Write the report beside study.yaml; its path (relative to the studies folder) and
    whether it states a decision."""
    data = {name: sweep_data(study, name) for name in study.sweeps}
    text = render(study, data)
    (study.folder / "report.md").write_text(text, encoding="utf-8")
    complete = not missing_trials(study, data) and not machine_problems(study, data)
    return f"{study.name}/report.md", complete
