"""How long `shapesweep dashboard` takes on a store of 10,000 trials, and how big the HTML is.

Run: .venv/bin/python benchmarks/bench_report.py [--trials 10000] [--root DIR]

The store holds schema-valid synthetic trials (`tests/synthetic.py`: real configs and
exact accounting, modelled losses) in three sweeps (two LM budgets, one image MLP),
written through `shapesweep.results.store.write_trial` and compacted, as a finished sweep is. The
report build is timed in stages in this one run: reading the store, building the
figures and payload (within it: hover texts and labels, the figures, the analysis views),
writing the HTML. A store under --root is reused when it already holds the trials, so
repeated runs time only the report.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the synthetic sweeps: tests/synthetic.py


def make_store(root: str, trials: int) -> dict[str, int]:
    from shapesweep.results.store import compact, list_sweeps, load_trials
    from tests.synthetic import write_synthetic

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

    from shapesweep.dashboards.figures import applicable_figures
    from shapesweep.dashboards.frames import python_strings, with_derived
    from shapesweep.dashboards.report import budget_labels, build_payload, load_frames, write_report
    from shapesweep.dashboards.views import analysis_views
    from shapesweep.results.store import load_layers

    print(f"store: {args.root}")
    sweeps = list(make_store(args.root, args.trials))
    out = os.path.join(args.root, "bench-report.html")

    # What a user waits for: the CLI in a fresh process (imports included).
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "dashboard", *sweeps, "--root", args.root,
                    "--out", out], check=True, stdout=subprocess.DEVNULL)
    cli_s = time.perf_counter() - start

    # The same build in stages, in this process, imports already warm.
    write_report(args.root, sweeps, out)
    start = time.perf_counter()
    trials, curves = load_frames(args.root, sweeps)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    derived = with_derived(trials).assign(budget=budget_labels)
    curves = python_strings(curves)
    derived_s = time.perf_counter() - start
    start = time.perf_counter()
    applicable_figures(derived, curves, load_layers(args.root, sweeps))
    figures_s = time.perf_counter() - start
    start = time.perf_counter()
    analysis_views(derived)
    views_s = time.perf_counter() - start
    start = time.perf_counter()
    payload = build_payload(args.root, sweeps)
    payload_s = time.perf_counter() - start
    start = time.perf_counter()
    write_report(args.root, sweeps, out)
    report_s = time.perf_counter() - start

    size = os.path.getsize(out)
    print(f"trials: {len(trials)}  curve points: {len(curves)}")
    print(f"shapesweep dashboard (fresh process, end to end): {cli_s:.1f} s")
    print(f"write_report, warm:                               {report_s:.1f} s")
    print(f"  reading the store:                              {read_s:.1f} s")
    print(f"  reading + figures + payload JSON:               {payload_s:.1f} s")
    print(f"    of which hover texts and labels:              {derived_s:.1f} s")
    print(f"    the figures:                                  {figures_s:.1f} s")
    print(f"    the analysis views (fANOVA, slices):          {views_s:.1f} s")
    print(f"HTML size: {size / 1e6:.1f} MB (plotly.js {len(plotly.offline.get_plotlyjs()) / 1e6:.1f} MB, "
          f"payload {len(payload) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
