"""`shapesweep spaces` and `shapesweep plan SPACE`: browse built-in spaces, solve one."""

from __future__ import annotations

import argparse
import csv
import json
import sys

from shapesweep.common import UserError

TABLE_COLUMNS = ("key", "family", "d_model", "n_layers", "n_heads", "d_h", "k", "ffn_ratio",
                 "width_depth_ratio", "params_non_embedding", "params_total", "flops_per_token",
                 "avg_layer_width", "budget_error")
VARYING_EXTRA = ("shape", "beta", "alpha", "activation", "resize", "d_x", "d_z", "input_projection", "task")
HEADERS = {"n_layers": "L", "n_heads": "heads", "ffn_ratio": "d_h/d", "width_depth_ratio": "d/L",
           "params_non_embedding": "non-emb", "params_total": "total", "flops_per_token": "FLOPs/tok",
           "avg_layer_width": "avg width", "budget_error": "budget err"}
# Left out in this order until the table fits the terminal (`--format csv` has every column).
DROP_FIRST = ("n_heads", "avg_layer_width", "params_total", "flops_per_token", "ffn_ratio", "family")


def add_arguments_spaces(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fast", action="store_true",
                        help="show raw grid sizes instead of solving each space for its candidate count")


def add_arguments_plan(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("space", help="a built-in space name (see `shapesweep spaces`) or a YAML file")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--seq-len", type=int, default=None,
                        help="sequence length for FLOPs (default: the space's train.seq_len)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="also write one candidate YAML per candidate into DIR "
                             "(each trains as is with `shapesweep train DIR/KEY.yaml`)")


def spaces(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import list_builtin, load_space

    table = Table(title="built-in search spaces (shapesweep plan NAME)")
    for name in ("name", "family", "budget", "candidates", "description"):
        table.add_column(name, overflow="fold", no_wrap=name == "name")
    for name, description in list_builtin():
        space = load_space(name)
        if args.fast:
            count = f"<= {sum(v.raw_size for v in space.resolved())}"
        else:
            try:
                count = str(plan(space).counts["unique"])
            except UserError as error:
                count = f"error: {error.problem}"
        table.add_row(name, ", ".join(space.families), _budget_text(space), count, description)
    Console().print(table)  # descriptions fold at the terminal's width
    return 0


def _budget_text(space) -> str:
    budget = space.budget
    if budget.match is not None:
        what = ", ".join(f"{k}={v}" for k, v in budget.match.items())
        return f"{budget.target_metric} of ({what}) ±{budget.tolerance:g}"
    value = getattr(budget, budget.target_metric)
    return f"{budget.target_metric} {_short(value)} ±{budget.tolerance:g}"


def _short(value: float) -> str:
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def plan(args: argparse.Namespace) -> int:
    from shapesweep.search_spaces.cadence import cooldown_line, evaluation_line
    from shapesweep.search_spaces.solver import plan as solve
    from shapesweep.search_spaces.space import load_space
    from shapesweep.sweep.scheduling import choose

    space = load_space(args.space)
    result = solve(space, seq_len=args.seq_len)
    rows = [c.to_row() for c in result.candidates]
    if args.format == "json":  # each candidate's resolved recipe (its variant's, per size)
        for row, candidate in zip(rows, result.candidates, strict=True):
            row["train"] = space.train_for(candidate=candidate).model_dump(mode="json",
                                                                           exclude_none=True)
    if args.out:
        _write_candidates(args.out, space, result.candidates)
    if args.format == "json":
        json.dump(rows, sys.stdout, indent=1)
        print()
    elif args.format == "csv":
        fields = list(dict.fromkeys(k for row in rows for k in row))
        writer = csv.DictWriter(sys.stdout, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    else:
        _print_table(space, result, rows)
    trials = _trials_line(space, len(rows))
    # which scheduler `run` picks and why, and what evaluation and cooldowns cost there
    choice = choose("auto", space, result.candidates, list(space.seeds))
    cost = [line for line in (choice.line, evaluation_line(space, result.candidates, choice.rungs),
                              cooldown_line(space, result.candidates, choice.rungs)) if line]
    if args.format != "table":  # stdout holds only the data; the summary goes to stderr
        print(result.counts_line(), *result.dropped_lines(), trials, *cost, sep="\n",
              file=sys.stderr)
    else:
        print(trials, *cost, sep="\n")
    return 0


def _trials_line(space, n_candidates: int) -> str:
    """How many trials a sweep of the space runs: candidates x tuned combinations x seeds."""
    tuned, seeds = len(space.tuned_settings()), len(space.seeds)
    return (f"{n_candidates} candidates x {tuned} tuned settings x {seeds} seeds = "
            f"{n_candidates * tuned * seeds} trials")


def _write_candidates(out: str, space, candidates) -> None:
    """Write every candidate document into `out` at once: a temp folder, then renames."""
    import os
    import tempfile
    from pathlib import Path

    import yaml
    from shapesweep.search_spaces.solver import candidate_document

    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".plan-", dir=target))
    try:
        for candidate in candidates:
            doc = candidate_document(candidate, space.train_for(candidate=candidate))
            doc["provenance"] = {"space": space.name, "variant": candidate.variant}
            (staging / f"{candidate.key}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        for file in staging.iterdir():
            os.replace(file, target / file.name)
    finally:
        for file in staging.iterdir():
            file.unlink()
        staging.rmdir()
    print(f"wrote {len(candidates)} candidate files to {target}", file=sys.stderr)


def _print_table(space, result, rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    extra = [c for c in VARYING_EXTRA if len({str(r.get(c)) for r in rows}) > 1]
    columns = [c for c in TABLE_COLUMNS if any(r.get(c) is not None for r in rows)] + extra
    targets = ", ".join(f"{name} {_short(t)}" for name, t in result.targets.items())
    console = Console()
    cells = [[_cell(column, row.get(column)) for column in columns] for row in rows]
    shown = _fitting(columns, cells, console.width)
    table = Table(title=f"{space.name}: {result.metric} target {targets}, "
                        f"tolerance {space.budget.tolerance:g}")
    for column in shown:
        table.add_column(HEADERS.get(column, column), no_wrap=True,
                         justify="left" if column in ("key", "family") else "right")
    for row in cells:
        table.add_row(*(cell for column, cell in zip(columns, row, strict=True) if column in shown))
    console.print(table)
    if len(shown) < len(columns):
        left_out = ", ".join(c for c in columns if c not in shown)
        console.print(f"(left out at {console.width} columns: {left_out}; --format csv has them all)",
                      soft_wrap=True)
    console.print(result.counts_line(), soft_wrap=True)  # whole lines: a terminal wraps them
    for line in result.dropped_lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _fitting(columns: list[str], cells: list[list[str]], width: int) -> list[str]:
    """The columns that fit `width` whole: DROP_FIRST's left out, in order, until they do."""
    need = {c: max([len(HEADERS.get(c, c)), *(len(row[i]) for row in cells)]) + 3
            for i, c in enumerate(columns)}
    shown = list(columns)
    for column in DROP_FIRST:
        if sum(need[c] for c in shown) + 1 <= width:
            break
        if column in shown:
            shown.remove(column)
    return shown


def _cell(column: str, value) -> str:
    if value is None:
        return ""
    if column == "budget_error":
        return f"{value:+.4%}"
    if column.startswith(("params", "flops")):
        return _short(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
