"""One sweep's comparisons as plain records: what `status` prints (table, JSON, CSV) and the
report's comparison tables show, from `shapesweep.results.stats.compare`.

A record is a candidate (shape, chosen tuned value, mean, std and seeds, the paired
difference to its baseline with its interval and verdict, the seeds an unresolved one
needs, and where it has no verdict, why and what to run); a sweep's document adds which
seeds chose the tuned values and which measured them, and the warnings every reader of the
comparisons needs (selection bias, an optimum at a grid's edge, a close choice).
"""

from __future__ import annotations

import json

from shapesweep.common import human, plain
from shapesweep.results.adaptive import (
    LOOKS_FILE,
    design_record,
    outcome_line,
    outcomes,
    read_looks_at,
)
from shapesweep.results.explain import missing_seeds, why_no_verdict
from shapesweep.results.layout import read_sweep_file, sweep_dir, sweep_file_repair
from shapesweep.results.multiplicity import ALPHA, DEFAULT_ADJUST, INTERVALS
from shapesweep.results.roles import seed_roles
from shapesweep.results.schema import SHAPE_COLUMNS, TRIAL_COLUMNS
from shapesweep.results.stats import (
    CHOICE_METRIC,
    canonical_tuned_column,
    compare,
    exploratory_pairs,
)

RESULT_FIELDS = ("state", "seeds", "missing_seeds", "failed_seeds", "stopped_tokens", "error",
                 "tuned_edge", "choice_margin", "close_choice", "delta_vs_baseline", "ci_low", "ci_high",
                 "n_paired", "verdict", "baseline_key", "seeds_for_80pct_power", "no_verdict", "eval_se",
                 "eval_noise", "budget_error", "p_value", "p_adjusted", "ci_low_adjusted", "ci_high_adjusted",
                 "verdict_raw")
SELECTION_BIAS = ("its tuned values were chosen on the seeds that measure them: the best of several "
                  "noisy means is optimistic, so its comparisons carry selection bias (name "
                  "tune.choice_seeds in the space to choose on other seeds)")
NO_VERDICT_WORDS = {"stopped": "stopped", "failed": "failed", "choosing": "choosing",
                    "pending": "not run", "n<2": "n<2", "no baseline": "no baseline",
                    "baseline": "baseline has no result"}


def candidate_records(compared, metric: str, sweep: str, root: str) -> list[dict]:
    """`compare`'s rows as records: shape, chosen tuned values, seed statistics, the baseline
    comparison, and where a candidate has no verdict, why (`why`) and what to run (`to_run`);
    where its result lacks measure seeds, which (`missing`) and what to run (`to_run_missing`)."""
    import pyarrow as pa

    fields = ["key", "family", "variant", *(name for name, _ in SHAPE_COLUMNS),
              "params_non_embedding", "params_total", "params_active", "flops_per_token"]
    whole = {name for name in fields if pa.types.is_integer(TRIAL_COLUMNS.field(name).type)}
    rows = compared.to_dict("records")
    by_key = {row["key"]: row for row in rows}
    records = []
    for row in rows:
        record = {name: plain(row.get(name)) for name in fields if name != "widths"}
        record.update({name: int(record[name]) for name in whole if record[name] is not None})
        widths = row.get("widths")
        record["widths"] = None if widths is None else [int(w) for w in widths]
        record.update({"tuned": json.loads(row["tuned"]) if isinstance(row["tuned"], str) else None,
                       "n_seeds": int(row["n"]),
                       f"{metric}_mean": plain(row["mean"]), f"{metric}_std": plain(row["std"]),
                       f"choice_{CHOICE_METRIC}_mean": plain(row["choice_mean"])})
        record.update({name: plain(row.get(name)) for name in RESULT_FIELDS})
        explained = why_no_verdict(row, sweep, root, by_key.get(row["baseline_key"]))
        record["why"], record["to_run"] = explained or (None, None)
        record["missing"], record["to_run_missing"] = missing_seeds(row, sweep, root) or (None, None)
        records.append(record)
    return records


def seed_document(root: str, name: str, trials) -> dict:
    """Which seeds chose the tuned values and which measured them (the sweep folder's word,
    else the trials'), and whether the same seeds did both for a tuned space."""
    roles = seed_roles(root, name)
    choice = list(roles.choice)
    seeds = sorted({int(s) for s in trials["seed"].dropna()} - set(choice))
    tuned = len(trials) > 0 and canonical_tuned_column(trials["tuned_json"]).nunique() > 1
    return {"choice_seeds": choice, "measure_seeds": list(roles.measure) or seeds,
            "selection_bias": bool((roles.tuned or tuned) and not choice),
            "lr_base_d_model": roles.lr_base_d_model}


def warnings(document: dict) -> list[str]:
    """Lines every reader of the comparisons should see."""
    lines = [SELECTION_BIAS] if document["selection_bias"] else []
    edge = [c for c in document["candidates"] if c["tuned_edge"]]
    if edge:
        names = sorted({n for c in edge for n in c["tuned_edge"]})
        lines.append(f"optimum at the grid's edge: extend the grid ({', '.join(names)} of "
                     f"{len(edge)} candidate{'s' if len(edge) > 1 else ''})")
    close = [c for c in document["candidates"] if c["close_choice"]]
    if close:
        listed = ", ".join(c["variant"] or c["key"] for c in close)
        lines.append(f"close choice ({listed}): on the choice seeds the chosen value led the next by less "
                     "than their mean's seed noise, so other seeds may choose otherwise (add a seed to "
                     "tune.choice_seeds to settle it)")
    return lines


def comparisons(trials, name: str, root: str, metric: str = "val_loss", baseline: str = "baseline",
                compared=None, adjust: str | None = None) -> dict:
    """One sweep's document: its seeds, candidate records, warnings, the primary family's
    adjustment and the exploratory all-pairs family (`trials` with their seed roles,
    `shapesweep.results.roles.with_seed_roles`; `compared`: their `compare`, when already
    made, at `adjust`; default: the one `compared` was made with, else Holm)."""
    if adjust is None:
        made = compared["adjust"].dropna() if compared is not None and "adjust" in compared else None
        adjust = made.iloc[0] if made is not None and len(made) else DEFAULT_ADJUST
    compared = compare(trials, metric, baseline, adjust) if compared is None else compared
    document = {"sweep": name, "metric": metric,
                "baseline": baseline if (trials["variant"] == baseline).any() else None,
                **seed_document(root, name, trials),
                "candidates": candidate_records(compared, metric, name, root)}
    if document["lr_base_d_model"]:  # the lr each trained: its chosen value's first row has it
        for candidate, lr in zip(document["candidates"], compared["lr"], strict=True):
            candidate["trained_lr"] = plain(lr) if candidate["tuned"] is not None else None
    document["warnings"] = warnings(document)
    _with_outcomes(document, root, name)
    levels = compared["interval_confidence"].dropna() if "interval_confidence" in compared else None
    document["adjustment"] = adjustment(document, adjust, float(levels.iloc[0])
                                        if levels is not None and len(levels) else None)
    document["exploratory_pairs"] = exploratory_pairs(trials, compared, metric, adjust)
    return document


def _with_outcomes(document: dict, root: str, name: str) -> None:
    """An adaptive sweep's (shapesweep.results.adaptive): its `seed_design`, and per
    candidate its seeds used, the look that decided it and why it stopped."""
    looks = read_looks_at(lambda file: read_sweep_file(root, name, file), f"{sweep_dir(root, name)}/{LOOKS_FILE}",
                          sweep_file_repair(root, name, LOOKS_FILE)) if name else None
    if looks is None:
        return
    document["seed_design"] = design_record(looks)
    found = outcomes(looks)
    for candidate in document["candidates"]:
        outcome = found.get(candidate["key"])
        candidate.update(outcome.as_dict() if outcome else {"seeds_used": 0, "decided_look": None,
                                                            "stopped": None, "sequential_state": None,
                                                            "ci_low_sequential": None,
                                                            "ci_high_sequential": None})
        # missing: of the seeds the design gave it (a stopped candidate lacks none of the rest)
        have = set(candidate["seeds"] or [])
        candidate["missing_seeds"] = [s for s in range(candidate["seeds_used"]) if s not in have]
        candidate["missing"], candidate["to_run_missing"] = missing_seeds(candidate, name, root) or (None, None)


def adaptive_lines(document: dict) -> list[str]:
    """An adaptive sweep's seeds per candidate and why each stopped; [] for a fixed one."""
    design = document.get("seed_design")
    if not design:
        return []
    head = (f"adaptive seeds {design['min']}-{design['max']} after {design['looks']} look"
            f"{'s' * (design['looks'] != 1)} ({design['rule']}; futile: even {design['max']} seeds "
            f"would not resolve {design['min_effect']:g}); repeated 95% intervals, simultaneous over "
            "the family (Bonferroni: Holm's step-down may resolve one whose interval spans 0):")
    return [head, *(outcome_line(c["variant"] or c["key"], c) for c in document["candidates"]
                    if c.get("sequential_state") is not None)]


def adjustment(document: dict, adjust: str, level: float | None) -> dict:
    """The primary family (each candidate vs its baseline): its method, size, the confidence
    `level` of its adjusted intervals and how many verdicts it resolves, raw and adjusted."""
    family = [c for c in document["candidates"] if c["p_value"] is not None]
    return {"method": adjust, "family": "each candidate vs its baseline", "family_size": len(family),
            "alpha": ALPHA, "interval": INTERVALS[adjust], "interval_confidence": level if family else None,
            "resolved_raw": sum(c["verdict_raw"] in ("better", "worse") for c in family),
            "resolved_adjusted": sum(c["verdict"] in ("better", "worse") for c in family)}


def adjustment_line(document: dict) -> str | None:
    """One line saying how the verdicts were adjusted (None without comparisons)."""
    a = document["adjustment"]
    if not a["family_size"]:
        return None
    if a["method"] == "none":
        return (f"verdicts: each of the {a['family_size']} comparisons with the baseline at 95% on its own "
                f"(no adjustment; {a['resolved_raw']} resolved)")
    name = {"holm": "Holm (family-wise error 5%)", "bh": "Benjamini-Hochberg (false discovery rate 5%)"}
    return (f"verdicts: {name[a['method']]} over the {a['family_size']} comparisons with the baseline; "
            f"{a['resolved_adjusted']} of {a['resolved_raw']} resolved at raw 95% survive; adjusted "
            f"intervals at {a['interval_confidence']:.2%} ({a['interval'].split(',')[0]})")


def exploratory_line(document: dict) -> str | None:
    """The all-pairs family in one line: its size and the pairs resolved, raw and adjusted."""
    e = document["exploratory_pairs"]
    if e.get("skipped"):
        return f"exploratory, all {e['family_size']} pairs: not computed ({e['skipped']})"
    if e["family_size"] < 2:
        return None
    survive = [f"{p['better_variant'] or p['better']} ({p['better']}) beats {p['worse_variant'] or p['worse']} "
               f"({p['worse']}), adj. p {p['p_adjusted']:.2g}" for p in e["pairs"] if p["verdict"] == "better"]
    more = e["resolved_adjusted"] - len(survive[:SURVIVORS_NAMED])
    how = "unadjusted" if e["adjust"] == "none" else f"{e['adjust']} over all {e['family_size']}"
    return (f"exploratory, all {e['family_size']} pairs ({how}): {e['resolved_raw']} resolved at raw 95%, "
            f"{e['resolved_adjusted']} after adjustment" + (": " + "; ".join(survive[:SURVIVORS_NAMED]) if survive else "")
            + (f"; and {more} more (status NAME --format json lists them)" if more > 0 else ""))


SURVIVORS_NAMED = 5  # the exploratory line names the most resolved pairs, up to this many


def seeds_line(document: dict) -> str:
    measure = ", ".join(map(str, document["measure_seeds"])) or "-"
    base = document.get("lr_base_d_model")
    lr = (f"; lr values are at d_model {base} (a candidate of width d trains them x {base} / d)"
          if base else "")
    design = document.get("seed_design")
    if design:  # adaptive: every candidate on 0..min-1, more only while its comparison is open
        measure = f"adaptive {design['min']}-{design['max']} (seeds 0-{design['min'] - 1} each, then one a look while open)"
    if document["choice_seeds"]:
        return (f"seeds: {', '.join(map(str, document['choice_seeds']))} chose each candidate's tuned "
                f"value (never in a mean, interval or verdict); {measure} measured it{lr}")
    return f"seeds: {measure}{lr}"


def interval_text(candidate: dict) -> str:
    delta = candidate["delta_vs_baseline"]
    if delta is None:
        return "-"
    if candidate["ci_low"] is None:
        return f"{delta:+.4f} (n<2)"
    return f"{delta:+.4f} [{candidate['ci_low']:+.4f}, {candidate['ci_high']:+.4f}]"


def adjusted_text(candidate: dict) -> str:
    """`p 0.012 → 0.036 [-0.0712, -0.0031]`: the raw p-value, the family-adjusted one and the
    adjusted interval; `-` without a p-value."""
    if candidate.get("p_adjusted") is None:
        return "-"
    low, high = candidate["ci_low_adjusted"], candidate["ci_high_adjusted"]
    return f"p {candidate['p_value']:.2g} → {candidate['p_adjusted']:.2g} [{low:+.4f}, {high:+.4f}]"


def adjusted_header(document: dict) -> str:
    a = document["adjustment"]
    level = "" if a["interval_confidence"] is None else f" [{a['interval_confidence']:.1%} CI]"
    return f"p → {a['method']}-adjusted p{level}"


def mean_text(candidate: dict, metric: str, gap: str = " ") -> str:
    """mean ± std (n), or the state of a candidate without a result."""
    if candidate[f"{metric}_mean"] is None:
        tokens = candidate["stopped_tokens"]
        return {"stopped": f"stopped at {human(tokens)}" if tokens else "stopped",
                "pending": "not run"}.get(candidate["state"], candidate["state"])
    std = "-" if candidate[f"{metric}_std"] is None else f"{candidate[f'{metric}_std']:.4f}"
    return f"{candidate[f'{metric}_mean']:.4f}{gap}± {std} ({candidate['n_seeds']})"


def tuned_text(candidate: dict) -> str:
    """`lr=0.003 (edge)`: the chosen values, each at its grid's edge marked, and `(close)`
    after a choice the choice seeds' noise could have made otherwise (`close_choice`)."""
    if not candidate["tuned"]:
        return "-"
    trained = candidate.get("trained_lr")  # under lr_base_d_model: the lr at this width
    text = " ".join(f"{k}={v}" + (" (edge)" if k in candidate["tuned_edge"] else "")
                    + (f" (trains {trained:.3g})" if k == "lr" and trained is not None else "")
                    for k, v in candidate["tuned"].items())
    return text + (" (close)" if candidate["close_choice"] else "")


def verdict_text(candidate: dict) -> str:
    """The verdict, `(the baseline)`, or a word for why there is none."""
    if candidate["key"] == candidate["baseline_key"]:
        return "(the baseline)"
    return candidate["verdict"] or NO_VERDICT_WORDS.get(candidate["no_verdict"], "-")

