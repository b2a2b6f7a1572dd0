"""How many paired seeds each unresolved comparison needs to resolve its observed difference
at 80% power: from a sweep's store, or from the per-seed losses in docs/small-sweeps.md.

Run:
  .venv/bin/python benchmarks/seeds_needed.py --doc docs/small-sweeps.md [--current]
  .venv/bin/python benchmarks/seeds_needed.py --root ROOT NAME [NAME ...]

The figure is `shapesweep.results.stats.seeds_for_power`: the smallest n for which a
two-sided paired t-test at 95% rejects zero with probability >= 0.8 when the true mean
difference is the observed one and the paired differences spread by their observed sd
(noncentral t). From the doc, each table row with per-seed losses ("seeds 0 / 1 / 2") is
paired with its table's baseline row (the one whose difference reads "—"; in a table with
a `size` column, the baseline of its size). The recomputed difference and interval are
printed beside the doc's, so a row read wrongly shows. With --root it is `status`'s own
`seeds_for_80pct_power`. Both print a markdown table.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEEDS_COLUMN = re.compile(r"seeds ((?:\d+ / )+\d+)")
BASELINE_MARK = "—"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


OLD_RUN_MARK = "kept for the record"  # the words that introduce a superseded run's table


def doc_comparisons(text: str, current_only: bool = False) -> list[dict]:
    """Every (section, row, baseline row, per-seed differences) the doc's tables hold; a
    table that the text before it says is "kept for the record" (a run the section's newer
    table supersedes) is tagged `old`, and left out with `current_only`."""
    section, rows, out, prose = "", [], [], ""
    for line in [*text.splitlines(), ""]:
        if line.startswith("### "):
            section, prose = line[4:].split(" — ")[0].strip("` "), ""
        if line.startswith("|"):
            rows.append(_cells(line))  # the first row of a table is its header
            continue
        if rows:
            old = OLD_RUN_MARK in " ".join(prose.split())
            if not (old and current_only):
                out += [{**item, "old": old} for item in _table(section, rows)]
            prose = ""
        rows = []
        prose += " " + line
    return out


def _table(section: str, rows: list[list[str]]) -> list[dict]:
    header, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    seeds_at = next((i for i, h in enumerate(header) if SEEDS_COLUMN.search(h)), None)
    delta_at = next((i for i, h in enumerate(header) if h.startswith("Δ")), None)
    if seeds_at is None or delta_at is None:
        return []
    seeds = [int(s) for s in SEEDS_COLUMN.search(header[seeds_at]).group(1).split(" / ")]
    size_at = header.index("size") if "size" in header else None
    values = {i: [float(v.replace("−", "-")) for v in row[seeds_at].split(" / ")] for i, row in enumerate(body)}
    bases = {(row[size_at] if size_at is not None else None): i
             for i, row in enumerate(body) if row[delta_at] == BASELINE_MARK}
    out = []
    for i, row in enumerate(body):
        base = bases.get(row[size_at] if size_at is not None else None)
        if row[delta_at] == BASELINE_MARK or base is None:
            continue
        label = " ".join(c for c in row[:max(1, seeds_at - 1)] if c and c != "—")[:60]
        out.append({"section": section, "row": label, "seeds": seeds, "doc_delta": row[delta_at],
                    "diffs": np.array(values[i]) - np.array(values[base])})
    return out


def from_doc(path: str, current_only: bool = False) -> None:
    from shapesweep.results.stats import paired_rows, seeds_for_power

    items = doc_comparisons(Path(path).read_text(), current_only)
    print("| sweep | comparison | Δ (recomputed) [95% CI] | doc's Δ | sd of differences | verdict | "
          "paired seeds for 80% power |")
    print("|---|---|---|---|---|---|---|")
    for item in items:
        n, mean, sd, low, high = (float(x[0]) for x in paired_rows(item["diffs"][None, :]))
        resolved = low > 0 or high < 0
        needed = "—" if resolved else _count(seeds_for_power(mean, sd))
        verdict = "resolved" if resolved else "within noise"
        section = item["section"] + (" (old run)" if item["old"] else "")
        print(f"| {section} | {item['row']} | {mean:+.3f} [{low:+.3f}, {high:+.3f}] | "
              f"{item['doc_delta']} | {sd:.3f} | {verdict} | {needed} |")


def _count(n: float) -> str:
    return "more than 100,000" if n != n else f"{int(n)}"


def from_store(root: str, names: list[str]) -> None:
    from shapesweep.results.roles import with_seed_roles
    from shapesweep.results.stats import compare
    from shapesweep.results.store import load_trials

    print("| sweep | candidate | Δ [95% CI] | n paired | verdict | paired seeds for 80% power |")
    print("|---|---|---|---|---|---|")
    for name in names:
        trials = with_seed_roles(load_trials(root, [name]), root)
        for row in compare(trials).to_dict("records"):
            if row["verdict"] is None or row["key"] == row["baseline_key"]:
                continue
            needed = row["seeds_for_80pct_power"]
            print(f"| {name} | {row['variant']} {row['key']} | {row['delta_vs_baseline']:+.3f} "
                  f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}] | {row['n_paired']} | {row['verdict']} | "
                  f"{'—' if row['verdict'] != 'within noise' else _count(needed if needed else float('nan'))} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", help="a markdown file with per-seed tables (docs/small-sweeps.md)")
    parser.add_argument("--current", action="store_true",
                        help="with --doc: leave out the tables of runs a newer one supersedes")
    parser.add_argument("--root", help="a results root; give sweep NAMEs")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    if args.doc:
        from_doc(args.doc, args.current)
    if args.root:
        from_store(args.root, args.names)
    if not (args.doc or args.root):
        parser.error("give --doc FILE or --root ROOT NAME...")


if __name__ == "__main__":
    main()
