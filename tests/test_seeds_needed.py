"""benchmarks/seeds_needed.py reads docs/small-sweeps.md's per-seed tables: a table the text
before it says is kept for the record (a superseded run) is tagged old, and `--current`
leaves it out, so the docs' power table is computed from the runs the verdicts rest on."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DOC = """
### `space-a` — paper, Table 1

The new run:

| variant | val loss, seeds 0 / 1 / 2 | Δ vs baseline [95% CI] |
|---|---|---|
| baseline | 1.000 / 1.100 / 1.200 | — |
| other | 1.050 / 1.160 / 1.240 | +0.050 [+0.000, +0.100] |

The old run (one lr for every candidate), kept for the
record:

| variant | val loss, seeds 0 / 1 / 2 | Δ vs baseline [95% CI] |
|---|---|---|
| baseline | 1.000 / 1.100 / 1.200 | — |
| other | 1.300 / 1.100 / 1.400 | +0.167 |

### `space-b` — paper, Table 2

| variant | val loss, seeds 0 / 1 / 2 | Δ vs baseline [95% CI] |
|---|---|---|
| baseline | 2.000 / 2.000 / 2.000 | — |
| other | 2.010 / 2.030 / 2.020 | +0.020 |
"""


def _run(doc: Path, *flags: str) -> list[str]:
    out = subprocess.run([sys.executable, "benchmarks/seeds_needed.py", "--doc", str(doc), *flags],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("| space")]


def test_superseded_tables_are_tagged_and_current_leaves_them_out(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    every = _run(doc)
    assert [row.split(" | ")[0] for row in every] == ["| space-a", "| space-a (old run)", "| space-b"]
    current = _run(doc, "--current")
    assert [row.split(" | ")[0] for row in current] == ["| space-a", "| space-b"]
    # the new run's row is its own table's paired difference (0.05, 0.06, 0.04), not the old one's
    assert "+0.050 [" in current[0] and "+0.020 [" in current[1]
