"""`status NAME --per tuned` and the report's per-tuned-value table: each candidate at every
tuned value it ran (`shapesweep.results.stats.per_tuned`), as plain records and the texts
both print."""

from __future__ import annotations

import json

from shapesweep.common import plain as _clean
from shapesweep.families import base as families
from shapesweep.results.stats import PER_TUNED_SIDES, per_tuned
from shapesweep.results.summary import seed_document


def per_tuned_document(trials, name: str, root: str, metric: str, baseline: str) -> dict:
    """`status NAME --per tuned --format json`: the sweep's seeds and one record per
    (candidate, tuned value) of `shapesweep.results.stats.per_tuned` (`trials` with their seed
    roles)."""
    rows = per_tuned(trials, metric, baseline)
    firsts = trials.drop_duplicates("key").set_index("key")
    fields = [f"{c}_{side}" for side in PER_TUNED_SIDES for c in ("delta", "ci_low", "ci_high", "n", "verdict")]
    records = []
    for row in rows.to_dict("records"):
        shape = {k: _clean(firsts.at[row["key"], k]) for k in (
            "family", "d_model", "n_layers", *families.label_fields()) if k in firsts}
        records.append({
            "key": row["key"], "variant": row["variant"], **shape, "tuned": json.loads(row["tuned"]),
            "chosen": bool(row["chosen"]), "state": row["state"], "n_seeds": int(row["n"]),
            "seeds": row["seeds"], f"{metric}_mean": _clean(row["mean"]), f"{metric}_std": _clean(row["std"]),
            f"choice_{metric}_mean": _clean(row["choice_mean"]), "choice_n": int(row["choice_n"]),
            "baseline_key": _clean(row["baseline_key"]),
            "baseline_tuned": json.loads(row["baseline_tuned"]) if isinstance(row["baseline_tuned"], str) else None,
            **{f: (None if _clean(row[f]) is None else int(row[f]) if f.startswith("n_") else _clean(row[f]))
               for f in fields}})
    return {"sweep": name, "metric": metric, "per": "tuned",
            "baseline": baseline if (trials["variant"] == baseline).any() else None,
            **seed_document(root, name, trials), "rows": records}


def per_tuned_mean_text(row: dict, metric: str) -> str:
    """mean ± std (n), or why a tuned value has none (the choice seeds' mean apart)."""
    if row[f"{metric}_mean"] is not None:
        if row[f"{metric}_std"] is None:  # one seed: no spread to show
            return f"{row[f'{metric}_mean']:.4f} ({row['n_seeds']} seed)"
        return f"{row[f'{metric}_mean']:.4f} ± {row[f'{metric}_std']:.4f} ({row['n_seeds']})"
    if row["state"] == "choice only" and row[f"choice_{metric}_mean"] is not None:
        return f"choice seeds only ({row[f'choice_{metric}_mean']:.4f}, {row['choice_n']} seeds: in no mean)"
    return row["state"]


def per_tuned_delta_text(row: dict, side: str) -> str:
    """`+0.0123 [+0.0040, +0.0206] worse`, or `-` where there is no difference to make."""
    delta = row[f"delta_{side}"]
    if delta is None:
        return "-"
    if row[f"ci_low_{side}"] is None:
        return f"{delta:+.4f} (n<2)"
    return f"{delta:+.4f} [{row[f'ci_low_{side}']:+.4f}, {row[f'ci_high_{side}']:+.4f}] {row[f'verdict_{side}']}"
