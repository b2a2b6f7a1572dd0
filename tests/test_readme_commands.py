"""The README's commands run as written after its first (`make demo`, which makes `.venv`):
a code block that calls a bare `shapesweep` first puts the venv on PATH (issue 55: the
"typical session" did not), and every file a line names is one an earlier line made."""

from __future__ import annotations

import re
from pathlib import Path

from shapesweep.sweep.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(?:bash|sh|console)?\n(.*?)^```", re.S | re.M)


def _blocks() -> list[list[str]]:
    return [[line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
            for block in BLOCK.findall(README.read_text(encoding="utf-8"))]


def test_a_bare_shapesweep_comes_after_the_venv_is_activated():
    bare = 0
    for lines in _blocks():
        for number, line in enumerate(lines):
            if line.split()[0] == "shapesweep":
                bare += 1
                assert any(earlier.startswith(("source .venv/bin/activate", ". .venv/bin/activate"))
                           for earlier in lines[:number]), line
            assert "<" not in line, f"a placeholder, not a command: {line}"
    assert bare > 0  # the typical session is still there to check


def test_the_typical_sessions_plan_runs(capsys):
    plans = [line.split()[2:] for lines in _blocks() for line in lines if line.startswith("shapesweep plan ")]
    assert plans
    for args in plans:
        assert main(["plan", *args]) == 0
    assert "trials" in capsys.readouterr().out
