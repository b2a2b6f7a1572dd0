"""`shapesweep demo`: the README's first command — a small real sweep ending in a dashboard.

It is nothing but the public verbs in sequence (run, status, dashboard, export), so what the
demo shows is exactly what a user gets from running them by hand. Sweeps are resumable, so
a second `demo` finishes what is missing instead of repeating work.
"""

from __future__ import annotations

from pathlib import Path

from shapesweep.common import UserError, command_name, terminal_console
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main as shapesweep
from shapesweep.sweep.cli.verb_table import DemoArgs

# The built-in demo space (`--space`, sweep/cli/verb_table.py DEMO_SPACE): width vs depth at one budget, conventional and hourglass FFNs
# against the conventional baseline, each shape's lr chosen on one seed and measured on 3
# others, so every comparison has its CI; small enough to finish in minutes on 2 cores.
# FULL_DEMO_SPACE there is the full comparison.


def first_hour(exe: str, root: Path, name: str) -> list[str]:
    """The commands that follow the demo, as the README's "first hour" lists them."""
    return [f"{exe} status {name} --root {root}",
            f"{exe} export {name} --root {root} --top 1 --out best/",
            f"{exe} train best/01-*.yaml"]


def demo(args: DemoArgs) -> int:
    """Run, status, dashboard and export of the demo space, each as the public verb."""
    console = terminal_console()
    name = load_space(args.space).name  # bad input stops here, before anything is written
    root, store = Path(args.root), ParquetStore(args.root)
    if store.local_folder() is None:
        raise UserError("the demo writes its report and configs on this machine: give a local folder",
                        key="--root")
    report = Path(args.out or str(store.local_path("demo-report.html")))
    console.rule(f"[bold]sweep {name}[/] (space {args.space})")
    where = ["--root", str(root), *(["--storage", args.storage] if args.storage else [])]
    code = shapesweep(["run", args.space, *where,
                       *(["--max-concurrent", str(args.max_concurrent)] if args.max_concurrent else []),
                       "--scheduler", "fifo"])
    if code:
        return code
    console.rule(f"[bold]status {name}[/]: mean ± std over seeds, difference to the baseline")
    code = shapesweep(["status", name, *where])
    if code:
        return code
    console.rule("[bold]dashboard and export")
    code = shapesweep(["dashboard", name, *where, "--out", str(report)])
    if code:
        return code
    best = Path(str(store.local_path("demo-best", name)))
    code = shapesweep(["export", name, *where, "--top", "3", "--out", str(best)])
    if code:
        return code
    console.print(f"\n[bold green]Report:[/] {report.resolve()} (open it in any browser; it works offline)")
    console.print(f"[bold green]Best configs:[/] {best.resolve()}")
    console.print("[bold]Next:[/]", soft_wrap=True)
    for line in first_hour(command_name(), root, name):
        console.print(f"  {line}", soft_wrap=True, highlight=False, markup=False)
    return 0
