"""Every `shapesweep run ...` line in a code block of README.md and docs/*.md runs as shown
under `--dry-run` (issue 55): exit 0, the plan and its price printed, nothing written, no Ray
started. In-process (`cli.main`).

What the test adds to a line, and why: `--dry-run`; `--root` in a temporary folder where the
line names a local one or none (a URL root, such as `s3://`, is kept: a dry run contacts no
store); and, for a line whose trials take GPUs, the 8 H100s the docs' GPU sections describe
(`--gpus 8 --gpu h100`: this machine may have none). A doc's placeholder for any space
(`SPACE`, `NAME`) is given a built-in one.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from shapesweep.sweep.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^\s*(```|~~~)")
PLACEHOLDERS = {"SPACE": "hourglass-ucurve-113m", "NAME": "hourglass-ucurve-small"}
GPU_FLAGS = ("--gpus-per-trial", "--gpus-per-worker")


def run_lines() -> list[tuple[str, int, str]]:
    """(file, line number, command) for each `shapesweep run` in a fenced code block; a line
    continued with a backslash, or a YAML folded scalar's next lines of flags, joined."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        inside = False
        for number, line in enumerate(lines, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            start = line.find("shapesweep run ")
            if not inside or start < 0 or line[:start].strip() not in ("", "$", "entrypoint: >-"):
                continue
            command, follow = line[start:], number
            while command.rstrip().endswith("\\") or (
                    follow < len(lines) and lines[follow].strip().startswith("--")):
                command = command.rstrip().removesuffix("\\") + " " + lines[follow].strip()
                follow += 1
            found.append((str(path.relative_to(REPO)), number, command))
    return found


COMMANDS = run_lines()


def dry_run_argv(command: str, root: Path) -> list[str]:
    """The line's arguments, as the module docstring says."""
    words = [PLACEHOLDERS.get(word, word) for word in shlex.split(command, comments=True)[1:]]
    if "--root" in words:
        at = words.index("--root") + 1
        if "://" not in words[at]:
            words[at] = str(root)
    else:
        words += ["--root", str(root)]
    takes_gpus = any(words[i + 1] != "0" for i, word in enumerate(words[:-1]) if word in GPU_FLAGS)
    if takes_gpus and "--gpus" not in words:
        words += ["--gpus", "8"] + ([] if "--gpu" in words else ["--gpu", "h100"])
    return [*words, "--dry-run"]


def test_the_docs_have_run_lines():
    """The extraction finds the lines it is for (a changed fence style would find none)."""
    files = {file for file, _, _ in COMMANDS}
    assert {"README.md", "docs/cluster.md", "docs/gpu.md"} <= files
    assert len(COMMANDS) >= 8


@pytest.mark.parametrize("file,number,command", COMMANDS,
                         ids=[f"{file}:{number}" for file, number, _ in COMMANDS])
def test_every_documented_run_passes_its_dry_run(file, number, command, tmp_path, monkeypatch,
                                                 capsys):
    work, root = tmp_path / "cwd", tmp_path / "root"
    work.mkdir()
    monkeypatch.chdir(work)  # a relative root, or the default one, would land here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code = cli.main(dry_run_argv(command, root))
    out, err = capsys.readouterr()
    assert code == 0, f"{file}:{number}: {command}\n{err}"
    assert "dry run: sweep" in out and "price:" in out
    assert not root.exists() and not any(work.iterdir())  # nothing written
