"""The sweep command a job of the batch script runs: `run` with the user's options on its
first start; on a requeued start (SLURM_RESTART_COUNT > 0), `resume` of that sweep with the
options `resume` takes, once the first start saved the sweep (else `run` again).

`python -m shapesweep.sweep.slurm.driver RESTARTS [run options]` writes the arguments, each
ended by a NUL, for the script to read whatever they hold."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import NoReturn

from shapesweep.common import UserError
from shapesweep.results.store import read_sweep_file
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.options.fields import Flag, add_flags, arguments
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.slurm import step_main

# What the script gives every start itself: its own cluster, and a log rather than a live table.
SET_BY_SCRIPT = ("address", "progress")


class _OneLineParser(argparse.ArgumentParser):
    """A parser whose error is one line (a job's log), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (the options are `shapesweep run`'s: shapesweep run --help)")


def run_parser() -> argparse.ArgumentParser:
    """`shapesweep run`'s own arguments, so the script reads the options as `run` would."""
    parser = _OneLineParser(prog="shapesweep run", add_help=False)
    add_flags(parser, SweepOptions)
    return parser


def sweep_command(argv: list[str], restarts: int) -> list[str]:
    """The `shapesweep` arguments for this start of the job (its `--address` and
    `--no-progress` the script adds)."""
    parser = run_parser()
    args = arguments(SweepOptions, parser.parse_args(argv))  # bad options: one line, before Ray starts
    name = args.name or load_space(args.space).name  # a bad space: refused before Ray starts
    if restarts <= 0:
        return ["run", *argv]
    if read_sweep_file(args.root, name, "sweep.json") is None:
        return ["run", *argv]  # the first start ended before the sweep was saved
    return ["resume", name, *resume_options(args, parser)]


def resume_options(args: SweepOptions, parser: argparse.ArgumentParser) -> list[str]:
    """The options `resume` takes that `args` gives other than their defaults, as given."""
    given: list[str] = []
    for field in dataclasses.fields(SweepOptions):
        flag: Flag | None = field.metadata.get("flag")
        if flag is None or not flag.resume or field.name in SET_BY_SCRIPT:
            continue
        value = getattr(args, field.name)
        if value == parser.get_default(field.name):
            continue
        if isinstance(value, bool):  # a switch: its flag alone
            given.append(flag.names[0])
        else:
            given += [flag.names[0], str(value)]
    return given


USAGE = "python -m shapesweep.sweep.slurm.driver RESTARTS SPACE [run options]"


def _print_command(argv: list[str]) -> None:
    command = sweep_command(argv[1:], int(argv[0]))
    sys.stdout.write("".join(f"{arg}\0" for arg in command))


if __name__ == "__main__":
    sys.exit(step_main(_print_command, USAGE))
