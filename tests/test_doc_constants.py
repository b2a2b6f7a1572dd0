"""The docs quote the planning margin as the constant holds it (issue 55: memory.md said 75% in
one place and used `MARGIN = 0.80` elsewhere): every sentence that gives `memory.MARGIN` a
share gives the constant's."""

from __future__ import annotations

import re
from pathlib import Path

from shapesweep.sweep.cli.main import main
from shapesweep.trainers import gpu_figures
from shapesweep.trainers.memory import MARGIN

ROOT = Path(__file__).resolve().parents[1]
# "plans on 80% of what it may use (`memory.MARGIN`", "`MARGIN` is now 80%", "`memory.MARGIN` (80%)"
QUOTED = [re.compile(r"(\d+)% of (?:what it may use|its share)\s*\(`memory\.MARGIN`"),
          re.compile(r"`(?:memory\.)?MARGIN` is now (\d+)%"),
          re.compile(r"`memory\.MARGIN` \((\d+)%\)")]


def test_each_quoted_margin_is_the_constant():
    found = []
    for page in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        text = " ".join(page.read_text(encoding="utf-8").split())
        found += [(page.name, int(m[1])) for pattern in QUOTED for m in pattern.finditer(text)]
    assert len(found) >= 3, found  # memory.md and gpu.md quote it
    assert all(share == round(MARGIN * 100) for _, share in found), (MARGIN, found)


def test_each_quoted_trial_count_is_plans(capsys):
    """A space's trial count the docs quote ("91 trials for `hourglass-ucurve-small`") is what
    `plan SPACE` prints now (issue 55: search-spaces.md quoted a time the space had outgrown)."""
    quoted = {(int(m[1]), m[2]) for page in sorted((ROOT / "docs").glob("*.md"))
              for m in re.finditer(r"(\d+) trials for `([a-z0-9-]+)`",
                                   " ".join(page.read_text(encoding="utf-8").split()))}
    assert quoted
    for count, space in sorted(quoted):
        assert main(["plan", space]) == 0
        assert f"= {count} trials" in capsys.readouterr().out, space


def test_the_gpu_pages_name_the_build_and_device_the_figures_used():
    """README and gpu.md say which torch build and device every GPU figure ran on (the figures
    file's), beside the torch the Makefile pins, so a reader sees what differs."""
    figures = gpu_figures.load()
    builds = {figure["torch"] for figure in figures.values()}
    devices = {figure["device"] for figure in figures.values()}
    pinned = re.search(r"torch==([\d.]+)", (ROOT / "Makefile").read_text(encoding="utf-8"))
    assert pinned
    for page in (ROOT / "README.md", ROOT / "docs" / "gpu.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert all(build in text for build in builds), (page.name, builds)
        assert all(device in text for device in devices), (page.name, devices)
        assert pinned[1] in text, (page.name, pinned[1])
