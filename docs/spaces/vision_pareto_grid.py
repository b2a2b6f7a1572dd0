"""hourglass-mlp's Pareto claim on CPU in two sweeps, so that no choice is made on a measuring seed.

1. `vision-pareto-grid-tune.yaml` trains every configuration at every learning rate on seed
   100. `choose` takes each configuration's best lr (highest PSNR) there, keeps each design's
   Pareto front of that seed (PSNR vs trainable parameters), and writes
   `vision-pareto-grid-measure.yaml`: one variant per front configuration, at its own lr,
   on seeds 0, 1, 2.
2. `compare` reads the measuring sweep. At each parameter budget B, each design's entry is
   its front configuration of at most B parameters that was best on seed 100 (chosen before
   measuring); the difference hourglass - conventional in PSNR is paired by seed, with its
   95% Student-t interval and its p-value Holm-adjusted over the budgets (one family, as
   `status` adjusts a sweep's comparisons); the verdict is the adjusted one.

    PYTHONPATH=. .venv/bin/python docs/spaces/vision_pareto_grid.py choose --root ROOT
    shapesweep run docs/spaces/vision-pareto-grid-measure.yaml --root ROOT --scheduler fifo
    PYTHONPATH=. .venv/bin/python docs/spaces/vision_pareto_grid.py compare --root ROOT
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from shapesweep.results.multiplicity import adjusted_p, paired_p
from shapesweep.results.store import load_trials

HERE = Path(__file__).parent
TUNE, MEASURE = "vision-pareto-grid-tune", "vision-pareto-grid-measure"
SHAPE = ["d_z", "d_h", "n_layers"]
BUDGETS = [25_000, 50_000, 100_000, 200_000, 400_000, 600_000]
GRID_EDGES = (1.0e-4, 2.0e-2)  # the tuned grid's ends: an optimum there is not bracketed


def _design(frame: pd.DataFrame) -> pd.Series:
    return np.where(frame["d_h"] < frame["d_z"], "hourglass", "conventional")


def _front(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows no other row beats on both trainable parameters (fewer) and PSNR (higher)."""
    ordered = frame.sort_values(["params_total", "psnr"], ascending=[True, False])
    best, keep = -math.inf, []
    for index, row in ordered.iterrows():
        if row["psnr"] > best:
            keep.append(index)
            best = row["psnr"]
    return frame.loc[keep].sort_values("params_total")


def chosen(root: str) -> pd.DataFrame:
    """Each configuration at its best lr on seed 100, with `design`, `edge` and `on_front`."""
    trials = load_trials(root, [TUNE])
    trials = trials[trials["status"] == "completed"].assign(design=_design)
    best = trials.loc[trials.groupby(SHAPE)["psnr"].idxmax()].copy()
    best["edge"] = best["lr"].isin(GRID_EDGES)
    fronts = pd.concat([_front(group) for _, group in best.groupby("design")])
    best["on_front"] = best.index.isin(fronts.index)
    return best.sort_values(["design", "params_total"])


def choose(root: str) -> None:
    best = chosen(root)
    lrs = load_trials(root, [TUNE]).pivot_table(index=SHAPE, columns="lr", values="psnr")
    print(lrs.round(2).to_string())
    print(best[["design", *SHAPE, "params_total", "lr", "psnr", "edge", "on_front"]].to_string(index=False))
    tune = yaml.safe_load((HERE / f"{TUNE}.yaml").read_text())
    front = best[best["on_front"]]
    variants = [{"name": f"{row.design}-{row.d_z}-{row.d_h}-{row.n_layers}",
                 "fixed": {"d_z": int(row.d_z), "d_h": int(row.d_h), "n_layers": int(row.n_layers)},
                 "train": {"lr": float(row.lr)}} for row in front.itertuples()]
    space = {
        "name": MEASURE,
        "description": ("hourglass-mlp's Pareto claim on CPU, step 2 of 2: each design's Pareto "
                        "front on seed 100 (vision-pareto-grid-tune), each configuration at the lr chosen "
                        "there, measured on seeds 0, 1, 2. A Pareto sweep over sizes, not iso-budget."),
        "family": "vision_mlp", "budget": tune["budget"], "fixed": tune["fixed"],
        "variants": variants, "train": tune["train"], "seeds": [0, 1, 2],
    }
    path = HERE / f"{MEASURE}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False, width=100))
    print(f"wrote {path}: {len(variants)} configurations x 3 seeds")


def _paired(a: pd.Series, b: pd.Series) -> tuple[float, float, float, int]:
    diff = (a - b).dropna()
    n = len(diff)
    half = stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / math.sqrt(n) if n > 1 else math.nan
    return float(diff.mean()), float(diff.mean() - half), float(diff.mean() + half), n


def compare(root: str) -> None:
    best = chosen(root)
    front = best[best["on_front"]]
    measured = load_trials(root, [MEASURE])
    measured = measured[measured["status"] == "completed"].assign(design=_design)
    by_seed = measured.set_index([*SHAPE, "seed"])["psnr"]
    summary = measured.groupby(["design", *SHAPE]).agg(
        params=("params_total", "first"), lr=("lr", "first"), mean=("psnr", "mean"),
        std=("psnr", "std"), n=("psnr", "size")).reset_index().sort_values(["design", "params"])
    print("fronts (PSNR dB on held-out digits, seeds 0-2):")
    print(summary.round(3).to_string(index=False))
    rows = []
    for budget in BUDGETS:
        picks = {}
        for design, group in front.groupby("design"):
            affordable = group[group["params_total"] <= budget]
            if len(affordable):
                picks[design] = affordable.loc[affordable["psnr"].idxmax()]
        if len(picks) < 2:
            continue
        h, c = picks["hourglass"], picks["conventional"]
        if rows and rows[-1]["picks"] == (h.name, c.name):
            continue  # a larger budget that buys neither design anything more
        series = [by_seed.xs(tuple(int(p[d]) for d in SHAPE), level=SHAPE) for p in (h, c)]
        delta, low, high, n = _paired(*series)
        rows.append({"budget": budget, "picks": (h.name, c.name),
                     "hourglass": f"{h.d_z}/{h.d_h}/{h.n_layers} ({int(h.params_total):,})",
                     "conventional": f"{c.d_z}/{c.d_h}/{c.n_layers} ({int(c.params_total):,})",
                     "hourglass_psnr": float(series[0].mean()), "conventional_psnr": float(series[1].mean()),
                     "delta": delta, "ci_low": low, "ci_high": high, "n": n,
                     "sd": float((series[0] - series[1]).dropna().std(ddof=1))})
    # the budgets are one family: Holm-adjusted, as `status` adjusts a sweep's comparisons
    p = paired_p([r["n"] for r in rows], [r["delta"] for r in rows], [r["sd"] for r in rows])
    for row, raw, adjusted in zip(rows, p, adjusted_p(p, "holm"), strict=True):
        row.update(p=float(raw), p_holm=float(adjusted),
                   verdict="within noise" if not adjusted <= 0.05 else
                   "hourglass better" if row["delta"] > 0 else "conventional better")
        del row["picks"], row["sd"]
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    print(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["choose", "compare"])
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    (choose if args.step == "choose" else compare)(args.root)


if __name__ == "__main__":
    main()
