"""The lr-transfer fits: each shape's fitted optimum learning rate and its distance from the
base shape's, in sqrt(2) steps, with intervals that hold their level at 3 seeds.

Per seed, a quadratic in log2(lr) through the `WINDOW` grid points around that seed's lowest
loss (`fit_optimum`), and its distance from the base's optimum fitted on the same seed
(paired by seed). The estimate is the mean over the seeds; its interval a t-interval over the
per-seed values (`t_interval`: mean +- t(n-1) sd / sqrt(n)), which holds its stated coverage
at 3 seeds when the per-seed fits scatter normally (`tests/test_fit_intervals.py` shows it by
simulation). A seed bootstrap (`method="bootstrap"`) is used only where a shape has at least
`BOOTSTRAP_MIN_SEEDS` seeds: on 3 seeds it has 10 distinct resamples, and its "95%" interval
covers ~75-80% (issue 56). The verdict: `within one step` when the whole interval lies inside
(-1, +1) steps, `moves` when it lies outside [-1, +1], else `unresolved`; `incomplete` while a
shape lacks any of the base's lrs or seeds. `benchmarks/lr_transfer.py --fit` prints these
tables; the lr-transfer study's report (shapesweep.results.study_lr) is generated from them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from shapesweep.results.store import load_trials

WINDOW = 5  # grid points the quadratic is fitted through, centred on the lowest
# Fewest seeds a percentile seed bootstrap is used on (`--interval bootstrap`): with n seeds it
# has C(2n-1, n) distinct resamples (10 at n = 3) and its percentile interval of a mean covers
# about (1 - 2 (1/2)^n)-ish at small n, well below the level it is called by; from ~10 seeds
# it is within a few points of nominal.
BOOTSTRAP_MIN_SEEDS = 10


def completed(root: str, sweep: str) -> pd.DataFrame:
    """A sweep's completed trials, with their tuned `lr` as a column."""
    trials = load_trials(root, [sweep])
    done = trials[trials["status"] == "completed"].copy()
    done["lr"] = [json.loads(t)["lr"] for t in done["tuned_json"]]
    return done


def seed_losses(root: str, sweep: str) -> dict[str, pd.DataFrame]:
    """Per variant: lrs x seeds of the final val_loss of completed trials."""
    done = completed(root, sweep)
    return {variant: group.pivot_table(index="lr", columns="seed", values="val_loss", aggfunc="mean")
            for variant, group in done.groupby("variant")}


def fit_optimum(log_lr: np.ndarray, loss: np.ndarray) -> tuple[float, bool]:
    """The fitted optimum's log2(lr) and whether it is interior: a quadratic through the
    WINDOW grid points around the lowest loss (fewer at the grid's edge, at least 3). Where the
    fit has no minimum inside the window (curvature <= 0, or a vertex outside it), the lowest
    grid point, flagged as not interior."""
    order = np.argsort(log_lr)
    x, y = log_lr[order], loss[order]
    keep = ~np.isnan(y)
    x, y = x[keep], y[keep]
    best = int(np.argmin(y))
    low = max(0, min(best - WINDOW // 2, len(x) - WINDOW))
    xs, ys = x[low:low + WINDOW], y[low:low + WINDOW]
    if len(xs) >= 3:
        a, b, _ = np.polyfit(xs, ys, 2)
        if a > 0 and xs[0] <= -b / (2 * a) <= xs[-1]:
            return float(-b / (2 * a)), 0 < best < len(x) - 1
    return float(x[best]), False


def losses_and_base(stores: dict[str, tuple[str, str]], base: tuple[str, str]):
    """Per rule, each shape's lrs x seeds losses; and the base shape's."""
    losses = {rule: seed_losses(root, sweep) for rule, (root, sweep) in stores.items()}
    if base[0] not in losses or base[1] not in losses[base[0]]:
        raise SystemExit(f"no shape {base[1]!r} in store {base[0]!r}")
    return losses, losses[base[0]][base[1]]


def t_interval(values: np.ndarray, level: float) -> tuple[float, float, float]:
    """The mean of `values` (one per seed) and its t-interval at `level`: mean +- t(n-1) x
    sd / sqrt(n). Exact for normal values whatever n >= 2; NaN ends for n < 2."""
    n = len(values)
    mean = float(np.mean(values)) if n else np.nan
    if n < 2:
        return mean, np.nan, np.nan
    half = float(sps.t.ppf(0.5 + level / 2, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def _seed_optima(table: pd.DataFrame, seeds: list) -> np.ndarray:
    """Each seed's own fitted log2 optimum (`fit_optimum` on that seed's losses)."""
    log_lr = np.log2(table.index.to_numpy(float))
    return np.array([fit_optimum(log_lr, table[s].to_numpy(float))[0] for s in seeds])


def fit_interval(table: pd.DataFrame, reference: pd.DataFrame, seeds: list, level: float = 0.95,
                 method: str = "t", resamples: int = 2000,
                 rng: np.random.Generator | None = None) -> dict[str, float | str]:
    """One shape against the base on the seeds both have whole (lrs x seeds tables): the
    optimum (log2) and its distance in sqrt(2) steps, each with its interval at `level`.

    `t` (the default): the mean of the per-seed fits with its t-interval. `bootstrap`: the
    seed-mean curve's fit with a paired percentile seed bootstrap, used only with at least
    `BOOTSTRAP_MIN_SEEDS` seeds (else `t`); the row's `interval` says which was used."""
    n = len(seeds)
    if method == "bootstrap" and n >= BOOTSTRAP_MIN_SEEDS:
        rng = rng or np.random.default_rng(0)
        tails = [50 * (1 - level), 50 * (1 + level)]

        def opt(t: pd.DataFrame, cols) -> float:
            return fit_optimum(np.log2(t.index.to_numpy(float)), t[list(cols)].mean(axis=1).to_numpy(float))[0]

        draws = [rng.choice(seeds, size=n, replace=True) for _ in range(resamples)]
        boot = np.array([(opt(table, d), opt(reference, d)) for d in draws])
        own, ref = opt(table, seeds), opt(reference, seeds)
        o_low, o_high = np.percentile(boot[:, 0], tails)
        s_low, s_high = np.percentile(2 * (boot[:, 0] - boot[:, 1]), tails)
        return {"own": own, "own_low": o_low, "own_high": o_high, "steps": 2 * (own - ref),
                "steps_low": s_low, "steps_high": s_high, "interval": "bootstrap"}
    own_fits = _seed_optima(table, seeds)
    ref_fits = _seed_optima(reference, seeds)
    o, o_low, o_high = t_interval(own_fits, level)
    d, s_low, s_high = t_interval(2 * (own_fits - ref_fits), level)  # log2 units to sqrt(2) steps
    return {"own": o, "own_low": o_low, "own_high": o_high, "steps": d,
            "steps_low": s_low, "steps_high": s_high, "interval": f"t, {n - 1} df" if n >= 2 else "none"}


def verdict(low: float, high: float) -> str:
    """Within one sqrt(2) step, moves, or unresolved, by where the interval lies."""
    if pd.isna(low) or pd.isna(high):
        return "unresolved"
    if -1 < low and high < 1:
        return "within one step"
    return "moves" if low >= 1 or high <= -1 else "unresolved"


def fit_table(stores: dict[str, tuple[str, str]], base: tuple[str, str], resamples: int = 2000,
              seed: int = 0, level: float = 0.95, method: str = "t") -> pd.DataFrame:
    """Per (rule, shape): the fitted optimum and its distance from the base's optimum in
    sqrt(2) steps, paired by seed, each with its interval at `level` (`fit_interval`)."""
    losses, reference = losses_and_base(stores, base)
    rng = np.random.default_rng(seed)
    rows = []
    for rule, shapes in losses.items():
        for shape, table in shapes.items():
            seeds = sorted(set(table.columns) & set(reference.columns))
            full = [s for s in seeds if table[s].notna().all() and reference[s].notna().all()]
            _, interior = fit_optimum(np.log2(table.index.to_numpy(float)),
                                      table[full or list(table.columns)].mean(axis=1).to_numpy(float))
            fit: dict[str, Any] = fit_interval(table, reference, full, level, method, resamples, rng)
            lrs = int(table.notna().all(axis=1).sum())
            complete = lrs >= len(reference.index) and len(full) >= len(reference.columns)
            rows.append({"rule": rule, "shape": shape, "seeds": len(full), "lrs": lrs,
                         "best_grid_lr": float(table.mean(axis=1).idxmin()),
                         "optimum": 2 ** fit["own"], "low": 2 ** fit["own_low"], "high": 2 ** fit["own_high"],
                         "interior": interior, "steps_from_base": fit["steps"],
                         "steps_low": fit["steps_low"], "steps_high": fit["steps_high"],
                         "level": level, "interval": fit["interval"],
                         # a sweep still running: no verdict on part of its grid
                         "verdict": verdict(fit["steps_low"], fit["steps_high"]) if complete else "incomplete"})
    return pd.DataFrame(rows)


def per_seed_table(stores: dict[str, tuple[str, str]], base: tuple[str, str]) -> pd.DataFrame:
    """Per (rule, shape): the seeds' sd at the lowest seed-mean lr and its median over the
    lrs, and per seed its own fitted optimum (`fit_optimum` on that seed's losses) and that
    optimum's distance in sqrt(2) steps from the base's fitted on the same seed."""
    losses, reference = losses_and_base(stores, base)

    def optimum(t: pd.DataFrame, seed: int) -> float:
        return fit_optimum(np.log2(t.index.to_numpy(float)), t[seed].to_numpy(float))[0]

    rows = []
    for rule, shapes in losses.items():
        for shape, table in shapes.items():
            spread = table.std(axis=1, ddof=1)
            row = {"rule": rule, "shape": shape, "sd_at_lowest": spread[table.mean(axis=1).idxmin()],
                   "median_sd": spread.median()}
            for seed in table.columns:
                own = optimum(table, seed)
                row[f"seed {seed} optimum"] = 2 ** own
                row[f"seed {seed} steps"] = (2 * (own - optimum(reference, seed))
                                             if seed in reference.columns else np.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def fit_markdown(fit: pd.DataFrame, level: float = 0.95) -> str:
    """`fit_table` as docs/lr-transfer.md prints it: each estimate with its interval in one
    cell, the interval's nominal level and method beside it (the optimum to 3 significant
    digits, the steps to 2 decimals)."""
    def cell(value: float, low: float, high: float, level: float, how: str, number: str) -> str:
        if pd.isna(low):
            return number.format(value)
        return f"{number.format(value)} [{number.format(low)}, {number.format(high)}] {100 * level:.4g}% {how}"

    levels = fit["level"] if "level" in fit else pd.Series([level] * len(fit), index=fit.index)
    how = fit["interval"] if "interval" in fit else pd.Series(["t"] * len(fit), index=fit.index)
    shown = pd.DataFrame({
        "rule": fit["rule"], "shape": fit["shape"], "seeds": fit["seeds"], "lrs": fit["lrs"],
        "optimum [level, interval]": [cell(*r, "{:.2e}") for r in
                                      zip(fit["optimum"], fit["low"], fit["high"], levels, how, strict=True)],
        "sqrt(2) steps from the base's [level, interval]": [
            cell(*r, "{:+.2f}") for r in
            zip(fit["steps_from_base"], fit["steps_low"], fit["steps_high"], levels, how, strict=True)],
        "inside the grid": fit["interior"].map({True: "yes", False: "no: an edge"}),
        "verdict": fit["verdict"]})
    return markdown(shown)


def markdown(frame: pd.DataFrame, number: str = "{:g}") -> str:
    """A Markdown table, floats as `number` formats them, NaN blank (pandas' `to_markdown`
    needs tabulate, which the project does not)."""
    cells = [[("" if v != v else number.format(v) if isinstance(v, float) else str(v)) for v in row]
             for row in frame.itertuples(index=False)]
    lines = [list(map(str, frame.columns)), ["---"] * len(frame.columns), *cells]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)
