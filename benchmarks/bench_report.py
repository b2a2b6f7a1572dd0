"""How long `shapesweep dashboard` takes on a store of 10,000 trials, and how big the HTML is.

Run: .venv/bin/python benchmarks/bench_report.py [--trials 10000] [--root DIR]

The store holds schema-valid synthetic trials (`dashboards.synthetic`: real configs and
exact accounting, modelled losses) in three sweeps (two LM budgets, one image MLP),
written through `results.store.write_trial` and compacted, as a finished sweep is. The
report build is timed in stages in this one run: reading the store, building the
figures and payload, writing the HTML. A store under --root is reused when it already
holds the trials, so repeated runs time only the report.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def make_store(root: str, trials: int) -> dict[str, int]:
    from dashboards.synthetic import write_synthetic
    from results.store import compact, list_sweeps, load_trials

    sweeps = {"bench-lm-30m": (0.4, ("conventional", "hourglass", "variable_width"), (30e6,)),
              "bench-lm-113m": (0.4, ("conventional", "hourglass", "variable_width"), (113e6,)),
              "bench-mlp": (0.2, ("vision_mlp",), (1e8, 3e8, 1e9))}
    counts = {}
    for seed, (name, (share, families, budgets)) in enumerate(sweeps.items()):
        want = int(round(trials * share))
        have = len(load_trials(root, [name])) if name in list_sweeps(root) else 0
        if have < want:
            start = time.perf_counter()
            write_synthetic(root, name, want, families=families, budgets=budgets, seed=seed)
            compact(root, name, grace_s=0)
            print(f"  wrote {want} trials to {name} in {time.perf_counter() - start:.0f} s")
        counts[name] = want
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "shapesweep-bench-report"))
    args = parser.parse_args()

    import plotly.offline

    from dashboards.page import render_page
    from dashboards.report import build_payload, load_frames, script_safe, write_report

    print(f"store: {args.root}")
    sweeps = list(make_store(args.root, args.trials))
    plotly_js = plotly.offline.get_plotlyjs()  # imports warm, as in a CLI run after startup

    start = time.perf_counter()
    trials, curves = load_frames(args.root, sweeps)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    payload = build_payload(args.root, sweeps)
    payload_s = time.perf_counter() - start
    page = render_page(script_safe(payload), plotly_js=plotly_js)
    out = os.path.join(args.root, "bench-report.html")
    start = time.perf_counter()
    write_report(args.root, sweeps, out)
    total_s = time.perf_counter() - start

    size = os.path.getsize(out)
    print(f"trials: {len(trials)}  curve points: {len(curves)}")
    print(f"report build (write_report, end to end): {total_s:.1f} s")
    print(f"  of which reading the store:            {read_s:.1f} s")
    print(f"  reading + figures + payload:           {payload_s:.1f} s")
    print(f"HTML size: {size / 1e6:.1f} MB (plotly.js {len(plotly_js) / 1e6:.1f} MB, "
          f"data {(len(page) - len(plotly_js)) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
