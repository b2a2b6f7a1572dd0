"""`shapesweep spaces` and `shapesweep plan SPACE`: browse built-in spaces, solve one (verbs: the
sweep layer, as `plan` says which scheduler `run` would pick)."""

from __future__ import annotations

import json
import os
import sys

from shapesweep.common import UserError, printable, terminal_console, write_csv
from shapesweep.search_spaces.cadence import cooldown_line, evaluation_line, token_budget
from shapesweep.search_spaces.solver import candidate_document
from shapesweep.search_spaces.solver import plan as solve
from shapesweep.search_spaces.space import (
    AdaptiveSeeds,
    check_sweep_trials,
    list_builtin,
    load_space,
    options_seeds,
    seed_pool,
)
from shapesweep.sweep.cli.verb_table import PlanArgs, SpacesArgs
from shapesweep.sweep.options.option_groups import has_gpu
from shapesweep.sweep.options.sweep_options import parse_seeds
from shapesweep.sweep.search.pricing import (
    Device,
    adaptive_price,
    device_from,
    price_sweep,
    short_price,
    total_lines,
)
from shapesweep.sweep.search.scheduling import choose
from shapesweep.sweep.search.verdict import seed_verdict, verdict_line
from shapesweep.trainers.compile_policy import decide
from shapesweep.trainers.memory import (
    MARGIN,
    chosen,
    device_bytes,
    estimate,
    fits,
    parse_size,
    size,
)

TABLE_COLUMNS = ("variant", "key", "family", "d_model", "n_layers", "n_heads", "d_h", "k", "ffn_ratio",
                 "width_depth_ratio", "params_non_embedding", "params_total", "flops_per_token",
                 "avg_layer_width", "budget_error", "trials", "gpu_hours", "cost")
VARYING_EXTRA = ("shape", "beta", "alpha", "activation", "resize", "d_x", "d_z", "input_projection", "task")
HEADERS = {"n_layers": "L", "n_heads": "heads", "ffn_ratio": "d_h/d", "width_depth_ratio": "d/L",
           "params_non_embedding": "non-emb", "params_total": "total", "flops_per_token": "FLOPs/tok",
           "avg_layer_width": "avg width", "budget_error": "budget err", "gpu_hours": "GPU-h"}
# Left out in this order until the table fits the terminal (`--format csv` has every column).
DROP_FIRST = ("trials", "n_heads", "avg_layer_width", "key", "params_total", "flops_per_token", "ffn_ratio", "family",
              "cost", "gpu_hours")  # the price per candidate last: its totals print below the table


def spaces(args: SpacesArgs) -> int:
    records = [_space_record(name, description, args.fast) for name, description in _builtin()]
    if args.format == "json":
        print(json.dumps(records, indent=2))
    else:
        _spaces_table(records, args.wide, args.fast)
    return 0


def _builtin() -> list[tuple[str, str]]:
    return list_builtin()


def _space_record(name: str, description: str, fast: bool) -> dict:
    """A built-in space as `spaces --format json` prints it: candidates solved unless `fast`."""
    space = load_space(name)
    record = {"name": name, "families": space.families,
              "budget": space.budget.model_dump(mode="json", exclude_none=True),
              "raw_points": sum(v.raw_size for v in space.resolved()), "candidates": None,
              "error": None, "description": description}
    if not fast:
        try:
            record["candidates"] = solve(space).counts["unique"]
        except UserError as error:
            record["error"] = error.problem
    return record


def _spaces_table(records: list[dict], wide: bool, fast: bool) -> None:
    """One line per space, its description cut with an ellipsis to fit the terminal (80
    columns off one); `wide`: a paragraph per space, with its budget and whole description."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table


    console = terminal_console()  # a pipe: rows whole (shapesweep.common.PIPED_WIDTH)
    rows = []
    for record in records:
        count = (f"<= {record['raw_points']}" if fast else
                 str(record["candidates"]) if record["error"] is None else "error")
        rows.append({"name": record["name"], "family": ", ".join(record["families"]),
                     "candidates": count, "budget": _budget_text(load_space(record["name"])),
                     "description": record["description"] if record["error"] is None
                     else f"error: {record['error']}"})
    if wide:
        for row in rows:
            console.print(f"[bold]{escape(row['name'])}[/]  {escape(row['family'])}; "
                          f"{row['candidates']} candidates; {escape(row['budget'])}")
            console.print(f"    {escape(row['description'])}", highlight=False)
        return
    # one space between columns, none at the edges; the description gets what is left
    table = Table(title="built-in search spaces (shapesweep plan NAME; --wide: in full)",
                  title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0), show_edge=False)
    widths = {column: max([len(column), *(len(row[column]) for row in rows)])
              for column in ("name", "family", "candidates")}
    longest = max(len(row["description"]) for row in rows)
    if sum(widths.values()) + len(widths) + longest > console.width:  # the description needs the room
        widths["family"] = min(widths["family"], FAMILY_COLUMN)
    for column, width in widths.items():
        table.add_column(column, no_wrap=True, width=width, overflow="ellipsis",
                         justify="right" if column == "candidates" else "left")
    table.add_column("description", no_wrap=True, overflow="ellipsis",
                     width=max(11, min(console.width - sum(widths.values()) - len(widths),
                                       longest)))
    for row in rows:
        table.add_row(*(row[column] for column in (*widths, "description")))
    console.print(table)


FAMILY_COLUMN = 14  # `spaces`' family column at most (a mixed space's list is cut: --wide has it)


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


def plan(args: PlanArgs) -> int:
    """`shapesweep plan SPACE`: the space solved, each candidate's memory and price, the verdict."""
    gpus = device_from(args)  # bad flags refused before the solve
    device = planned_device(args, gpus)
    given = options_seeds(parse_seeds(args.seeds))
    space = load_space(args.space)
    measured = given or space.seeds
    result = solve(space, seq_len=args.seq_len)
    seeds = seed_pool(given) if given else None
    check_sweep_trials(space, len(result.candidates), seeds)
    measure = len(seed_pool(measured))  # an adaptive range: priced at its max, then expected
    verdict = seed_verdict(space, measure, len(result.candidates), "grid", args)
    rows = [c.to_row() for c in result.candidates]
    for row, candidate in zip(rows, result.candidates, strict=True):
        row.update(_memory_fields(candidate.config, space.train_for(candidate=candidate), device))
    decisions = _compile_decisions(space, result.candidates, gpus)
    choice = choose("auto", space, result.candidates, list(range(measure)))
    prices = price_sweep(space, result.candidates, decisions, gpus, measure, choice.rungs)
    for row, price in zip(rows, prices, strict=True):
        row.update(price.fields(gpus))
    if args.format == "json":  # each candidate's resolved recipe (its variant's, per size)
        for row, candidate, decision in zip(rows, result.candidates, decisions, strict=True):
            row["train"] = space.train_for(candidate=candidate).model_dump(mode="json",
                                                                           exclude_none=True)
            row["compile_on_cuda"] = {"compile": decision.compile, "reason": decision.reason,
                                      "blocks_per_region": decision.blocks_per_region}
    if args.out:
        _write_candidates(args.out, space, result.candidates)
    if args.format == "json":
        json.dump(rows, sys.stdout, indent=1)
        print()
    elif args.format == "csv":
        write_csv(rows, sys.stdout)
    else:
        _print_table(space, result, rows)
    trials = _trials_line(space, len(rows), measure)
    memory = _memory_line(rows, device)
    # which scheduler `run` picks and why, and what evaluation and cooldowns cost there
    needed = (None if verdict.gives_verdict else short_price(price_sweep(
        space, result.candidates, decisions, gpus, verdict.needed, choice.rungs), gpus))
    cost = [line for line in (choice.line, evaluation_line(space, result.candidates, choice.rungs),
                              cooldown_line(space, result.candidates, choice.rungs),
                              _compile_line(decisions),
                              *total_lines(prices, gpus, args.gpus_per_trial or 1.0),
                              verdict_line(verdict, short_price(prices, gpus), needed)) if line]
    if isinstance(measured, AdaptiveSeeds):  # its expected price, and where the figure comes from
        at_min = price_sweep(space, result.candidates, decisions, gpus, measured.min, choice.rungs)
        cost.append(adaptive_price(result.candidates, at_min, prices, measured, gpus, args.min_effect,
                                   args.seed_sd))
    if args.format != "table":  # stdout holds only the data; the summary goes to stderr
        print(*map(printable, (result.counts_line(), *result.dropped_lines(), trials, memory, *cost)),
              sep="\n", file=sys.stderr)
    else:
        print(*map(printable, (trials, memory, *cost)), sep="\n")
    return 0


def _compile_decisions(space, candidates, gpus) -> list:
    """Whether each candidate's trial compiles on a GPU (`train.compile`; `auto` weighs its
    expected training time against its compile, `shapesweep.trainers.compile_policy`)."""

    decisions = []
    for candidate in candidates:
        train = space.train_for(candidate=candidate)
        tokens = token_budget(train, candidate.config.family)
        decisions.append(decide(candidate.config, train, "cuda", tokens, gpus.peak))
    return decisions


def _compile_line(decisions: list) -> str | None:
    """One line: how many candidates compile on a GPU, and why (the longest trial's reason);
    on CPU `auto` runs eagerly."""
    if not decisions:
        return None
    compiled = sum(d.compile for d in decisions)
    example = max(decisions, key=lambda d: d.train_s or 0.0)
    return (f"compile on a GPU: {compiled} of {len(decisions)} candidates ({example.reason}); "
            "on CPU auto runs eagerly")


def planned_device(args: PlanArgs, gpus: Device) -> tuple[str, int]:
    """(device type, bytes a trial may use there) as `plan`'s flags describe them: --device
    (default: cuda where this machine has a GPU or --gpu names one), --gpu-memory (default:
    --gpu's card, this machine's GPU, or its RAM) times --gpus-per-trial."""

    share = 1.0 if args.gpus_per_trial is None else args.gpus_per_trial  # a GPU a trial on cuda
    if not 0 < share <= 1:  # a trial of several GPUs is data parallel: each worker's share
        raise UserError(f"must be in (0, 1] (got {share:g})", key="--gpus-per-trial")
    given = parse_size(args.gpu_memory, "--gpu-memory") if args.gpu_memory else None
    if given is None and args.gpu and args.device != "cpu":  # --gpu names the card
        given = parse_size(gpus.memory, "--gpu")
    device = (args.device or "").partition(":")[0] or ("cuda" if given or _has_gpu() else "cpu")
    if device not in ("cpu", "cuda"):
        raise UserError(f"plan plans memory for cpu or cuda, not {args.device!r}", key="--device")
    if device == "cpu":
        if given:
            raise UserError("describes a GPU: give it with --device cuda", key="--gpu-memory")
        return device, _ram()
    if given is None:
        if not _has_gpu():
            raise UserError("this machine has no GPU: give the card's memory with --gpu-memory "
                            "SIZE (e.g. 80GiB)", key="--device")

        given = device_bytes("cuda")
    return device, int(share * given)


def _has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU, without importing torch (as the driver does)."""
    return has_gpu()


def _ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _memory_fields(config, train, device: tuple[str, int]) -> dict:
    """A candidate's micro-batch on `device` (the recipe's, or what fits) and its predicted
    peak there (shapesweep.trainers.memory)."""

    kind, have = device
    micro = chosen(config, train, kind, lambda: have)
    return {"micro_batch_size": micro,
            "memory_peak_bytes": estimate(config, train, kind, micro).total}


def _memory_line(rows: list[dict], device: tuple[str, int]) -> str:
    """One line: the planned micro-batches and peaks against what a trial may use."""
    kind, have = device
    micros = sorted({r["micro_batch_size"] for r in rows})
    peak = max(r["memory_peak_bytes"] for r in rows)
    over = sum(not fits(r["memory_peak_bytes"], have) for r in rows)
    span = f"{micros[0]}" if len(micros) == 1 else f"{micros[0]}-{micros[-1]}"
    verdict = (f"{over} of {len(rows)} candidates do not fit" if over else "every candidate fits")
    return (f"memory on {kind} ({size(have)} per trial, {MARGIN:.0%} planned on): micro-batch "
            f"{span}, predicted peak up to {size(peak)}; {verdict}")


def _trials_line(space, n_candidates: int, seeds: int) -> str:
    """How many trials a sweep of the space runs: candidates x tuned combinations x seeds
    (with choice seeds: the combinations on those, then the chosen one on the seeds)."""
    tuned, choice = space.tuned_count, len(space.choice_seeds)
    per = (f"({tuned} tuned settings x {choice} choice seeds + {seeds} measure seeds)" if choice
           else f"{tuned} tuned settings x {seeds} seeds")
    trials = n_candidates * space.trials_per_candidate(list(range(seeds)))
    return f"{n_candidates} candidates x {per} = {trials} trials"


def _write_candidates(out: str, space, candidates) -> None:
    """Write every candidate document into `out` at once: a temp folder, then renames."""
    import tempfile
    from pathlib import Path

    import yaml


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
    from rich.table import Table

    extra = [c for c in VARYING_EXTRA if len({str(r.get(c)) for r in rows}) > 1]
    columns = [c for c in TABLE_COLUMNS if any(r.get(c) is not None for r in rows)] + extra
    targets = ", ".join(f"{name} {_short(t)}" for name, t in result.targets.items())
    console = terminal_console(markup=False)  # names from the space: shown as written
    cells = [[_cell(column, row.get(column)) for column in columns] for row in rows]
    shown = _fitting(columns, cells, console.width)
    table = Table(title=f"{space.name}: {result.metric} target {targets}, "
                        f"tolerance {space.budget.tolerance:g}")
    for column in shown:
        table.add_column(HEADERS.get(column, column), no_wrap=True,
                         justify="left" if column in ("variant", "key", "family") else "right")
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
    if column in ("gpu_hours", "cost"):
        return f"{value:,.1f}"
    if column.startswith(("params", "flops")):
        return _short(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
