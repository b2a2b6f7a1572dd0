"""Output piped to a file or a pager is not cut to rich's 80 columns (issue 55): `spaces` keeps
every description whole and `status` keeps a candidate's row on one line, unless `COLUMNS`
asks for a width, which they still fit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shapesweep.search_spaces.space import list_builtin

CLI = [sys.executable, "-m", "shapesweep.sweep.cli"]


def _piped(args: list[str], columns: str | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run([*CLI, *args], capture_output=True,  # stdout a pipe, as `| less` makes it
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_spaces_piped_keeps_each_description_whole_and_columns_narrows_it():
    lines = _piped(["spaces"])
    assert not any("…" in line for line in lines)
    for name, description in list_builtin():
        row = next(line for line in lines if line.startswith(name + " "))
        assert description in row, name
    assert max(len(line.rstrip()) for line in lines) > 80  # as long as its text, not 80
    narrow = _piped(["spaces"], columns="60")
    assert max(len(line) for line in narrow) <= 60
    assert any("…" in line for line in narrow)


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_status_piped_is_not_wrapped_and_columns_narrows_it(synthetic_store):
    wide = _piped(["status", "ucurve", "--root", synthetic_store])
    narrow = _piped(["status", "ucurve", "--root", synthetic_store], columns="60")

    def table(lines: list[str]) -> list[str]:
        return [line for line in lines if line[:1] in "┏┃┡│└"]

    assert max(len(line) for line in table(narrow)) <= 60
    assert max(len(line) for line in table(wide)) > 80
    # piped, each candidate is one line; at 60 columns its cells wrap onto lines of their own
    def continued(lines: list[str]) -> int:
        return sum(1 for line in table(lines) if line.startswith("│") and not line.split("│")[1].strip())

    assert continued(wide) == 0
    assert continued(narrow) > 0
