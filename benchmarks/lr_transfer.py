"""The lr-transfer experiments' tables: each shape's best learning rate under each muP rule.

The sweeps are `docs/spaces/lr-transfer*.yaml` (docs/lr-transfer.md). This reads their stores
and prints, per shape and rule, the final validation loss at every learning rate of the grid
(the seed mean), the best one, and how many grid steps (factors of 2) it lies from the base
shape's best:

    python benchmarks/lr_transfer.py --store fan-in=ROOT:lr-transfer \\
        --store width-rules=OLD_ROOT:lr-transfer-width-rules \\
        --store depth-muP=ROOT:lr-transfer-depth [--markdown]

With `--fit` (the study of 3 seeds on a sqrt(2) grid, `docs/spaces/lr-transfer-study-*.yaml`)
it fits each shape's optimum instead: a quadratic in log2(lr) through the 5 grid points
around the lowest seed-mean loss (`fit_optimum`), with a 95% seed-bootstrap interval (the
seeds resampled with replacement, one draw for a shape and the base, so the difference is
paired), and its distance from the base's optimum in sqrt(2) steps with that interval. The
verdict: `within one step` when the whole interval lies inside (-1, +1) steps, `moves` when it
lies outside [-1, +1], else `unresolved`; `incomplete` while a shape lacks any of the base's
lrs or seeds (a sweep still running). `--level` sets the intervals' coverage (e.g. 0.99167,
Bonferroni's over six shapes at a 95% family-wise level):

    python benchmarks/lr_transfer.py --fit --base depth:base \\
        --store depth=ROOT:lr-transfer-study-depth --store tp6=ROOT:lr-transfer-study-depth-tp6 \\
        --store completep=ROOT:lr-transfer-study-depth-completep [--markdown]

With `--per-seed` (and `--base`) it prints what the docs say of each shape's seeds: the
seeds' standard deviation at the shape's lowest seed-mean lr and its median over the lrs,
and each seed's own fitted optimum with its distance from the base's optimum on that seed.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pandas as pd

from shapesweep.results.store import load_trials

WINDOW = 5  # grid points the quadratic is fitted through, centred on the lowest


def completed(root: str, sweep: str) -> pd.DataFrame:
    """A sweep's completed trials, with their tuned `lr` as a column."""
    trials = load_trials(root, [sweep])
    done = trials[trials["status"] == "completed"].copy()
    done["lr"] = [json.loads(t)["lr"] for t in done["tuned_json"]]
    return done


def losses(root: str, sweep: str) -> pd.DataFrame:
    """Mean final val_loss over seeds per (variant, lr) of a sweep's completed trials."""
    done = completed(root, sweep)
    return done.groupby(["variant", "lr"])["val_loss"].agg(["mean", "count"]).reset_index()


def table(stores: dict[str, tuple[str, str]], base: str = "base") -> pd.DataFrame:
    rows = []
    for rule, (root, sweep) in stores.items():
        for variant, group in losses(root, sweep).groupby("variant"):
            best = group.loc[group["mean"].idxmin()]
            rows.append({"rule": rule, "shape": variant, "best_lr": best["lr"],
                         "seeds": int(group["count"].min()),
                         "edge": best["lr"] in (group["lr"].min(), group["lr"].max()),
                         **{f"{lr:.2g}": round(m, 4) for lr, m in zip(group["lr"], group["mean"], strict=True)}})
    out = pd.DataFrame(rows)
    base_rows = out[out["shape"] == base]
    if base_rows.empty:
        raise SystemExit(f"no shape named {base!r} in any store")
    base_lr = float(base_rows["best_lr"].iloc[0])
    out["steps_from_base"] = [round(math.log2(lr / base_lr)) for lr in out["best_lr"]]
    out["within_one_step"] = out["steps_from_base"].abs() <= 1
    return out


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


def fit_table(stores: dict[str, tuple[str, str]], base: tuple[str, str], resamples: int = 2000,
              seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Per (rule, shape): the fitted optimum, its seed-bootstrap interval at `level`, and its
    distance from the base's optimum in sqrt(2) steps with a paired bootstrap interval (module
    docstring)."""
    tails = [50 * (1 - level), 50 * (1 + level)]  # percentiles
    losses, reference = losses_and_base(stores, base)
    rng = np.random.default_rng(seed)
    rows = []
    for rule, shapes in losses.items():
        for shape, table in shapes.items():
            seeds = sorted(set(table.columns) & set(reference.columns))
            full = [s for s in seeds if table[s].notna().all() and reference[s].notna().all()]
            draws = [rng.choice(full, size=len(full), replace=True) for _ in range(resamples)] if len(full) >= 2 else []

            def opt(t, cols):
                return fit_optimum(np.log2(t.index.to_numpy(float)), t[list(cols)].mean(axis=1).to_numpy(float))

            own, interior = opt(table, full or table.columns)
            ref, _ = opt(reference, full or reference.columns)
            boot = np.array([(opt(table, d)[0], opt(reference, d)[0]) for d in draws]).reshape(-1, 2)
            steps = 2 * (own - ref)  # log2 units to sqrt(2) steps
            if len(boot):
                o_low, o_high = np.percentile(boot[:, 0], tails)
                s_low, s_high = np.percentile(2 * (boot[:, 0] - boot[:, 1]), tails)
            else:
                o_low = o_high = s_low = s_high = np.nan
            lrs = int(table.notna().all(axis=1).sum())
            complete = lrs >= len(reference.index) and len(full) >= len(reference.columns)
            verdict = ("incomplete" if not complete  # a sweep still running: no verdict on part of its grid
                       else "unresolved" if not len(boot) else "within one step" if -1 < s_low and s_high < 1
                       else "moves" if s_low >= 1 or s_high <= -1 else "unresolved")
            rows.append({"rule": rule, "shape": shape, "seeds": len(full), "lrs": lrs,
                         "best_grid_lr": float(table.mean(axis=1).idxmin()),
                         "optimum": 2 ** own, "low": 2 ** o_low, "high": 2 ** o_high, "interior": interior,
                         "steps_from_base": steps, "steps_low": s_low, "steps_high": s_high,
                         "verdict": verdict})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", action="append", required=True, metavar="RULE=ROOT:SWEEP")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    parser.add_argument("--fit", action="store_true",
                        help="fit each shape's optimum with a seed-bootstrap interval (the 3-seed study)")
    parser.add_argument("--base", default="depth:base", metavar="RULE:SHAPE",
                        help="the base shape the optima (or, without --fit, the best lrs) are measured from")
    parser.add_argument("--resamples", type=int, default=2000, help="seed-bootstrap resamples (with --fit)")
    parser.add_argument("--level", type=float, default=0.95,
                        help="the intervals' coverage (with --fit; default 0.95; 0.99167 is Bonferroni's "
                             "over six shapes at 95%% family-wise)")
    parser.add_argument("--per-seed", action="store_true",
                        help="each shape's seed spread, and each seed's own optimum and steps from the base's")
    args = parser.parse_args()
    if not 0 < args.level < 1:
        parser.error(f"--level: {args.level} is not between 0 and 1")
    stores = {}
    for item in args.store:
        rule, rest = item.split("=", 1)
        root, sweep = rest.rsplit(":", 1)
        stores[rule] = (root, sweep)
    if args.per_seed:
        rule, shape = args.base.split(":", 1)
        out = per_seed_table(stores, (rule, shape))
        print(markdown(out, "{:.3g}") if args.markdown else out.to_string(index=False))
        return
    if args.fit:
        rule, shape = args.base.split(":", 1)
        out = fit_table(stores, (rule, shape), args.resamples, level=args.level)
        print(fit_markdown(out, args.level) if args.markdown else out.to_string(index=False))
        return
    out = table(stores, args.base.split(":", 1)[1])
    print(markdown(out) if args.markdown else out.to_string(index=False))


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
    """`fit_table` as docs/lr-transfer.md prints it: each estimate with its interval (at
    `level`) in one cell (the optimum to 3 significant digits, the steps to 2 decimals)."""
    tag = f"[{100 * level:.4g}%]"
    def cell(value: float, low: float, high: float, number: str) -> str:
        return number.format(value) + ("" if pd.isna(low) else f" [{number.format(low)}, {number.format(high)}]")

    shown = pd.DataFrame({
        "rule": fit["rule"], "shape": fit["shape"], "seeds": fit["seeds"], "lrs": fit["lrs"],
        f"optimum {tag}": [cell(*r, "{:.2e}") for r in zip(fit["optimum"], fit["low"], fit["high"], strict=True)],
        f"sqrt(2) steps from the base's {tag}": [cell(*r, "{:+.2f}") for r in
                                                zip(fit["steps_from_base"], fit["steps_low"], fit["steps_high"], strict=True)],
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


if __name__ == "__main__":
    main()
