"""The project's GPU measurements, kept in one file that every document quotes from.

`gpu-figures.json`, beside this module (installed with the package), is written by
`benchmarks/bench_gpu.py --figures` and read by `plan` (measured MFU per family), by the docs
site's hook (`mkdocs_hooks.py` fills each quoted figure from it) and by
`tests/test_gpu_figures.py` (each figure README.md, docs/gpu.md and docs/memory.md quote
equals the file's). Its format:

    {"format": 1,
     "figures": {KEY: {"value": 0.402, "format": ".1%", "unit": "MFU",
                       "what": "what was measured, in words",
                       "family": "conventional",          # MFU figures: the model family
                       "device": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda": "13.0",
                       "command": "python benchmarks/bench_gpu.py --items baseline ...",
                       "date": "2026-11-27",
                       "provenance": "measured by bench_gpu.py" or how it was recovered}}}

`value` is a plain number (ratios as fractions, memory in GiB, time in seconds); `format` is
the Python format spec a document prints it with. A document quotes a figure as the number
followed by a tag, `40.2%<!--gpu:mfu_113m_baseline-->`, or `<!--gpu:KEY:.2f-->` for another
spec; HTML comments show on neither GitHub nor the site. After a new run,
`python -m shapesweep.trainers.gpu_figures README.md docs/gpu.md docs/memory.md` rewrites
every quoted number from the file.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PATH = Path(__file__).with_name("gpu-figures.json")
FORMAT = 1
# A quoted number (optionally a percent) directly followed by its tag; a hyphen after a word
# or a tag is a range's (0.6-1.2), not a minus.
TAG = re.compile(r"(?P<text>(?:(?<![\w>])-)?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?)<!--gpu:(?P<key>\w+)(?::(?P<spec>[^>]+?))?-->")

Figure = dict[str, object]


def load(path: Path = PATH) -> dict[str, Figure]:
    """Every figure by its key."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["figures"]


def quote(figure: Figure, spec: str | None = None) -> str:
    """The figure as a document prints it."""
    return format(figure["value"], spec or str(figure["format"]))


def mfu(family: str, path: Path = PATH) -> tuple[str, Figure] | None:
    """(key, figure) of the first measured compiled MFU of a model family, or None."""
    return next(((key, figure) for key, figure in load(path).items()
                 if figure.get("unit") == "MFU" and figure.get("family") == family), None)


def mismatches(text: str, figures: dict[str, Figure]) -> list[str]:
    """Each tag whose quoted number is not the file's, or whose key the file lacks."""
    out = []
    for match in TAG.finditer(text):
        key, spec = match["key"], match["spec"]
        if key not in figures:
            out.append(f"{key}: not in {PATH.name}")
        elif match["text"] != quote(figures[key], spec):
            out.append(f"{key}: quoted {match['text']}, {PATH.name} has "
                       f"{quote(figures[key], spec)}")
    return out


def fill(text: str, figures: dict[str, Figure]) -> str:
    """The text with each tagged number rewritten from the file (unknown keys left)."""
    def one(match: re.Match) -> str:
        figure = figures.get(match["key"])
        return match[0] if figure is None else match[0].replace(
            match["text"], quote(figure, match["spec"]), 1)
    return TAG.sub(one, text)


def record(updates: dict[str, Figure], path: Path = PATH) -> None:
    """Merge measured figures into the file: same keys replaced, the others kept."""
    figures = load(path) if path.exists() else {}
    figures.update(updates)
    path.write_text(json.dumps({"format": FORMAT, "figures": figures}, indent=1,
                               ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Rewrite the tagged numbers of the given Markdown files from the figures file."""
    figures = load()
    for name in argv if argv is not None else sys.argv[1:]:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        unknown = [line for line in mismatches(text, figures) if "not in" in line]
        if unknown:
            print(f"{name}: {unknown[0]}", file=sys.stderr)
            return 2
        path.write_text(fill(text, figures), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
