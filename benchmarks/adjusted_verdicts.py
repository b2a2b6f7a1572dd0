"""The docs' verdicts recomputed with family-wise control, from the per-seed losses in their
tables (docs/small-sweeps.md): each table is one sweep, and its comparisons form two families,
as `shapesweep status` forms them (shapesweep.results.multiplicity):

- primary: each row against its table's baseline row (the one whose difference reads "—";
  in a table with a `size` column, the baseline of its size);
- exploratory: every pair of rows.

Run:
  .venv/bin/python benchmarks/adjusted_verdicts.py --doc docs/small-sweeps.md [--adjust holm|bh|none]

Prints, per table, the comparisons resolved at raw 95% in either family with their raw
interval, raw and adjusted p-value, adjusted interval and adjusted verdict, and the counts
(resolved raw / surviving adjustment). A table that the text before it says is "kept for the
record" (superseded) is left out. The statistics are `shapesweep.results.stats.paired_rows`
and `shapesweep.results.multiplicity`: the same code as `status`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from seeds_needed import BASELINE_MARK, OLD_RUN_MARK, SEEDS_COLUMN, _cells  # noqa: E402


def doc_tables(text: str) -> list[dict]:
    """Every current table with per-seed values: {section, labels, values (rows x seeds),
    base_of (row -> its baseline row, or None)}."""
    section, rows, out, prose = "", [], [], ""
    for line in [*text.splitlines(), ""]:
        if line.startswith("### "):
            section, prose = line[4:].split(" — ")[0].strip("` "), ""
        if line.startswith("|"):
            rows.append(_cells(line))
            continue
        if rows and OLD_RUN_MARK not in " ".join(prose.split()):
            table = _table(section, rows)
            if table:
                out.append(table)
        if rows:
            prose = ""
        rows = []
        prose += " " + line
    return out


def _table(section: str, rows: list[list[str]]) -> dict | None:
    header, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    seeds_at = next((i for i, h in enumerate(header) if SEEDS_COLUMN.search(h)), None)
    delta_at = next((i for i, h in enumerate(header) if h.startswith("Δ")), None)
    if seeds_at is None or delta_at is None:
        return None
    size_at = header.index("size") if "size" in header else None
    values = np.array([[float(v.replace("−", "-")) for v in row[seeds_at].split(" / ")] for row in body])
    bases = {(row[size_at] if size_at is not None else None): i
             for i, row in enumerate(body) if row[delta_at] == BASELINE_MARK}
    base_of = [None if row[delta_at] == BASELINE_MARK else bases.get(row[size_at] if size_at is not None else None)
               for row in body]
    labels = [" ".join(c for c in row[:max(1, seeds_at - 1)] if c and c != "—")[:48] for row in body]
    return {"section": section, "labels": labels, "values": values, "base_of": base_of}


def family(diff: np.ndarray, adjust: str) -> dict:
    """Raw and adjusted statistics of one family of paired differences (rows x seeds)."""
    from shapesweep.results.multiplicity import adjusted_p, interval_confidence, paired_p
    from shapesweep.results.stats import paired_rows

    n, mean, sd, low, high = paired_rows(diff)
    p = paired_p(n, mean, sd)
    level = interval_confidence(p, adjust)
    _, _, _, low_adj, high_adj = paired_rows(diff, level)
    return {"mean": mean, "low": low, "high": high, "p": p, "p_adj": adjusted_p(p, adjust),
            "level": level, "low_adj": low_adj, "high_adj": high_adj}


def recompute(table: dict, adjust: str) -> dict:
    """The table's primary and exploratory families (`family` each), with their row pairs."""
    values, base_of = table["values"], table["base_of"]
    primary = [(i, b) for i, b in enumerate(base_of) if b is not None]
    pairs = [(i, j) for i in range(len(values)) for j in range(i + 1, len(values))]
    out = {}
    for name, members in (("primary", primary), ("exploratory", pairs)):
        if members:
            first, second = (np.array(side) for side in zip(*members, strict=True))
            out[name] = {"pairs": members, **family(values[first] - values[second], adjust)}
    return out


def print_markdown(tables: list[dict], adjust: str) -> None:
    from shapesweep.results.multiplicity import ALPHA

    print(f"| sweep | family | comparison | Δ [raw 95% CI] | p | {adjust} p | adjusted CI | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for table in tables:
        labels = table["labels"]
        for name, f in recompute(table, adjust).items():
            resolved = (f["low"] > 0) | (f["high"] < 0)
            survive = f["p_adj"] <= ALPHA
            for k in np.flatnonzero(resolved):
                i, j = f["pairs"][k]
                verdict = "resolved" if survive[k] else "within noise after adjustment"
                print(f"| {table['section']} | {name} ({len(f['pairs'])}) | {labels[i]} − {labels[j]} | "
                      f"{f['mean'][k]:+.3f} [{f['low'][k]:+.3f}, {f['high'][k]:+.3f}] | {f['p'][k]:.3g} | "
                      f"{f['p_adj'][k]:.3g} | [{f['low_adj'][k]:+.3f}, {f['high_adj'][k]:+.3f}] "
                      f"({f['level']:.1%}) | {verdict} |")
            print(f"| {table['section']} | {name} ({len(f['pairs'])}) | **{int(resolved.sum())} resolved raw, "
                  f"{int((survive & resolved).sum())} survive** | | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", required=True, help="a markdown file with per-seed tables")
    parser.add_argument("--adjust", default="holm", help="holm (default), bh or none")
    args = parser.parse_args()
    from shapesweep.results.multiplicity import check_method

    print_markdown(doc_tables(Path(args.doc).read_text()), check_method(args.adjust))


if __name__ == "__main__":
    main()
