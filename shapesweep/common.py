"""What every part shares: the one error type users see (exit code 2, one line naming file,
key and problem), how a message suggests the name meant (`did_you_mean`), how it names the
`shapesweep` command to run next, how every output writes a count (`human`) and a time
span (`duration`), how text the user or the store supplies reaches a terminal
(`printable`, `markup_safe`), how a setting lives in the environment for one block only
(`environment`), and whether a process of this host is alive (`pid_alive`)."""

import contextlib
import difflib
import math
import os
import re
from collections.abc import Iterator

DEFAULT_ROOT = "./sweeps"  # where sweeps go unless --root says otherwise
# A sweep trial saves a checkpoint at its first evaluation this many seconds after its last
# (`run --checkpoint-every`; shapesweep.search_spaces.cadence reads it): a lost worker costs
# this much training and an evaluation interval at most, and a trial shorter than this pays
# no saves (on 2 CPU cores, a save and its report cost a 16-step trial 0.2 s of its 0.4 s).
CHECKPOINT_EVERY_S = 60.0


class UserError(Exception):
    """Bad input from a user: printed as one line `file: key: problem`, exit code 2."""

    def __init__(self, problem: str, file: str | None = None, key: str | None = None):
        self.file, self.key, self.problem = file, key, problem
        super().__init__(": ".join(str(p) for p in (file, key, problem) if p))


# C0 controls but tab and newline, DEL, C1 controls, and lone surrogates (no encoding writes them)
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNPRINTABLE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")  # newline too


def printable(text: object, one_line: bool = False) -> str:
    """`text` as it may reach a terminal: each control character and lone surrogate written
    as its escape (`\\x1b`, `\\ud800`), so a name, key or error the user or the store supplies
    never retitles, clears or moves about the terminal, nor fails to print. `one_line`: a
    newline is escaped too (an error line stays one line)."""
    pattern = _UNPRINTABLE_LINE if one_line else _UNPRINTABLE
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def markup_safe(text: object) -> str:
    """`printable(text)` for a rich string that holds markup of its own: `[bold]` in a name is
    shown as written, never read as a style."""
    from rich.markup import escape

    return escape(printable(text))


PIPED_WIDTH = 1000  # a pipe or a file has no width: lines are as long as their text, up to this


def terminal_console(**settings):
    """A rich Console (`settings` as rich takes them) that writes every string it renders
    through `printable`: a table cell, a line or the live box holding text from a space, the
    store or an error never drives the terminal. Rich's own styles are not text: they stay.
    Output to a pipe or a file is not cut to rich's 80 columns (a table as wide as its cells,
    a line whole) unless `COLUMNS` or `width=` gives a width."""
    from rich.console import Console

    class PrintableConsole(Console):
        def render_str(self, text: str, **options):
            return super().render_str(printable(text), **options)

    console = PrintableConsole(**settings)
    if settings.get("width") is None and not os.environ.get("COLUMNS") and not console.is_terminal:
        console.width = PIPED_WIDTH
    return console


def did_you_mean(word: object, choices) -> str:
    """`did you mean 'd_model'? ` for the choice closest to a mistyped `word` (difflib), else ''."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def command_name() -> str:
    """How to call shapesweep again, as a line to copy: `shapesweep` where that is this very
    command on PATH, else its full path (a venv not activated)."""
    import shutil
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("shapesweep")
    on_path = shutil.which("shapesweep")
    return "shapesweep" if on_path and Path(on_path).resolve() == script.resolve() else str(script)


def resume_command(name: str, root: str) -> str:
    """The command that finishes sweep `name` of `root`, as a line to copy."""
    import shlex

    return f"{command_name()} resume {shlex.quote(name)} --root {shlex.quote(root)}"


def duration(seconds: float | None) -> str:
    """`1h05m`, `4m10s`, `12s`; `-` when unknown (progress, status, train)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def human(n: float | None, digits: int = 3) -> str:
    """1234567 -> '1.23M': SI prefixes (K, M, G, T, P, E), the same in tables, labels, hover
    text and messages; `–` when unknown."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "–"
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{digits}g}{unit}"
    return f"{n:.{digits}g}"


def plain(value):
    """A pandas/numpy scalar as plain Python (NaN and NA -> None): what JSON and tables print."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    try:
        if value != value:  # NaN
            return None
    except (TypeError, ValueError):
        return None
    return value


def require(modules: tuple[str, ...], install: str, key: str) -> None:
    """One line naming how to install the first of `modules` that is missing (optional extras)."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UserError(f"needs {error.name or module} ({install})", key=key) from None


def check_output(path, key: str, folder: bool) -> None:
    """Refuse, before any work, an output that cannot be written there: a folder where a file
    is wanted (or the reverse), a file where a folder on the way should be, or a folder this
    user cannot write in. What only creating it can tell (`/proc/self/x`) is `make_folder`'s."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir() and not folder:
        raise UserError("is a folder: give the file to write (e.g. FOLDER/report.html)",
                        file=str(path), key=key)
    if path.exists() and not path.is_dir() and folder:
        raise UserError("is a file, not a folder", file=str(path), key=key)
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{parent} is a file, not a folder", file=str(path), key=key)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write in {parent} (permission denied)", file=str(path), key=key)


def make_folder(path, key: str) -> None:
    """`path` made with its parents; one line where the system refuses it."""
    from pathlib import Path

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create the folder: {error.strerror or error}", file=str(path),
                        key=key) from None


def is_tty(stream) -> bool:
    """Whether `stream` is a terminal (a closed or fake stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def csv_cell(value):
    """One encoding of a list in every CSV shapesweep writes: space-separated (`widths`
    `64 96 128`), so a spreadsheet shows it as text and `str.split()` reads it back."""
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return value


def write_csv(rows: list[dict], stream) -> None:
    """`rows` as CSV on `stream`: every key any row has, in first-seen order; lists by `csv_cell`."""
    import csv

    columns = list(dict.fromkeys(k for row in rows for k in row)) or ["key"]
    writer = csv.DictWriter(stream, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in os.environ for the block; every name they set is put back as it was
    (or removed) after it, whatever the block raised."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host is alive (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
