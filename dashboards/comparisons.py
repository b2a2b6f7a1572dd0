"""The report's comparison tables: per sweep, its candidates against their baseline as
`shapesweep status NAME` shows them (`shapesweep.results.summary`): mean ± std over the
measure seeds, the paired difference with its 95% interval, its family-adjusted p-value and
interval and the adjusted verdict, the seeds an unresolved one needs, why a candidate has
none and what to run; above each table, which seeds chose the tuned values and which
measured them, the warnings (selection bias, an optimum at a grid's edge), and how the
verdicts were adjusted, with the exploratory all-pairs family (`notes`). Texts are made here; the page only lays them out.
"""

from __future__ import annotations

import pandas as pd

from shapesweep.common import UserError

MAX_ROWS = 40  # candidates per table, best first (`status NAME` lists them all)
COLUMNS = ["variant", "shape", "tuned", "mean ± std (n)", "Δ vs baseline [95% CI]", "ADJUSTED", "verdict",
           "seeds for 80% power", "why no verdict or seeds missing; what to run"]  # ADJUSTED: `adjusted_header`


def compare_sweeps(trials: pd.DataFrame, adjust: str | None = None) -> dict[tuple[str, str], pd.DataFrame | UserError]:
    """`compare` of each sweep of `trials` (not running) on its metric (`figures.metric_for`),
    by (sweep, metric), each sweep's comparisons one family adjusted by `adjust` (default
    Holm): made once for the tables and the vs-baseline figure; a sweep whose baselines are
    ambiguous holds its UserError."""
    from shapesweep.dashboards.figures import metric_for
    from shapesweep.results.multiplicity import DEFAULT_ADJUST
    from shapesweep.results.stats import compare

    out: dict[tuple[str, str], pd.DataFrame | UserError] = {}
    for name, group in trials[trials["status"] != "running"].groupby("sweep", sort=True):
        metric = metric_for(group)
        try:
            out[(name, metric)] = compare(group, metric, adjust=adjust or DEFAULT_ADJUST)
        except UserError as error:
            out[(name, metric)] = error
    return out


def comparison_tables(trials: pd.DataFrame, root: str,
                      compared: dict[tuple[str, str], pd.DataFrame | UserError] | None = None) -> list[dict]:
    """One table per sweep of `trials` (with `shape_text`, `frames.with_derived`, and seed
    roles): {sweep, metric, seeds, warnings, columns, rows, more}; a sweep whose baselines
    are ambiguous gets its one-line problem instead. `compared`: `compare_sweeps(trials)`."""
    from shapesweep.dashboards.frames import METRIC_LABELS, shape_text
    from shapesweep.results.planned import complete_comparisons, planned_candidates
    from shapesweep.results.summary import (
        adaptive_lines,
        adjusted_header,
        adjusted_text,
        adjustment_line,
        exploratory_line,
        interval_text,
        mean_text,
        seeds_line,
        tuned_text,
        verdict_text,
    )

    tables = []
    for (name, metric), done in (compared if compared is not None else compare_sweeps(trials)).items():
        if isinstance(done, UserError):
            tables.append({"sweep": name, "problem": done.problem})
            continue
        group = trials[trials["sweep"] == name]
        running = group["status"] == "running"
        document = complete_comparisons(group[~running], name, root, metric, "baseline",  # every planned one
                                        planned_candidates(root, name), group[running], compared=done)
        shapes = group.drop_duplicates("key").set_index("key")["shape_text"]
        rows = [[c["variant"] or "-", shapes.get(c["key"]) or shape_text(c), tuned_text(c), mean_text(c, metric),
                 "-" if c["key"] == c["baseline_key"] else interval_text(c), adjusted_text(c), verdict_text(c),
                 str(c["seeds_for_80pct_power"] or "-"),
                 _why(c, document["baseline"] is not None)]
                for c in document["candidates"]]
        alone = [] if document["baseline"] is not None else [
            "no variant named baseline: no candidate has a verdict (status NAME --baseline VARIANT "
            "compares with another)"]
        tables.append({"sweep": name, "metric": METRIC_LABELS[metric], "seeds": seeds_line(document),
                       "warnings": document["warnings"] + alone, "baseline": document["baseline"] is not None,
                       "notes": [line for line in (adjustment_line(document), exploratory_line(document)) if line]
                       + adaptive_lines(document),
                       "columns": [adjusted_header(document) if c == "ADJUSTED" else c for c in COLUMNS],
                       "rows": rows[:MAX_ROWS], "more": max(0, len(rows) - MAX_ROWS),
                       **per_tuned_table(group, name, root, metric, shapes)})
    return tables


PER_TUNED_COLUMNS = ["variant", "shape", "tuned (* chosen)", "mean ± std (n)",
                     "Δ vs baseline at the same value [95% CI]", "Δ vs baseline at its chosen value [95% CI]"]


def per_tuned_table(group: pd.DataFrame, name: str, root: str, metric: str, shapes: pd.Series) -> dict:
    """{"per_tuned": {columns, rows, more}}: the sweep's candidates at every tuned value, as
    `status NAME --per tuned` lists them; {} for a sweep that tunes one value or none."""
    from shapesweep.results.stats import canonical_tuned_column
    from shapesweep.results.tuned_view import (
        per_tuned_delta_text,
        per_tuned_document,
        per_tuned_mean_text,
    )

    done = group[group["status"] != "running"]
    if done.empty or canonical_tuned_column(done["tuned_json"]).nunique() < 2:
        return {}
    try:
        document = per_tuned_document(done, name, root, metric, "baseline")
    except UserError:  # ambiguous baselines: the comparison table says so
        return {}
    rows = [[r["variant"] or "-", shapes.get(r["key"], r["key"]),
             " ".join(f"{k}={v}" for k, v in r["tuned"].items()) + (" *" if r["chosen"] else ""),
             per_tuned_mean_text(r, metric), per_tuned_delta_text(r, "same"), per_tuned_delta_text(r, "chosen")]
            for r in document["rows"]]
    return {"per_tuned": {"columns": PER_TUNED_COLUMNS, "rows": rows[:MAX_PER_TUNED_ROWS],
                          "more": max(0, len(rows) - MAX_PER_TUNED_ROWS)}}


MAX_PER_TUNED_ROWS = 120  # candidates x tuned values per table (`status NAME --per tuned` lists all)


def _why(candidate: dict, has_baseline: bool) -> str:
    """Why no verdict (a sweep without a baseline variant says it once, above), or which
    seeds its result lacks, with what to run."""
    if candidate["why"] and (has_baseline or candidate["no_verdict"] != "no baseline"):
        return candidate["why"] + (f"; run: {candidate['to_run']}" if candidate["to_run"] else "")
    if candidate["missing"]:
        return candidate["missing"] + (f"; run: {candidate['to_run_missing']}" if candidate["to_run_missing"] else "")
    return ""

