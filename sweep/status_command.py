"""`shapesweep status [NAME]`: the sweeps under a root, or one sweep's candidates, verdicts and
trials (a table, or `--format json|csv` for programs).

Why one module of this length (over 600 lines): the JSON document and its views (the table,
json, csv, and the per-tuned-value view) are one verb's output, formatted together; what they
compute lives in `shapesweep.results` (summary, planned, tuned_view, multiplicity). The next
view to come should take the per-tuned one into a module of its own.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from typing import Any

from shapesweep.common import UserError, duration, human, printable, terminal_console, write_csv
from shapesweep.common import plain as _clean
from shapesweep.families import base as families
from shapesweep.sweep.store_args import read_catalog

STATUS_FORMATS = ("table", "json", "csv")


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and digits < 4:  # shape details: k=2 and beta=0.25, not 2.000
        return f"{value:.{digits}g}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value / 1e6:.3f}M"
    return str(value)


STATUS_METRICS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "train_loss_tail", "psnr", "ssim")


PER_VIEWS = ("tuned",)


def _check_status_args(args: argparse.Namespace) -> None:
    if args.format not in STATUS_FORMATS:
        raise UserError(f"{args.format!r} is not one of {', '.join(STATUS_FORMATS)}", key="--format")
    if args.metric not in STATUS_METRICS:
        raise UserError(f"{args.metric!r} is not one of {', '.join(STATUS_METRICS)}", key="--metric")
    if args.name is None and args.baseline is not None:
        raise UserError("needs one sweep NAME", key="--baseline")
    if args.per not in (None, *PER_VIEWS):
        raise UserError(f"{args.per!r} is not one of {', '.join(PER_VIEWS)}", key="--per")
    if args.per is not None and args.name is None:
        raise UserError("needs one sweep NAME", key="--per")
    if args.top < 1:
        raise UserError(f"must be at least 1 (--all lists every trial), not {args.top}", key="--top")
    if args.adjust is not None:
        from shapesweep.results.multiplicity import check_method

        check_method(args.adjust)
        if args.name is None:
            raise UserError("needs one sweep NAME", key="--adjust")


def _reduction_factor(root: str, name: str) -> float | None:
    """ASHA's reduction factor from the options file `run` writes (shapesweep.sweep.runner.OPTIONS_FILE,
    not imported: it imports Ray); None when the sweep ran without ASHA."""
    from shapesweep.results.store import read_sweep_file, sweep_dir, sweep_file_repair

    path = f"{sweep_dir(root, name)}/sweep.json"
    try:
        text = read_sweep_file(root, name, "sweep.json")
        options = json.loads(text) if text else {}
        if not isinstance(options, dict):
            raise ValueError("not a JSON object")
        if options.get("scheduler") != "asha":
            return None
        factor = float(options["reduction_factor"])
    except (OSError, ValueError, TypeError, KeyError) as error:  # garbled, truncated, unreadable
        problem = f"no {error}" if isinstance(error, KeyError) else str(error)
        raise UserError(f"not a sweep options file ({problem}); {sweep_file_repair(root, name, 'sweep.json')}",
                        file=path) from None
    if not factor > 1:
        raise UserError(f"not a sweep options file (reduction_factor {factor}); "
                        f"{sweep_file_repair(root, name, 'sweep.json')}", file=path)
    return factor


def _status_document(args: argparse.Namespace, trials, curves, running=None) -> dict:
    """The one object `status NAME --format json` prints: every candidate the sweep plans,
    those no trial of which has landed `pending` (`shapesweep.results.planned`)."""
    from shapesweep.results.planned import complete_comparisons, planned_candidates
    from shapesweep.results.roles import with_seed_roles
    from shapesweep.results.stats import asha_confirmation, rank_fidelity, stable_fraction

    planned = planned_candidates(args.root, args.name)
    variants = set(trials["variant"].dropna()) | (set(planned["variant"].dropna()) if len(planned) else set())
    baseline = args.baseline or "baseline"
    if args.baseline is not None and baseline not in variants:
        known = ", ".join(sorted(variants)) or "none recorded"
        raise UserError(f"sweep {args.name!r} has no variant {baseline!r} (its variants: {known})",
                        key="--baseline")
    trials = with_seed_roles(trials, args.root)
    _check_family(args, trials, baseline)
    document = complete_comparisons(trials, args.name, args.root, args.metric, baseline, planned, running,
                                    adjust=_adjust(args))
    fidelity = rank_fidelity(trials, curves, args.metric)
    factor = _reduction_factor(args.root, args.name)
    return {
        **document,
        **_with_cooldowns(args, trials, curves),
        "rank_fidelity": _fidelity_points(fidelity),
        "rank_fidelity_stable_fraction": stable_fraction(fidelity) if len(fidelity) else None,
        "asha": asha_confirmation(trials, factor, args.metric) if factor else None,
        "machines": _machines(trials),
    }


def _machines(trials) -> list[dict]:
    """The machines the trials ran on (`shapesweep.trainers.machine`), most trials first: a
    sweep spanning machines compares losses that differ by float order, not by shape alone.
    Rows written before the columns existed count as one machine of nulls, last of its count."""
    import pandas as pd

    from shapesweep.results.rows import MACHINE_FIELDS

    def clean(name: str, value):
        return None if pd.isna(value) else int(value) if name == "torch_threads" else str(value)

    rows = trials.reindex(columns=list(MACHINE_FIELDS)).itertuples(index=False, name=None)
    counts = Counter(tuple(clean(n, v) for n, v in zip(MACHINE_FIELDS, row, strict=True)) for row in rows)
    order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0] is None, [str(v) for v in kv[0]]))
    return [{**dict(zip(MACHINE_FIELDS, key, strict=True)), "trials": n} for key, n in order]


def _machines_line(machines: list[dict]) -> str | None:
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


def _per_tuned_table(document: dict):
    """`status NAME --per tuned`: each candidate at each tuned value, the baseline's rows first."""
    from rich.table import Table

    from shapesweep.results.tuned_view import per_tuned_delta_text, per_tuned_mean_text

    metric, baseline = document["metric"], document["baseline"] or "baseline"
    table = Table(title=f"{document['sweep']} per tuned value: mean {metric} over the measure seeds "
                  f"(* the candidate's chosen value)")
    details = _varying(document["rows"])
    for column in ("variant", "shape", "tuned", f"{metric} mean ± std (n)",
                   f"Δ vs {baseline} at the same value [95% CI]",
                   f"Δ vs {baseline} at its chosen value [95% CI]"):
        table.add_column(column, overflow="fold")
    for r in document["rows"]:
        tuned = " ".join(f"{k}={v}" for k, v in r["tuned"].items()) + (" *" if r["chosen"] else "")
        table.add_row(r["variant"] or r["key"], _shape(r, details), tuned or "-", per_tuned_mean_text(r, metric),
                      per_tuned_delta_text(r, "same"), per_tuned_delta_text(r, "chosen"))
    return table


def _per_tuned(args: argparse.Namespace, trials, console) -> int:
    """`status NAME --per tuned` in the asked format."""
    from shapesweep.results.roles import with_seed_roles
    from shapesweep.results.tuned_view import per_tuned_document

    variants = set(trials["variant"].dropna())
    if args.baseline is not None and args.baseline not in variants:
        known = ", ".join(sorted(variants)) or "none recorded"
        raise UserError(f"sweep {args.name!r} has no variant {args.baseline!r} (its variants: {known})",
                        key="--baseline")
    document = per_tuned_document(with_seed_roles(trials, args.root), args.name, args.root, args.metric,
                                  args.baseline or "baseline")
    if args.format == "json":
        print(json.dumps(document, indent=2))
    elif args.format == "csv":
        write_csv([{**{k: v for k, v in r.items() if k not in ("tuned", "baseline_tuned")},
                    **{f"tuned.{k}": v for k, v in r["tuned"].items()}} for r in document["rows"]], sys.stdout)
    elif not document["rows"]:
        console.print(f"{args.name}: no trial has landed yet", highlight=False)
    else:
        console.print(_per_tuned_table(document))
        from shapesweep.results.summary import seeds_line

        console.print(seeds_line(document), highlight=False, markup=False)
    return 0
def _adjust(args: argparse.Namespace) -> str:
    from shapesweep.results.multiplicity import DEFAULT_ADJUST

    return getattr(args, "adjust", None) or DEFAULT_ADJUST


def _check_family(args: argparse.Namespace, trials, baseline: str) -> None:
    """An adjustment asked for (`--adjust holm|bh`) over a family of one candidate besides
    the baseline has nothing to adjust: refused, so that no one reads a one-comparison
    verdict as family-wise controlled. The default (no flag) adjusts whatever the family is."""
    if getattr(args, "adjust", None) in (None, "none") or not (trials["variant"] == baseline).any():
        return
    others = trials.loc[trials["variant"] != baseline, "key"].nunique()
    if others < 2:
        raise UserError(f"sweep {args.name!r} compares {others} candidate{'' if others == 1 else 's'} with its "
                        f"baseline: a family of {others} has nothing to adjust (leave out --adjust, or "
                        "--adjust none)", key="--adjust")


def _fidelity_points(fidelity) -> list[dict]:
    return [{"tokens": int(r.tokens), "budget_fraction": float(r.budget_fraction),
             "n_candidates": int(r.n_candidates), "kendall_tau": _clean(r.kendall_tau),
             "resolved_pairs": int(r.resolved_pairs),
             "swapped_resolved_pairs": int(r.swapped_resolved_pairs),
             "unresolved_pairs": int(r.unresolved_pairs)}
            for r in fidelity.itertuples()]


def _with_cooldowns(args: argparse.Namespace, trials, curves) -> dict:
    """The cooled evaluations' rank fidelity (when the curves have them for the metric) and
    the noise-aware ASHA's stop decisions (when it ran): `status`'s cooldown part."""
    from shapesweep.results.stats import cooled_column, cooled_rank_fidelity, stable_fraction
    from shapesweep.results.store import read_sweep_json

    out: dict[str, Any] = {}
    column = cooled_column(args.metric)
    if column in curves and curves[column].notna().any():
        cooled = cooled_rank_fidelity(trials, curves, args.metric)
        out["rank_fidelity_cooled"] = _fidelity_points(cooled)
        out["rank_fidelity_cooled_stable_fraction"] = stable_fraction(cooled) if len(cooled) else None
    decisions = read_sweep_json(args.root, args.name, "asha.json", list, _decisions_problem) or []
    if decisions:  # shapesweep.sweep.paired_asha.DECISIONS_FILE (not imported: it imports Ray)
        out["asha_stopped"] = [d for d in decisions if d["stop"]]
    return out


_DECISION_KEYS = ("key", "tuned_json", "rung_tokens", "losses", "stop", "cut_key", "cut_tuned_json",
                  "delta", "ci_low", "ci_high")  # what `_stopped_lines` reads of each


def _decisions_problem(decisions: list) -> str | None:
    """Why `asha.json` is not a list of the decisions `_stopped_lines` prints, or None."""
    for number, d in enumerate(decisions):
        missing = [k for k in _DECISION_KEYS if k not in d] if isinstance(d, dict) else ["all"]
        try:  # a decision compared with no cut (none below it) has no cut, delta or interval
            cut = not missing and d["cut_key"] is not None
            sound = not missing and isinstance(json.loads(d["tuned_json"]), dict) and (
                not cut or isinstance(json.loads(d["cut_tuned_json"]), dict)) and all(
                isinstance(d[k], int | float) or (d[k] is None and not cut)
                for k in ("delta", "ci_low", "ci_high")) and isinstance(d["rung_tokens"], int | float)
        except (TypeError, ValueError):
            sound = False
        if not sound:
            return f"entry {number} is no decision"
    return None


def _flat(candidate: dict) -> dict:
    """A candidate as one CSV row: tuned values as `tuned.NAME` columns."""
    row = {k: v for k, v in candidate.items() if k != "tuned"}
    row.update({f"tuned.{k}": v for k, v in (candidate["tuned"] or {}).items()})
    return row


def _print_csv(document: dict) -> None:
    """One row per candidate; the sweep's seeds (which chose, which measured) on every row."""

    seeds = {name: document[name] for name in ("choice_seeds", "measure_seeds")}
    write_csv([{**_flat(c), **seeds} for c in document["candidates"]], sys.stdout)


def _shape(candidate: dict, details: tuple[str, ...] | None = None) -> str:
    """`64×4L d_h=256 k=2`, as the figures' legends write a shape: width × depth, then those
    of `details` (default: all) that are the candidate's family's `label_fields` (compact)."""
    spec = families.find(candidate.get("family"))
    width, depth = candidate.get(spec.width if spec else "d_model"), candidate.get("n_layers")
    head = f"{_fmt(width)}×{_fmt(depth)}L" if width is not None and depth is not None else ""
    inert = spec.inert_fields(candidate) if spec else frozenset()
    own = spec.label_fields if spec else families.label_fields()
    rest = [f"{n}={_fmt(candidate[n], 3)}" for n in (own if details is None else details)
            if n in own and candidate.get(n) is not None and n not in inert]
    return " ".join([head, *rest]).strip()


def _varying(candidates: list[dict]) -> tuple[str, ...]:
    """The shape details worth a table's room: d_h always, the others where candidates differ."""
    return tuple(n for n in families.label_fields()
                 if n == "d_h" or len({json.dumps(c.get(n)) for c in candidates}) > 1)


def _candidates_table(document: dict, narrow: bool = False):
    """Candidates ordered by their mean over seeds, with the difference to the baseline and
    the seeds an unresolved one needs; `narrow` (under 100 columns) leaves out the key (the
    trials table names it)."""
    from rich.table import Table

    from shapesweep.results.summary import (
        adjusted_header,
        adjusted_text,
        interval_text,
        mean_text,
        tuned_text,
        verdict_text,
    )

    metric, baseline = document["metric"], document["baseline"]
    chosen_by = (f"the tuned value seeds {', '.join(map(str, document['choice_seeds']))} chose"
                 if document["choice_seeds"] else "its best tuned value")
    table = Table(title=f"candidates of {document['sweep']} by mean {metric} over seeds "
                  f"(each at {chosen_by})")
    tuned = any(c["tuned"] for c in document["candidates"])
    power = any(c["seeds_for_80pct_power"] for c in document["candidates"])
    details = _varying(document["candidates"])
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
        cells = [*([] if narrow else [c["key"]]), c["variant"] or "-", _shape(c, details),
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


def _no_verdict_lines(document: dict) -> list[str]:
    """Why each candidate without a verdict has none, and what to run (one line for a sweep
    without a baseline variant, where no candidate has one)."""
    details = _varying(document["candidates"])
    lines = [f"  {c['variant'] or c['key']} {_shape(c, details)} ({c['key']}): {c['why']}"
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


def _eval_noise_line(document: dict) -> str | None:
    """The footnote of the starred verdicts."""
    from shapesweep.results.stats import EVAL_Z

    if not any(c.get("eval_noise") for c in document["candidates"]):
        return None
    return (f"* within {EVAL_Z} x eval_se of zero: the held-out set's own noise could make this "
            "difference (raise train.eval_tokens to settle it)")


def _fidelity_line(document: dict, which: str = "rank_fidelity") -> str:
    """`which`: rank_fidelity, or rank_fidelity_cooled (the cooled evaluations')."""
    points = document[which]
    label = "rank fidelity" + (" of the cooled evaluations" if which.endswith("cooled") else "")
    if not points:
        return f"{label}: no evaluation point shared by 3 or more measured candidates"
    last = points[-1]
    if not last["resolved_pairs"]:
        return (f"{label}: none of the {last['unresolved_pairs']} pairs of candidates is resolved "
                "at the end (each paired 95% interval includes zero): no order to keep")
    taus = ", ".join(f"{p['budget_fraction']:.0%}: {_fmt(p['kendall_tau'], 2)}" for p in points)
    stable = document[f"{which}_stable_fraction"]
    line = (f"{label} (Kendall's tau over the {last['resolved_pairs']} pairs whose final difference "
            f"is resolved; {last['unresolved_pairs']} within noise, not counted; by budget fraction): {taus}")
    return line + (f"; stays >= 0.8 from {stable:.0%} of the budget" if stable is not None
                   else "; never stays >= 0.8")


def _stopped_lines(document: dict) -> list[str]:
    """The noise-aware ASHA's stopped candidates, each with the evidence it was stopped on."""
    lines = []
    for d in document.get("asha_stopped", []):
        tuned = " ".join(f"{k}={v}" for k, v in json.loads(d["tuned_json"]).items())
        cut = " ".join([d["cut_key"], *(f"{k}={v}" for k, v in json.loads(d["cut_tuned_json"]).items())])
        lines.append(f"stopped at {human(d['rung_tokens'])} tokens, all {len(d['losses'])} seeds: "
                     f"{' '.join(filter(None, [d['key'], tuned]))}, worse than {cut} by "
                     f"{d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]")
    return lines


def _asha_line(document: dict) -> str | None:
    asha = document["asha"]
    if not asha or not asha["stopped"]:
        return None
    share = "-" if asha["fraction"] is None else f"{asha['fraction']:.0%}"
    return (f"ASHA stopped {asha['stopped']} trials; {asha['checkable']} have a completed run of "
            f"the same candidate and tuned value, and {asha['confirmed']} of those ({share}) "
            "finished outside the top 1/reduction_factor")


def _oom_line(trials) -> str | None:
    """The trials that ran out of memory and went on at a smaller micro-batch
    (shapesweep.trainers.fitting), if any."""
    if trials.empty or "oom_retries" not in trials or not (trials["oom_retries"].fillna(0) > 0).any():
        return None
    hit = trials[trials["oom_retries"].fillna(0) > 0]
    each = ", ".join(f"{row.trial_id} ({int(row.oom_retries)}x, micro-batch "
                     f"{int(row.micro_batch_size) if row.micro_batch_size == row.micro_batch_size else '-'}"
                     f", {row.status})" for row in hit.itertuples())
    return f"out of memory, retried with half the micro-batch: {len(hit)} trials: {each}"


def _sweep_records(records: dict, names: list[str], trials, running) -> list[dict]:
    """One record per sweep: what `status` lists, as `status --format json` prints it."""
    out = []
    for name in names:
        record = records.get(name)
        rows = trials[trials["sweep"] == name] if trials is not None else None
        counts = rows["status"].value_counts() if rows is not None else {}
        best = rows["val_loss"][rows["status"] == "completed"].min() if rows is not None else None
        out.append({
            "name": name, "space": record.space_name if record else None,
            "space_hash": record.space_hash if record else None,
            "status": record.status if record else None,
            "trials": record.n_candidates if record else None,  # the catalog counts trials
            **{state: int(counts.get(state, 0)) for state in ("completed", "stopped_early", "failed")},
            "running": int((running["sweep"] == name).sum()),
            "best_val_loss": _clean(best),
        })
    return out


def _sweeps_table(args: argparse.Namespace, sweeps: list[dict]):
    """One line per sweep; counts in one column, so the table fits 80 columns."""
    from rich.table import Table

    table = Table(title=f"sweeps under {args.root}")
    for column in ("name", "space", "status", "trials", "best val_loss"):
        table.add_column(column, overflow="fold", justify="right" if column == "best val_loss" else "left")
    for sweep in sweeps:
        parts = [f"{sweep[state]} {label}" for state, label in
                 (("completed", "completed"), ("stopped_early", "stopped"), ("failed", "failed"),
                  ("running", "running")) if sweep[state]]
        of = f" (of {sweep['trials']})" if sweep["trials"] is not None else ""
        table.add_row(sweep["name"], sweep["space"] or "-", sweep["status"] or "-",
                      (", ".join(parts) or "none") + of, _fmt(sweep["best_val_loss"]))
    return table


def _trials_table(name: str, trials, top: int):
    """The trials best first; a compile column only when a trial compiled, an error column
    only when one has an error text."""
    from rich.table import Table

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
        cells = [_candidate_name(row), state, _fmt(None if seed is None else int(seed)),
                 _fmt(loss), "-" if tokens is None else human(tokens)]
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


def _running_table(name: str, running):
    """Trials training now (`shapesweep.results.live`): latest loss, tokens of the budget, ETA."""
    from rich.table import Table

    table = Table(title=f"running now in {name} (latest evaluation)")
    for column in ("candidate", "seed", "val_loss", "tokens", "elapsed", "ETA"):
        table.add_column(column, overflow="fold", justify="left" if column == "candidate" else "right")
    for row in running.sort_values("trial_id").to_dict("records"):
        tokens, budget, elapsed = (_clean(row.get(c)) for c in ("tokens", "train_tokens_budget", "wall_time_s"))
        done = "-" if tokens is None else human(tokens) + (f" of {human(budget)}" if budget else "")
        eta = (budget - tokens) * elapsed / tokens if tokens and budget and elapsed else None
        table.add_row(_candidate_name(row), _fmt(_clean(row.get("seed"))), _fmt(_clean(row.get("val_loss"))),
                      done, duration(elapsed), duration(eta))
    return table


def status(args: argparse.Namespace) -> int:

    from rich.text import Text

    from shapesweep.results.live import live_sweeps, load_live
    from shapesweep.results.store import (
        FragmentCache,
        list_sweeps,
        load_curves,
        load_trials,
        unknown_sweep,
    )
    from shapesweep.results.summary import adjustment_line, exploratory_line, seeds_line

    _check_status_args(args)
    console = terminal_console(markup=False)  # names and errors from the store: shown as written
    catalog = read_catalog(args)
    records = {r.name: r for r in catalog.list()} if catalog else {}
    if args.name is None:
        names = list(dict.fromkeys([*records, *list_sweeps(args.root), *live_sweeps(args.root)]))
        trials = load_trials(args.root, names) if names else None
        sweeps = _sweep_records(records, names, trials, load_live(args.root)[0])
        if args.format == "json":
            print(json.dumps(sweeps, indent=2))
        elif args.format == "csv":
            write_csv(sweeps, sys.stdout)
        else:
            console.print(_sweeps_table(args, sweeps))
        return 0

    record = records.get(args.name)
    cache = FragmentCache()  # each fragment read once: the curves need the trials again
    trials = load_trials(args.root, [args.name], cache=cache)
    running = load_live(args.root, [args.name])[0]
    if record is None and trials.empty and running.empty:
        raise unknown_sweep(args.name, args.root, [*records, *live_sweeps(args.root)])
    if args.per == "tuned":
        return _per_tuned(args, trials, console)
    document = _status_document(args, trials, load_curves(args.root, [args.name], cache=cache), running)
    if args.format == "json":
        print(json.dumps(document, indent=2))
        return 0
    if args.format == "csv":
        _print_csv(document)
        return 0
    if record is not None:
        console.print(Text.assemble(
            (printable(record.name), "bold"),
            printable(f"  space {record.space_name} ({record.space_hash})  status {record.status}  "
                      f"{len(document['candidates'])} candidates, {record.n_candidates} trials")))
        # the catalog's n_candidates counts trials
    counts = trials["status"].value_counts().to_dict() if not trials.empty else {}
    counts |= {"running": len(running)} if len(running) else {}
    console.print("  ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(counts.items()))
                  or "no trials yet")
    for line in (_machines_line(document["machines"]), _oom_line(trials)):
        if line:
            console.print(line, soft_wrap=True, highlight=False, markup=False)
    if document["candidates"]:
        console.print(_candidates_table(document, narrow=console.width < 100))
        # wrapped at the terminal's width (status fits 80 columns), between words
        hint = ([f"each candidate at every tuned value: status {args.name} --per tuned"]
                if any(c["tuned"] for c in document["candidates"]) else [])
        for line in [seeds_line(document), *hint, *(f"warning: {w}" for w in document["warnings"])]:
            console.print(line, highlight=False, markup=False)
        reasons = _no_verdict_lines(document)
        if reasons:
            console.print("no verdict:", *reasons, sep="\n", highlight=False, markup=False)
        short = [f"  {c['variant'] or c['key']} ({c['key']}): {c['missing']}"
                 + (f"; run: {c['to_run_missing']}" if c["to_run_missing"] else "")
                 for c in document["candidates"] if c["missing"]]
        if short:
            console.print("missing seeds:", *short, sep="\n", highlight=False, markup=False)
        for line in (adjustment_line(document), exploratory_line(document)):
            if line:
                console.print(line, highlight=False, markup=False)  # wrapped at the width, between words
        if _eval_noise_line(document):
            console.print(_eval_noise_line(document), soft_wrap=True)
        console.print(_fidelity_line(document), soft_wrap=True)
        if "rank_fidelity_cooled" in document:
            console.print(_fidelity_line(document, "rank_fidelity_cooled"), soft_wrap=True)
        for line in _stopped_lines(document):
            console.print(line, soft_wrap=True)
        if _asha_line(document) and "asha_stopped" not in document:  # Ray's per-trial ASHA
            console.print(_asha_line(document), soft_wrap=True)
    if len(running):
        console.print(_running_table(args.name, running))
    if not trials.empty:
        console.print(_trials_table(args.name, trials, len(trials) if args.all else args.top))
    return 0
