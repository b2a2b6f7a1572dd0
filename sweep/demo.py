"""`shapesweep demo`: the README's first command — a small real sweep ending in a dashboard.

It is nothing but the public verbs in sequence (run, status, dashboard, export), so what the
demo shows is exactly what a user gets from running them by hand. Sweeps are resumable, so
a second `demo` finishes what is missing instead of repeating work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# sweep name -> built-in space: width vs depth at one budget, conventional and hourglass
# FFNs against the conventional baseline, 3 seeds each, so every comparison has its CI.
DEMO_SPACES = {"demo-ucurve": "demo-ucurve"}


def add_arguments_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="./sweeps", help="results root (default ./sweeps)")
    parser.add_argument("--out", default=None,
                        help="report path (default ROOT/demo-report.html)")
    parser.add_argument("--max-concurrent", type=int, default=2,
                        help="trials at once (default 2, one per core here)")


def _command() -> str:
    """How to call shapesweep again: by name if it is on PATH, else by its full path."""
    import shutil

    script = Path(sys.executable).with_name("shapesweep")
    on_path = shutil.which("shapesweep")
    return "shapesweep" if on_path and Path(on_path).resolve() == script.resolve() else str(script)


def demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from shapesweep.sweep.cli import main as shapesweep

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
        console.rule(f"[bold]status {name}[/]: mean ± std over seeds, difference to the baseline")
        code = shapesweep(["status", name, "--root", str(root)])
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
    exe, best = _command(), exports / "demo-ucurve"
    console.print(f"\n[bold green]Report:[/] {report.resolve()}")
    console.print(f"[bold green]Best configs:[/] {best.resolve()}")
    console.print("[bold]Next:[/]", soft_wrap=True)
    for line in (f"{exe} status demo-ucurve --root {root}",
                 f"{exe} export demo-ucurve --root {root} --top 1 --out best/",
                 f"{exe} train best/01-*.yaml --steps 600"):
        console.print(f"  {line}", soft_wrap=True, highlight=False, markup=False)
    return 0
