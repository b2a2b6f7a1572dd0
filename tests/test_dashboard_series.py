"""The report's series say what they are: an iso-budget line per family and k (never one line
through k 2 and k 3), a rank-fidelity panel without a resolved pair that says so, a
learning-curve legend grouped by candidate, and the per-tuned-value table."""

from __future__ import annotations

import json

import pandas as pd
from synthetic import synthetic_sweep
from test_live import _iso_budget_frame
from test_status_complete import LRS, TUNED_SPACE, Sweep, _flipping_sweep

from shapesweep.dashboards.figures import (
    learning_curves_figure,
    rank_fidelity_figure,
    searched_figure,
)
from shapesweep.dashboards.frames import with_derived
from shapesweep.dashboards.report import build_payload


def test_an_iso_budget_line_joins_one_k_only():
    trials = _iso_budget_frame([100_000, 100_400, 99_700, 100_200, 99_900, 100_100],
                               [10.0, 20.0, 40.0, 80.0, 160.0, 30.0])
    trials = with_derived(trials.drop(columns="design").assign(family="hourglass", k=[2, 2, 2, 3, 3, 3]))
    fig = searched_figure(trials)
    lines = {t["name"]: sorted(t["x"]) for t in fig.data}
    assert lines == {"hourglass k=2": [10.0, 20.0, 40.0], "hourglass k=3": [30.0, 80.0, 160.0]}
    assert len({t["line"]["color"] for t in fig.data}) == 2
    one_k = with_derived(trials.drop(columns="design").assign(k=2))
    (line,) = searched_figure(one_k).data  # one k: one series, named by its design alone
    assert line["name"] == "hourglass" and len(line["x"]) == 6


def _curves(pairs) -> pd.DataFrame:
    return pd.DataFrame([{**p, "sweep": r["sweep"], "trial_id": r["trial_id"]} for r, c in pairs for p in c])


def test_rank_fidelity_without_a_resolved_pair_says_so():
    """Three candidates whose seeds overlap: no final difference is resolved."""
    pairs = synthetic_sweep("flat", 9, families=("conventional",), seeds=3, seed=4, tune=None, budgets=(30e6,))
    rows = []
    for i, (row, _) in enumerate(pairs):
        rows.append({**row, "status": "completed", "val_loss": 3.0 + (0.1 if i % 2 else -0.1) * (row["seed"] - 1)})
    trials = with_derived(pd.DataFrame(rows))
    fig = rank_fidelity_figure(trials, _curves(pairs))
    assert fig is not None
    names = [t["name"] for t in fig.data]
    assert names and all("no resolved pair" in n and "never stays" not in n for n in names)
    assert any("no resolved pair" in a["text"] for a in fig.layout["annotations"])


def test_learning_curve_legend_groups_by_candidate():
    pairs = synthetic_sweep("s", 18, families=("conventional", "hourglass"), seeds=3, seed=1,
                            tune={"lr": (2e-3, 6e-3)}, budgets=(30e6,))
    trials = with_derived(pd.DataFrame([r for r, _ in pairs])).assign(row_id=range(len(pairs)))
    fig = learning_curves_figure(trials, _curves(pairs))
    groups: dict[str, set] = {}
    counted = 0
    for trace in fig.data:
        groups.setdefault(trace["legendgroup"], set()).add(
            (trace.get("legendgrouptitle") or {}).get("text"))
        if trace.get("showlegend") is not False:
            counted += int(trace["name"].split("· ")[1].split()[0])
    keys = trials.groupby(["sweep", "key"]).ngroups
    assert len(groups) == keys  # one legend group per candidate
    curves = _curves(pairs)
    assert counted == curves.loc[curves["val_loss"].notna(), "trial_id"].nunique()  # every curve, once
    titled = {g for g, titles in groups.items() if titles - {None}}
    tuned = trials.groupby("key")["tuned_json"].nunique()
    assert len(titled) == int((tuned > 1).sum())  # a group title where a candidate ran several values
    for trace in fig.data:
        if trace.get("legendgrouptitle"):
            assert trace["name"].startswith("lr=")


def test_the_report_draws_the_per_tuned_table(tmp_path):
    root = str(tmp_path / "sweeps")
    _flipping_sweep(root, TUNED_SPACE)
    (table,) = json.loads(build_payload(root, ["s"]))["comparisons"]
    per = table["per_tuned"]
    assert len(per["rows"]) == 4 and per["more"] == 0
    low = next(r for r in per["rows"] if r[0] == "hourglass" and r[2].startswith(f"lr={LRS[0]}"))
    assert low[2].endswith("*") and low[4].endswith("better") and low[5].endswith("worse")


def test_an_untuned_sweep_has_no_per_tuned_table(tmp_path):
    root = str(tmp_path / "sweeps")
    sweep = Sweep(root)
    for seed in (0, 1):
        sweep.land("baseline", seed, 2.3 + 0.01 * seed)
        sweep.land("deep", seed, 2.4 + 0.01 * seed)
    (table,) = json.loads(build_payload(root, ["s"]))["comparisons"]
    assert "per_tuned" not in table
    # the planned candidates not run are listed too, pending
    assert sum("its trials have not run" in row[-1] for row in table["rows"]) == 2
