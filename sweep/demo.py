"""`shapesweep demo`: the README's first command — a small real sweep ending in a dashboard.

It is nothing but the public verbs in sequence (run, dashboard, export), so what the demo
shows is exactly what a user gets from running them by hand. Sweeps are resumable, so a
second `demo` finishes what is missing instead of repeating work.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEMO_SPACES = {
    # sweep name -> built-in space
    "demo-ucurve": "demo-ucurve",  # width/depth U-curve, conventional vs hourglass, one small budget
    "demo-shapes": "demo-shapes",  # variable-width shapes vs the constant-width baseline
}


def add_arguments_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="./sweeps", help="results root (default ./sweeps)")
    parser.add_argument("--out", default=None,
                        help="report path (default ROOT/demo-report.html)")
    parser.add_argument("--max-concurrent", type=int, default=2,
                        help="trials at once (default 2, one per core here)")


def demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from sweep.cli import main as shapesweep

    console = Console()
    root = Path(args.root)
    report = Path(args.out) if args.out else root / "demo-report.html"
    exports = root / "demo-best"
    for name, space in DEMO_SPACES.items():
        console.rule(f"[bold]sweep {name}[/] (space {space})")
        code = shapesweep(["run", space, "--name", name, "--root", str(root),
                           "--max-concurrent", str(args.max_concurrent), "--scheduler", "fifo"])
        if code:
            return code
    console.rule("[bold]dashboard and export")
    code = shapesweep(["dashboard", *DEMO_SPACES, "--root", str(root), "--out", str(report)])
    if code:
        return code
    for name in DEMO_SPACES:
        code = shapesweep(["export", name, "--root", str(root), "--top", "3",
                           "--out", str(exports / name)])
        if code:
            return code
    console.print(f"\n[bold green]Report:[/] {report.resolve()}")
    console.print(f"[bold green]Best configs:[/] {exports.resolve()}  "
                  f"(train one with: shapesweep train {exports / 'demo-ucurve'}/<file>.yaml)")
    return 0
