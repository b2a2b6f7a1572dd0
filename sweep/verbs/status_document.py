"""What `status` shows, gathered: one sweep's JSON document (its candidates, verdicts, rank
fidelity, ASHA's record, machines) and the sweeps list's records, from the results store and
the catalog. `status_view` renders them; nothing here prints."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

import pandas as pd

from shapesweep.common import UserError
from shapesweep.common import plain as _clean
from shapesweep.results.interface import ResultsStore
from shapesweep.results.multiplicity import DEFAULT_ADJUST
from shapesweep.results.planned import complete_comparisons, planned_candidates
from shapesweep.results.roles import with_seed_roles
from shapesweep.results.rows import MACHINE_FIELDS
from shapesweep.results.stats import (
    asha_confirmation,
    cooled_column,
    cooled_rank_fidelity,
    rank_fidelity,
    stable_fraction,
)
from shapesweep.sweep.cli.verb_table import StatusArgs
from shapesweep.sweep.driver.sweep_files import DECISIONS_FILE, OPTIONS_FILE

if TYPE_CHECKING:
    from shapesweep.results.catalog import SweepRecord  # SQLAlchemy: only where a catalog is

TRIAL_STATES = ("completed", "stopped_early", "failed")  # what a trial the store holds ended as


def _reduction_factor(store: ResultsStore, name: str) -> float | None:
    """ASHA's reduction factor from the options file `run` writes (`sweep_files.OPTIONS_FILE`);
    None when the sweep ran without ASHA."""
    path = store.file_location(name, OPTIONS_FILE)
    repair = store.file_repair(name, OPTIONS_FILE)
    try:
        text = store.read_file(name, OPTIONS_FILE)
        options = json.loads(text) if text else {}
        if not isinstance(options, dict):
            raise ValueError("not a JSON object")
        if options.get("scheduler") != "asha":
            return None
        factor = float(options["reduction_factor"])
    except (OSError, ValueError, TypeError, KeyError) as error:  # garbled, truncated, unreadable
        problem = f"no {error}" if isinstance(error, KeyError) else str(error)
        raise UserError(f"not a sweep options file ({problem}); {repair}",
                        file=path) from None
    if not factor > 1:
        raise UserError(f"not a sweep options file (reduction_factor {factor}); "
                        f"{repair}", file=path)
    return factor


def sweep_name(args: StatusArgs) -> str:
    """The one sweep `status NAME` shows (its views run only when NAME is given)."""
    assert args.name is not None, "one sweep's view needs its NAME"
    return args.name


def status_document(args: StatusArgs, store: ResultsStore, trials: pd.DataFrame,
                    curves: pd.DataFrame, running: pd.DataFrame | None = None) -> dict:
    """The one object `status NAME --format json` prints: every candidate the sweep plans,
    those no trial of which has landed `pending` (`shapesweep.results.planned`)."""
    name = sweep_name(args)

    planned = planned_candidates(args.root, name)
    variants = set(trials["variant"].dropna()) | (set(planned["variant"].dropna()) if len(planned) else set())
    baseline = args.baseline or "baseline"
    if args.baseline is not None and baseline not in variants:
        known = ", ".join(sorted(variants)) or "none recorded"
        raise UserError(f"sweep {name!r} has no variant {baseline!r} (its variants: {known})",
                        key="--baseline")
    trials = with_seed_roles(trials, args.root)
    check_family(args, trials, baseline)
    document = complete_comparisons(trials, name, args.root, args.metric, baseline, planned, running,
                                    adjust=_adjust(args))
    fidelity = rank_fidelity(trials, curves, args.metric)
    factor = _reduction_factor(store, name)
    return {
        **document,
        **_with_cooldowns(args, store, trials, curves),
        "rank_fidelity": _fidelity_points(fidelity),
        "rank_fidelity_stable_fraction": stable_fraction(fidelity) if len(fidelity) else None,
        "asha": asha_confirmation(trials, factor, args.metric) if factor else None,
        "machines": _machines(trials),
    }


def _machines(trials: pd.DataFrame) -> list[dict]:
    """The machines the trials ran on (`shapesweep.trainers.machine`), most trials first: a
    sweep spanning machines compares losses that differ by float order, not by shape alone.
    Rows written before the columns existed count as one machine of nulls, last of its count."""
    def clean(name: str, value: object) -> object:
        return None if pd.isna(value) else int(cast(float, value)) if name == "torch_threads" else str(value)

    rows = trials.reindex(columns=list(MACHINE_FIELDS)).itertuples(index=False, name=None)
    counts = Counter(tuple(clean(n, v) for n, v in zip(MACHINE_FIELDS, row, strict=True)) for row in rows)
    order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0] is None, [str(v) for v in kv[0]]))
    return [{**dict(zip(MACHINE_FIELDS, key, strict=True)), "trials": n} for key, n in order]


def _adjust(args: StatusArgs) -> str:
    return args.adjust or DEFAULT_ADJUST


def check_family(args: StatusArgs, trials: pd.DataFrame, baseline: str) -> None:
    """An adjustment asked for (`--adjust holm|bh`) over a family of one candidate besides
    the baseline has nothing to adjust: refused, so that no one reads a one-comparison
    verdict as family-wise controlled. The default (no flag) adjusts whatever the family is."""
    if args.adjust in (None, "none") or not (trials["variant"] == baseline).any():
        return
    others = trials.loc[trials["variant"] != baseline, "key"].nunique()
    if others < 2:
        raise UserError(f"sweep {args.name!r} compares {others} candidate{'' if others == 1 else 's'} with its "
                        f"baseline: a family of {others} has nothing to adjust (leave out --adjust, or "
                        "--adjust none)", key="--adjust")


def _fidelity_points(fidelity: pd.DataFrame) -> list[dict]:
    return [{"tokens": int(r.tokens), "budget_fraction": float(r.budget_fraction),
             "n_candidates": int(r.n_candidates), "kendall_tau": _clean(r.kendall_tau),
             "resolved_pairs": int(r.resolved_pairs),
             "swapped_resolved_pairs": int(r.swapped_resolved_pairs),
             "unresolved_pairs": int(r.unresolved_pairs)}
            for r in fidelity.itertuples()]


def _with_cooldowns(args: StatusArgs, store: ResultsStore, trials: pd.DataFrame,
                    curves: pd.DataFrame) -> dict:
    """The cooled evaluations' rank fidelity (when the curves have them for the metric) and
    the noise-aware ASHA's stop decisions (when it ran): `status`'s cooldown part."""
    name = sweep_name(args)

    out: dict[str, object] = {}
    column = cooled_column(args.metric)
    if column in curves and curves[column].notna().any():
        cooled = cooled_rank_fidelity(trials, curves, args.metric)
        out["rank_fidelity_cooled"] = _fidelity_points(cooled)
        out["rank_fidelity_cooled_stable_fraction"] = stable_fraction(cooled) if len(cooled) else None
    decisions = store.read_json(name, DECISIONS_FILE, list, _decisions_problem)
    if isinstance(decisions, list) and decisions:
        out["asha_stopped"] = [d for d in decisions if d["stop"]]
    return out


_DECISION_KEYS = ("key", "tuned_json", "rung_tokens", "losses", "stop", "cut_key", "cut_tuned_json",
                  "delta", "ci_low", "ci_high")  # what `stopped_lines` reads of each


def _decisions_problem(decisions: object) -> str | None:
    """Why `asha.json` is not a list of the decisions `stopped_lines` prints, or None."""
    for number, d in enumerate(decisions if isinstance(decisions, list) else []):
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


def sweep_records(records: Mapping[str, SweepRecord], names: list[str], trials: pd.DataFrame | None,
                  running: pd.DataFrame, driven: Callable[[str], bool]) -> list[dict]:
    """One record per sweep: what `status` lists, as `status --format json` prints it.

    `driven(name)`: whether a driver holds the sweep's live lease. Only then is the sweep
    `running` and are its live curves running trials (a killed driver leaves both behind);
    `finished` stands only where the store holds every trial the catalog planned (a resume
    that died before its trials ran leaves the catalog's `finished` of an earlier run)."""
    out = []
    for name in names:
        record = records.get(name)
        rows = trials[trials["sweep"] == name] if trials is not None else None
        counts = rows["status"].value_counts() if rows is not None else pd.Series(dtype=int)
        held = {state: int(counts.get(state, 0)) for state in TRIAL_STATES}
        best = rows["val_loss"][rows["status"] == "completed"].min() if rows is not None else None
        live = driven(name)
        out.append({
            "name": name, "space": record.space_name if record else None,
            "space_hash": record.space_hash if record else None,
            "status": reported_status(record, live, sum(held.values())),
            "trials": record.n_candidates if record else None,  # the catalog counts trials
            **held,
            "running": int((running["sweep"] == name).sum()) if live else 0,
            "best_val_loss": _clean(best),
        })
    return out


def reported_status(record: SweepRecord | None, driven: bool, held: int) -> str | None:
    """The sweep's state from its lease and the trials the store holds, the catalog's status
    read as a claim: `running` while a driver holds a live lease (and only then), `finished`
    only with every planned trial held; a claim the store does not bear out is `interrupted`
    (`resume` runs what is missing)."""
    if driven:
        return "running"
    if record is None:
        return None
    if record.status == "running" or (record.status == "finished" and held < record.n_candidates):
        return "interrupted"
    return record.status
