"""`shapesweep`: one entry point; each verb lives in the package that owns the work.

The verbs, their arguments and their functions are the table in sweep/cli/verb_table.py: each verb's
parser is derived from its arguments, every value is read and checked (one line naming the
flag, exit 2) before the verb runs, and a verb's module is imported only then, so `--help`
stays fast and a verb that does not need Ray or torch never imports them.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import threading
from typing import NoReturn

from shapesweep.common import UserError, did_you_mean, printable
from shapesweep.sweep.cli.verb_table import VERBS, Verb
from shapesweep.sweep.options.fields import add_flags, arguments
from shapesweep.sweep.options.store_args import check_store_args

__all__ = ["VERBS", "Verb", "build_parser", "entry", "main", "parse"]


class Parser(argparse.ArgumentParser):
    """argparse, with its refusals in one line (`shapesweep run: error: ...`), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message, one_line=True)} "
                     f"(see {self.prog} --help)\n")


SHELLS = ("bash", "zsh")  # shell completion scripts shtab writes


class PrintCompletion(argparse.Action):
    """`--print-completion SHELL`: the completion script for every verb and option, from
    this parser (shtab, imported only here); installing it is in docs/cli.md."""

    def __call__(self, parser, namespace, shell, option_string=None):
        import shtab

        _print_and_exit(parser, shtab.complete(parser, shell=shell))


def version() -> str:
    from importlib.metadata import version as installed

    return installed("shapesweep")


class Version(argparse.Action):
    """`--version`: the installed package's version (read only when asked for)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        _print_and_exit(parser, f"shapesweep {version()}")


def _print_and_exit(parser: argparse.ArgumentParser, text: str) -> NoReturn:
    """`text` on stdout, then exit 0, also when the reader has gone (`| head`)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:  # Python's advice: stdout to devnull, so the exit's flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="shapesweep",
        description="Architecture-search sweeps over the shape of transformer language models "
        "(width, depth, FFN shape, variable width) at a fixed parameter or FLOP budget.",
        epilog="exit codes: 0 done (every trial completed or was stopped by the scheduler); "
        "1 a sweep ran and some of its trials failed; 2 bad input, nothing done; 130 interrupted",
    )
    parser.add_argument("--version", action=Version)
    parser.add_argument("--print-completion", choices=SHELLS, action=PrintCompletion,
                        help="print the shell completion script for SHELL and exit")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, spec in VERBS.items():
        add_flags(subparsers.add_parser(verb, help=spec.help, description=spec.help), spec.arguments)
    return parser


def parse(argv: list[str]) -> object:
    """`argv` parsed (argparse exits 2 on a flag the verb does not take), then every value
    read and checked against its declaration (a UserError names the flag): the verb's
    arguments dataclass (`VERBS[verb].arguments`), what the verb is given. Nothing is run
    or written."""
    parsed = build_parser().parse_args(argv)
    return arguments(VERBS[parsed.verb].arguments, parsed)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and not argv[0].startswith("-") and argv[0] not in VERBS:  # argparse lists, never guesses
        print(f"shapesweep: error: unknown verb {argv[0]!r} ({did_you_mean(argv[0], VERBS)}verbs: "
              f"{', '.join(VERBS)})", file=sys.stderr)
        return 2
    parsed = build_parser().parse_args(argv)
    # Lazy: the driver's signal handling imports Ray, which `--help` and a refused flag never pay.
    from shapesweep.sweep.driver.ray_session import terminate_as_interrupt

    try:
        with terminate_as_interrupt():  # SIGTERM, SIGHUP: as Ctrl-C, from the verb's start
            verb = VERBS[parsed.verb]
            args: object = arguments(verb.arguments, parsed)  # every flag, read and checked, before any work
            check_store_args(args)  # --root and --storage, for every verb that has them
            run = getattr(importlib.import_module(verb.module), verb.function)  # the verb table's laziness
            return int(run(args) or 0)
    except UserError as error:  # its text may hold what the user wrote: escaped, one line
        print(f"shapesweep {parsed.verb}: error: {printable(error, one_line=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(f"shapesweep {parsed.verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader has gone (`| head`): what it read is what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry() -> None:
    """The `shapesweep` command."""
    quick_exit(main())


def quick_exit(code: int) -> NoReturn:
    """End the process once a verb has returned: every result is filed and every file closed
    by then, and the exit handlers (Ray's, logging's) still run here. What is skipped is
    Python tearing down every module the verb imported (Ray, Tune, torch, pandas), half a
    second of every sweep's end. A thread still working (none of ours is) gets Python's own
    exit, which waits for it."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone (`| head`), or closed
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
