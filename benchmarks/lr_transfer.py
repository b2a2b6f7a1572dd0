"""The lr-transfer experiments' tables: each shape's best learning rate under each muP rule.

The sweeps are `docs/spaces/lr-transfer*.yaml` (docs/lr-transfer.md). This reads their stores
and prints, per shape and rule, the final validation loss at every learning rate of the grid
(the seed mean), the best one, and how many grid steps (factors of 2) it lies from the base
shape's best:

    python benchmarks/lr_transfer.py --store fan-in=ROOT:lr-transfer \\
        --store width-rules=OLD_ROOT:lr-transfer-width-rules \\
        --store depth-muP=ROOT:lr-transfer-depth [--markdown]

With `--fit` (the study of 3 seeds on a sqrt(2) grid, `docs/spaces/lr-transfer-study-*.yaml`)
it fits each shape's optimum instead: per seed, a quadratic in log2(lr) through the 5 grid
points around that seed's lowest loss (`fit_optimum`), and its distance from the base's
optimum fitted on the same seed, in sqrt(2) steps (paired by seed). The estimate is the mean
over the seeds; its interval a t-interval over the per-seed values (`t_interval`: mean +-
t(n-1) sd / sqrt(n)), which holds its stated coverage at 3 seeds when the per-seed fits scatter
normally (`tests/test_fit_intervals.py` shows it by simulation). A seed bootstrap
(`--interval bootstrap`) is used only where a shape has at least `BOOTSTRAP_MIN_SEEDS` seeds:
on 3 seeds it has 10 distinct resamples, and its "95%" interval covers ~75-80% (issue 56); a
shape with fewer seeds gets the t-interval, and the table names each interval's method and
level. The verdict: `within one step` when the whole interval lies inside (-1, +1) steps,
`moves` when it lies outside [-1, +1], else `unresolved`; `incomplete` while a shape lacks any
of the base's lrs or seeds (a sweep still running). `--level` sets the intervals' coverage
(e.g. 0.99167, Bonferroni's over six shapes at a 95% family-wise level):

    python benchmarks/lr_transfer.py --fit --base depth:base \\
        --store depth=ROOT:lr-transfer-study-depth --store tp6=ROOT:lr-transfer-study-depth-tp6 [--markdown]

With `--per-seed` (and `--base`) it prints what the docs say of each shape's seeds: the
seeds' standard deviation at the shape's lowest seed-mean lr and its median over the lrs,
and each seed's own fitted optimum with its distance from the base's optimum on that seed.

The fits are shapesweep.results.lr_fit's; the lr-transfer study's report, regenerated from
the committed stores with them, is `shapesweep study report lr-transfer` (studies/lr-transfer).
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

# The fits live in the package (the lr-transfer study's report is generated from them); the
# names are this script's too, as the tests and benchmarks/early_ranking.py use them.
from shapesweep.results.lr_fit import (  # noqa: F401
    BOOTSTRAP_MIN_SEEDS,
    WINDOW,
    completed,
    fit_interval,
    fit_markdown,
    fit_optimum,
    fit_table,
    losses_and_base,
    markdown,
    per_seed_table,
    seed_losses,
    t_interval,
    verdict,
)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", action="append", required=True, metavar="RULE=ROOT:SWEEP")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    parser.add_argument("--fit", action="store_true",
                        help="fit each shape's optimum with its interval (the 3-seed study)")
    parser.add_argument("--base", default="depth:base", metavar="RULE:SHAPE",
                        help="the base shape the optima (or, without --fit, the best lrs) are measured from")
    parser.add_argument("--interval", choices=("t", "bootstrap"), default="t",
                        help="with --fit: a t-interval over the per-seed fits (default), or a seed "
                             f"bootstrap where a shape has >= {BOOTSTRAP_MIN_SEEDS} seeds (t below that)")
    parser.add_argument("--resamples", type=int, default=2000,
                        help="seed-bootstrap resamples (with --fit --interval bootstrap)")
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
        out = fit_table(stores, (rule, shape), args.resamples, level=args.level, method=args.interval)
        print(fit_markdown(out, args.level) if args.markdown else out.to_string(index=False))
        return
    out = table(stores, args.base.split(":", 1)[1])
    print(markdown(out) if args.markdown else out.to_string(index=False))


if __name__ == "__main__":
    main()
