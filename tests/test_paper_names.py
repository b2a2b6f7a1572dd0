"""The five papers go by their names (docs/papers.md: hourglass-ffn, ffn-chapter, xformer,
simple-gated, hourglass-mlp), never by their seed numbers: "seed" alone means an RNG seed.

Scans the code, the built-in spaces, the docs' spaces and the prose (README.md, docs/*.md):
file names and text."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ["shapesweep", "sweep", "search_spaces", "trainers", "results", "dashboards",
           "benchmarks", "tests", "docs/spaces"]
# "seed" or "seeds", then a space, "_", "-", nothing or a line break, then 000 .. 004
PAPER_NUMBER = re.compile(r"seeds?(?:[ _-]|\s*\n\s*(?:#\s*)?)?00[0-4](?!\d)", re.IGNORECASE)


def _files() -> list[Path]:
    return sorted([*(path for folder in FOLDERS for pattern in ("*.py", "*.yaml")
                     for path in (ROOT / folder).rglob(pattern)),
                   ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def test_the_scan_covers_the_code_and_spaces():
    names = {path.relative_to(ROOT).as_posix() for path in _files()}
    assert {"trainers/analysis.py", "dashboards/figures.py", "tests/test_paper_names.py",
            "search_spaces/builtin/vformer-vs-constant.yaml"} <= names
    assert any(name.startswith("docs/spaces/") for name in names)
    assert {"README.md", "docs/papers.md", "docs/small-sweeps.md"} <= names


def test_no_paper_is_called_by_its_seed_number():
    found = []
    for path in _files():
        relative = path.relative_to(ROOT).as_posix()
        if PAPER_NUMBER.search(relative):
            found.append(f"{relative}: file name")
        text = path.read_text(encoding="utf-8")
        for match in PAPER_NUMBER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{relative}:{line}: {match.group(0)!r}")
    assert not found, "name the paper (docs/papers.md), not its seed number:\n" + "\n".join(found)


def test_the_pattern_tells_papers_from_rng_seeds():
    # each reference is split in two here, so that this file passes its own scan
    for word, number in [("seed ", "002"), ("Seed ", "000's"), ("seed_", "004"), ("seed", "003"),
                         ("seeds ", "001"), ("Seed\n  ", "002"), ("# seed\n# ", "000")]:
        assert PAPER_NUMBER.search(word + number), word + number
    for rng in ["seed 0", "seeds: [0, 1, 2]", "seed 100", "choice_seeds: [100]", "seed 42",
                "seed " + "0001", "xformer Fig. 7"]:
        assert not PAPER_NUMBER.search(rng), rng
