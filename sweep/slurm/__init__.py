"""shapesweep on SLURM: the batch script (`shapesweep.sbatch`, shipped with the package) and
the two steps it runs through Python: the sweep command of a job's start (`driver`) and the
wait for its Ray nodes (`nodes`). `python -m shapesweep.sweep.slurm` prints the script's path
(docs/cluster.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from shapesweep.common import UserError, printable

SCRIPT_NAME = "shapesweep.sbatch"


def script_path() -> Path:
    """The batch script installed with the package, to copy or give `sbatch` as it is."""
    return Path(__file__).resolve().parent / SCRIPT_NAME


def step_main(step: Callable[[list[str]], None], usage: str) -> int:
    """A step of the script from its command line: a UserError (or arguments that do not
    fit `usage`) is one line on stderr and exit 2, as the CLI's."""
    try:
        step(sys.argv[1:])
    except UserError as error:
        print(f"{SCRIPT_NAME}: error: {printable(error, one_line=True)}", file=sys.stderr)
        return 2
    except (ValueError, IndexError):
        print(f"{SCRIPT_NAME}: error: usage: {usage}", file=sys.stderr)
        return 2
    return 0
