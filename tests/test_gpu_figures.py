"""Every GPU figure README.md and the docs quote is the figures file's (trainers/gpu-figures.json,
written by benchmarks/bench_gpu.py), each page names the device and torch build of the figures
it quotes and where their command is, and the memory margin the docs state is the code's.
Drift in either direction fails: a page edited by hand, or the file rewritten by a new run
without `python -m shapesweep.trainers.gpu_figures README.md docs/*.md`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shapesweep.trainers import gpu_figures, memory

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/gpu.md", "docs/memory.md", "docs/benchmarks.md")
FIELDS = ("value", "format", "unit", "what", "device", "torch", "cuda", "command", "date",
          "provenance")
HEADING = re.compile(r"^#{1,2} ", re.M)  # a page's parts: its `#` and `##` sections


def sections(text: str) -> list[tuple[int, str]]:
    """(start offset, text) of each `##` section of a page, its subsections included."""
    starts = [0, *(m.start() for m in HEADING.finditer(text)), len(text)]
    return [(a, text[a:b]) for a, b in zip(starts, starts[1:], strict=False)]


def test_the_figures_file_is_complete_and_well_formed():
    data = json.loads(gpu_figures.PATH.read_text(encoding="utf-8"))
    assert data["format"] == gpu_figures.FORMAT
    for key, figure in data["figures"].items():
        missing = [field for field in FIELDS if not figure.get(field) and figure.get(field) != 0]
        assert not missing, f"{key}: missing {missing}"
        assert isinstance(figure["value"], int | float), key
        gpu_figures.quote(figure)  # its format spec formats its value
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", figure["date"]), key
        assert figure["torch"].endswith("+cu" + figure["cuda"].replace(".", "")), key
        assert figure["command"].startswith(("python benchmarks/", "python3 benchmarks/")), key
    for family in ("conventional", "hourglass", "vformer"):  # what `plan` prices with
        key, figure = gpu_figures.mfu(family)
        assert 0 < figure["value"] < 1, key


@pytest.mark.parametrize("page", PAGES)
def test_every_quoted_gpu_figure_is_the_files(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    figures = gpu_figures.load()
    assert not gpu_figures.mismatches(text, figures), gpu_figures.mismatches(text, figures)
    assert gpu_figures.fill(text, figures) == text


def flat(page: str) -> str:
    """A page's text on one line, its indented code blocks joined in."""
    return re.sub(r"\s+", " ", (ROOT / page).read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES)
def test_each_quoted_figure_names_its_device_torch_and_command(page):
    """Each figure's section (up to its `##` heading) names the device and the torch build it
    was measured with, and its command is on the page or in docs/gpu.md."""
    text = (ROOT / page).read_text(encoding="utf-8")
    figures = gpu_figures.load()
    parts = sections(text)
    for match in gpu_figures.TAG.finditer(text):
        figure = figures[match["key"]]
        section = next(body for start, body in reversed(parts) if start <= match.start())
        assert str(figure["device"]).split()[-1] in section, (page, match["key"], "device")
        assert figure["torch"] in section, (page, match["key"], figure["torch"])
        if "not recorded" not in figure["provenance"]:
            command = figure["command"].split(" (")[0]
            assert command in flat(page) or command in flat("docs/gpu.md"), (page, match["key"])


def test_the_margin_the_docs_state_is_the_codes():
    """memory.MARGIN wherever memory.md and gpu.md say what a trial plans on now."""
    for page in ("docs/memory.md", "docs/gpu.md"):
        text = (ROOT / page).read_text(encoding="utf-8").replace("\n", " ")
        stated = re.findall(r"(?:plans on|fits `memory.MARGIN` \(|`MARGIN` is now) (\d+)%", text)
        assert stated, page
        assert {int(n) for n in stated} == {round(memory.MARGIN * 100)}, (page, stated)
        assert "has not run on a GPU" in text or "not yet run on a GPU" in text, page


def test_a_page_edited_by_hand_fails():
    """A README figure changed by hand (as 39.8% stood where the file had 40.2%) is named."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = next(gpu_figures.TAG.finditer(readme))
    wrong = "1" + first["text"]
    stale = readme[:first.start()] + wrong + readme[first.start() + len(first["text"]):]
    assert gpu_figures.mismatches(stale, gpu_figures.load()) == [
        f"{first['key']}: quoted {wrong}, gpu-figures.json has {first['text']}"]


def test_a_new_run_is_written_into_the_pages(tmp_path):
    """After a new run changes a figure, the check names it and the rewrite brings the page
    back in line, each tag in its own format."""
    path = tmp_path / "figures.json"
    gpu_figures.record({"mfu_x": {"value": 0.402, "format": ".1%", "unit": "MFU"},
                        "other": {"value": 3.0, "format": ".1f", "unit": "s"}}, path)
    page = "trains at 40.2%<!--gpu:mfu_x--> MFU (0.40<!--gpu:mfu_x:.2f-->), 3.0<!--gpu:other--> s"
    assert not gpu_figures.mismatches(page, gpu_figures.load(path))
    gpu_figures.record({"mfu_x": {"value": 0.415, "format": ".1%", "unit": "MFU"}}, path)
    figures = gpu_figures.load(path)
    assert set(figures) == {"mfu_x", "other"}  # a run keeps the figures it did not measure
    assert gpu_figures.mismatches(page, figures) == [
        "mfu_x: quoted 40.2%, gpu-figures.json has 41.5%",
        "mfu_x: quoted 0.40, gpu-figures.json has 0.41"]
    filled = gpu_figures.fill(page, figures)
    assert filled == "trains at 41.5%<!--gpu:mfu_x--> MFU (0.41<!--gpu:mfu_x:.2f-->), 3.0<!--gpu:other--> s"
    assert not gpu_figures.mismatches(filled, figures)
    assert gpu_figures.mismatches("1%<!--gpu:nope-->", figures) == ["nope: not in gpu-figures.json"]
