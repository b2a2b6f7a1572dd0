"""`status`'s rendering: the rich tables and the text lines it prints, from the records and
the JSON document `status_document` gathers (nothing here reads the store)."""

from __future__ import annotations

import json
import math

import pandas as pd
from rich.table import Table

from shapesweep.common import duration, human
from shapesweep.common import plain as _clean
from shapesweep.families import base as families
from shapesweep.results.stats import EVAL_Z
from shapesweep.results.summary import (
    adjusted_header,
    adjusted_text,
    interval_text,
    mean_text,
    tuned_text,
    verdict_text,
)
from shapesweep.results.tuned_view import per_tuned_delta_text, per_tuned_mean_text


def fmt(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and digits < 4:  # shape details: k=2 and beta=0.25, not 2.000
        return f"{value:.{digits}g}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value / 1e6:.3f}M"
    return str(value)


def machines_line(machines: list[dict]) -> str | None:
    """`status NAME`'s "ran on:" line: each machine and its trials."""
    def name(m: dict) -> str:
        if m["cpu_model"] is None:
            return "not recorded (rows from before 2026-11-30)"
        threads = f"{m['torch_threads']} thread{'s' * (m['torch_threads'] != 1)}"
        return f"{m['device_name']} ({m['cpu_model']}), torch {m['torch_version']}, {threads}"

    if not machines:
        return None
    return "ran on: " + "; ".join(f"{name(m)}: {m['trials']} trial{'s' * (m['trials'] != 1)}"
                                  for m in machines)


def per_tuned_table(document: dict) -> Table:
    """`status NAME --per tuned`: each candidate at each tuned value, the baseline's rows first."""
    metric, baseline = document["metric"], document["baseline"] or "baseline"
    table = Table(title=f"{document['sweep']} per tuned value: mean {metric} over the measure seeds "
                  f"(* the candidate's chosen value)")
    details = varying_details(document["rows"])
    for column in ("variant", "shape", "tuned", f"{metric} mean ± std (n)",
                   f"Δ vs {baseline} at the same value [95% CI]",
                   f"Δ vs {baseline} at its chosen value [95% CI]"):
        table.add_column(column, overflow="fold")
    for r in document["rows"]:
        tuned = " ".join(f"{k}={v}" for k, v in r["tuned"].items()) + (" *" if r["chosen"] else "")
        table.add_row(r["variant"] or r["key"], shape_label(r, details), tuned or "-", per_tuned_mean_text(r, metric),
                      per_tuned_delta_text(r, "same"), per_tuned_delta_text(r, "chosen"))
    return table


def shape_label(candidate: dict, details: tuple[str, ...] | None = None) -> str:
    """`64×4L d_h=256 k=2`, as the figures' legends write a shape: width × depth, then those
    of `details` (default: all) that are the candidate's family's `label_fields` (compact)."""
    spec = families.find(str(candidate.get("family")))  # None (an old row): no family
    width, depth = candidate.get(spec.width if spec else "d_model"), candidate.get("n_layers")
    head = f"{fmt(width)}×{fmt(depth)}L" if width is not None and depth is not None else ""
    inert = spec.inert_fields(candidate) if spec else frozenset()
    own = spec.label_fields if spec else families.label_fields()
    rest = [f"{n}={fmt(candidate[n], 3)}" for n in (own if details is None else details)
            if n in own and candidate.get(n) is not None and n not in inert]
    return " ".join([head, *rest]).strip()


def varying_details(candidates: list[dict]) -> tuple[str, ...]:
    """The shape details worth a table's room: d_h always, the others where candidates differ."""
    return tuple(n for n in families.label_fields()
                 if n == "d_h" or len({json.dumps(c.get(n)) for c in candidates}) > 1)


def candidates_table(document: dict, narrow: bool = False) -> Table:
    """Candidates ordered by their mean over seeds, with the difference to the baseline and
    the seeds an unresolved one needs; `narrow` (under 100 columns) leaves out the key (the
    trials table names it)."""
    metric, baseline = document["metric"], document["baseline"]
    chosen_by = (f"the tuned value seeds {', '.join(map(str, document['choice_seeds']))} chose"
                 if document["choice_seeds"] else "its best tuned value")
    table = Table(title=f"candidates of {document['sweep']} by mean {metric} over seeds "
                  f"(each at {chosen_by})")
    tuned = any(c["tuned"] for c in document["candidates"])
    power = any(c["seeds_for_80pct_power"] for c in document["candidates"])
    details = varying_details(document["candidates"])
    # off budget by more than 1% (a Pareto sweep, an ablation): each candidate's miss, beside its verdict
    missed = any(abs(c.get("budget_error") or 0.0) > BUDGET_SHOWN for c in document["candidates"])
    columns = [*([] if narrow else ["key"]), "variant", "shape", *(["tuned"] if tuned else []),
               *(["budget err"] if missed else []), f"{metric} mean ± std (n)"]
    # narrow: the verdict under the interval, and lines broken between numbers, never inside one
    adjusted = document["adjustment"]["method"] != "none" and document["adjustment"]["family_size"] > 0
    columns += ([f"Δ vs {baseline} [95% CI], {'adjusted, ' if adjusted else ''}verdict"] if narrow
                else [f"Δ vs {baseline} [95% CI]", *([adjusted_header(document)] if adjusted else []),
                      "verdict", *(["seeds for 80% power"] if power else [])]
                ) if baseline else []
    for column in columns:  # narrow terminals wrap cells at spaces instead of cutting them
        table.add_column(column, no_wrap=column == "key", overflow="fold")
    gap = "\n" if narrow else " "
    for c in document["candidates"]:
        cells = [*([] if narrow else [c["key"]]), c["variant"] or "-", shape_label(c, details),
                 *([tuned_text(c)] if tuned else []),
                 *([_percent(c.get("budget_error"))] if missed else []), mean_text(c, metric, gap)]
        needed = c["seeds_for_80pct_power"]
        anchor = c["key"] == c["baseline_key"]
        star = "*" if c.get("eval_noise") else ""
        verdict = ["-" if anchor else interval_text(c).replace(" [", gap + "["),
                   *([adjusted_text(c).replace(" [", gap + "[")] if adjusted and not (narrow and anchor) else []),
                   verdict_text(c) + star]
        if narrow:
            cells += [gap.join(verdict) + (f"{gap}{needed} seeds for 80%" if needed else "")] if baseline else []
        else:
            cells += [*verdict, *([str(needed) if needed else "-"] if power else [])] if baseline else []
        table.add_row(*cells)
    return table


def no_verdict_lines(document: dict) -> list[str]:
    """Why each candidate without a verdict has none, and what to run (one line for a sweep
    without a baseline variant, where no candidate has one)."""
    details = varying_details(document["candidates"])
    lines = [f"  {c['variant'] or c['key']} {shape_label(c, details)} ({c['key']}): {c['why']}"
             + _seeds_note(c) + (f"; run: {c['to_run']}" if c["to_run"] else "")
             for c in document["candidates"] if c["why"] and c["key"] != c["baseline_key"]
             and (document["baseline"] or c["no_verdict"] != "no baseline")]
    if document["baseline"] is None:
        variants = sorted({c["variant"] for c in document["candidates"] if c["variant"]})
        lines.append(f"  every candidate: the sweep has no variant named baseline to compare with "
                     f"(its variants: {', '.join(variants) or 'none recorded'}; status "
                     f"{document['sweep']} --baseline VARIANT picks one)")
    return lines


def _seeds_note(candidate: dict) -> str:
    """` (seeds 0, 1 missing; 0 running)` after a pending or choosing candidate's reason."""
    if candidate["state"] not in ("pending", "choosing"):
        return ""
    missing, running = candidate["missing_seeds"] or [], candidate.get("running_seeds") or []
    parts = [f"seed{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} missing"] if missing else []
    parts += [f"{', '.join(map(str, running))} running"] if running else []
    return f" ({'; '.join(parts)})" if parts else ""


BUDGET_SHOWN = 0.01  # a budget error above this is shown beside the verdicts


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def eval_noise_line(document: dict) -> str | None:
    """The footnote of the starred verdicts."""
    if not any(c.get("eval_noise") for c in document["candidates"]):
        return None
    return (f"* within {EVAL_Z} x eval_se of zero: the held-out set's own noise could make this "
            "difference (raise train.eval_tokens to settle it)")


def fidelity_line(document: dict, which: str = "rank_fidelity") -> str:
    """`which`: rank_fidelity, or rank_fidelity_cooled (the cooled evaluations')."""
    points = document[which]
    label = "rank fidelity" + (" of the cooled evaluations" if which.endswith("cooled") else "")
    if not points:
        return f"{label}: no evaluation point shared by 3 or more measured candidates"
    last = points[-1]
    if not last["resolved_pairs"]:
        return (f"{label}: none of the {last['unresolved_pairs']} pairs of candidates is resolved "
                "at the end (each paired 95% interval includes zero): no order to keep")
    taus = ", ".join(f"{p['budget_fraction']:.0%}: {fmt(p['kendall_tau'], 2)}" for p in points)
    stable = document[f"{which}_stable_fraction"]
    line = (f"{label} (Kendall's tau over the {last['resolved_pairs']} pairs whose final difference "
            f"is resolved; {last['unresolved_pairs']} within noise, not counted; by budget fraction): {taus}")
    return line + (f"; stays >= 0.8 from {stable:.0%} of the budget" if stable is not None
                   else "; never stays >= 0.8")


def stopped_lines(document: dict) -> list[str]:
    """The noise-aware ASHA's stopped candidates, each with the evidence it was stopped on."""
    lines = []
    for d in document.get("asha_stopped", []):
        tuned = " ".join(f"{k}={v}" for k, v in json.loads(d["tuned_json"]).items())
        cut = " ".join([d["cut_key"], *(f"{k}={v}" for k, v in json.loads(d["cut_tuned_json"]).items())])
        lines.append(f"stopped at {human(d['rung_tokens'])} tokens, all {len(d['losses'])} seeds: "
                     f"{' '.join(filter(None, [d['key'], tuned]))}, worse than {cut} by "
                     f"{d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]")
    return lines


def asha_line(document: dict) -> str | None:
    asha = document["asha"]
    if not asha or not asha["stopped"]:
        return None
    share = "-" if asha["fraction"] is None else f"{asha['fraction']:.0%}"
    return (f"ASHA stopped {asha['stopped']} trials; {asha['checkable']} have a completed run of "
            f"the same candidate and tuned value, and {asha['confirmed']} of those ({share}) "
            "finished outside the top 1/reduction_factor")


def oom_line(trials: pd.DataFrame) -> str | None:
    """The trials that ran out of memory and went on at a smaller micro-batch
    (shapesweep.trainers.fitting), if any."""
    if trials.empty or "oom_retries" not in trials or not (trials["oom_retries"].fillna(0) > 0).any():
        return None
    hit = trials[trials["oom_retries"].fillna(0) > 0]
    each = ", ".join(f"{row.trial_id} ({int(row.oom_retries)}x, micro-batch "
                     f"{int(row.micro_batch_size) if row.micro_batch_size == row.micro_batch_size else '-'}"
                     f", {row.status})" for row in hit.itertuples())
    return f"out of memory, retried with half the micro-batch: {len(hit)} trials: {each}"


def sweeps_table(root: str, sweeps: list[dict]) -> Table:
    """One line per sweep; counts in one column, so the table fits 80 columns."""
    table = Table(title=f"sweeps under {root}")
    for column in ("name", "space", "status", "trials", "best val_loss"):
        table.add_column(column, overflow="fold", justify="right" if column == "best val_loss" else "left")
    for sweep in sweeps:
        parts = [f"{sweep[state]} {label}" for state, label in
                 (("completed", "completed"), ("stopped_early", "stopped"), ("failed", "failed"),
                  ("running", "running")) if sweep[state]]
        of = f" (of {sweep['trials']})" if sweep["trials"] is not None else ""
        table.add_row(sweep["name"], sweep["space"] or "-", sweep["status"] or "-",
                      (", ".join(parts) or "none") + of, fmt(sweep["best_val_loss"]))
    return table


def trials_table(name: str, trials: pd.DataFrame, top: int) -> Table:
    """The trials best first; a compile column only when a trial compiled, an error column
    only when one has an error text."""
    table = Table(title=f"trials of {name}, best first (by val_loss)")
    errors = trials["error"].fillna("").astype(str).str.strip() if not trials.empty else None
    failed = bool(errors is not None and errors.ne("").any())
    compiled = "compile_s" in trials and trials["compile_s"].notna().any()
    columns = ("candidate", "status", "seed", "val_loss", "tokens",
               *(["compile s"] if compiled else []), *(["error"] if failed else []))
    for column in columns:
        table.add_column(column, overflow="fold", justify="right" if column in (
            "seed", "val_loss", "tokens", "compile s") else "left")
    ordered = trials.sort_values(["val_loss"], na_position="last").head(top)
    if len(ordered) < len(trials):  # the title says what the table leaves out
        table.caption = (f"the best {len(ordered)} of {len(trials)}: {len(trials) - len(ordered)} more "
                         f"not shown (status {name} --all lists every one; --top N the best N)")
    for row in ordered.to_dict("records"):
        seed, loss, tokens = (_clean(row.get(c)) for c in ("seed", "val_loss", "tokens"))
        state = row["status"].replace("_", " ") + (f" at {human(tokens)}" if row["status"] == "stopped_early"
                                                    and tokens is not None else "")
        cells = [_candidate_name(row), state, fmt(None if seed is None else int(seed)),
                 fmt(loss), "-" if tokens is None else human(tokens)]
        error = row.get("error") if isinstance(row.get("error"), str) else ""
        seconds, blocks = _clean(row.get("compile_s")), _clean(row.get("blocks_per_region"))
        regions = f" ({int(blocks)} blocks a region)" if blocks is not None and blocks > 1 else ""
        compile_cell = ["-" if seconds is None else f"{seconds:.1f}{regions}"] if compiled else []
        table.add_row(*cells, *compile_cell, *([error[:60]] if failed else []))
    return table


def _candidate_name(row: dict) -> str:
    """A trial's candidate as tables name it (`candidate_label`: variant, shape, tuned values);
    the key stays in `--format json`."""
    return families.candidate_label({k: _clean(v) for k, v in row.items() if k != "widths"})


def running_table(name: str, running: pd.DataFrame) -> Table:
    """Trials training now (`shapesweep.results.live`): latest loss, tokens of the budget, ETA."""
    table = Table(title=f"running now in {name} (latest evaluation)")
    for column in ("candidate", "seed", "val_loss", "tokens", "elapsed", "ETA"):
        table.add_column(column, overflow="fold", justify="left" if column == "candidate" else "right")
    for row in running.sort_values("trial_id").to_dict("records"):
        tokens, budget, elapsed = (_clean(row.get(c)) for c in ("tokens", "train_tokens_budget", "wall_time_s"))
        done = "-" if tokens is None else human(tokens) + (f" of {human(budget)}" if budget else "")
        eta = (budget - tokens) * elapsed / tokens if tokens and budget and elapsed else None
        table.add_row(_candidate_name(row), fmt(_clean(row.get("seed"))), fmt(_clean(row.get("val_loss"))),
                      done, duration(elapsed), duration(eta))
    return table
