"""The lr-transfer experiment's table: each shape's best learning rate under each muP rule.

The sweeps are `docs/spaces/lr-transfer*.yaml` (the width-rules sweep was run with the code
before fan-in muP; no page reports them yet). This reads their stores and prints,
per shape and rule, the final validation loss at every learning rate of the grid, the best
one, and whether it lies within one grid step (a factor 2) of the base shape's best.

    python benchmarks/lr_transfer.py --store fan-in=/work/exp/lr:lr-transfer \\
        --store width-rules=/work/exp/lr-old:lr-transfer-width-rules \\
        --store depth-muP=/work/exp/lr:lr-transfer-depth [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd
from shapesweep.results.store import load_trials


def losses(root: str, sweep: str) -> pd.DataFrame:
    """Mean final val_loss over seeds per (variant, lr) of a sweep's completed trials."""
    trials = load_trials(root, [sweep])
    done = trials[trials["status"] == "completed"].copy()
    done["lr"] = [json.loads(t)["lr"] for t in done["tuned_json"]]
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
    args = parser.parse_args()
    stores = {}
    for item in args.store:
        rule, rest = item.split("=", 1)
        root, sweep = rest.rsplit(":", 1)
        stores[rule] = (root, sweep)
    out = table(stores)
    print(markdown(out) if args.markdown else out.to_string(index=False))


def markdown(frame: pd.DataFrame) -> str:
    """A Markdown table (pandas' `to_markdown` needs tabulate, which the project does not)."""
    cells = [[("" if v != v else f"{v:g}" if isinstance(v, float) else str(v)) for v in row]
             for row in frame.itertuples(index=False)]
    lines = [list(map(str, frame.columns)), ["---"] * len(frame.columns), *cells]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


if __name__ == "__main__":
    main()
