"""Every committed study report is what `shapesweep study report` writes from the committed
store today (issue 56): regenerated from a copy of the checkout's studies and stores, it must
equal the committed report.md byte for byte, so a change to the code, a store or a study.yaml
that moves a table fails here until the report is regenerated and committed with it. A report
on incomplete data lists the missing trials and states no decision. No training: the
reports read the stores (and plan the studies' spaces) only."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from shapesweep.results.study_spec import REPORT_FILE, STUDY_FILE, study_names
from shapesweep.sweep.cli.main import main as shapesweep

REPO = Path(__file__).resolve().parents[1]
STUDIES = REPO / "studies"
STORES = Path("benchmarks") / "data"  # committed stores a study may read in place
NO_DECISION = "**no decision**"


def checkout_copy(tmp_path: Path) -> Path:
    """studies/ and benchmarks/data/ copied with their layout (a study names its store
    relative to its folder), so a read's lock files stay out of the checkout."""
    shutil.copytree(STUDIES, tmp_path / "studies", symlinks=True)
    shutil.copytree(REPO / STORES, tmp_path / STORES, symlinks=True)
    return tmp_path / "studies"


def regenerate(studies: Path, name: str) -> str:
    assert shapesweep(["study", "report", name, "--studies", str(studies)]) == 0
    return (studies / name / REPORT_FILE).read_text(encoding="utf-8")


def decisions(report: str) -> list[str]:
    return [line for line in report.split("## Decision", 1)[1].splitlines() if line.startswith("- ")]


@pytest.mark.parametrize("name", study_names(STUDIES))
def test_committed_report_has_no_drift(tmp_path, name):
    committed = STUDIES / name / REPORT_FILE
    if not committed.is_file():
        pytest.skip(f"studies/{name} has no committed {REPORT_FILE} yet")
    report = regenerate(checkout_copy(tmp_path), name)
    assert report == committed.read_text(encoding="utf-8"), (
        f"studies/{name}/{REPORT_FILE} differs from what `shapesweep study report {name}` writes from "
        "the committed store: regenerate it and commit it")
    assert str(tmp_path) not in report and str(REPO) not in report  # no path of a machine
    ruled = decisions(report)
    assert ruled, "a report states its decision rules' outcomes"
    if "**Incomplete: no decision.**" in report.split("## Decision", 1)[0] and "kind: lr-fit" not in (
            STUDIES / name / STUDY_FILE).read_text():
        missing = report.split("Missing trials:", 1)[1].split("##", 1)[0]
        assert re.search(r"^- \S+/.+: seeds ", missing, re.M), "the missing trials are listed"
        assert all(NO_DECISION in line for line in ruled)


def test_an_lr_fit_short_of_a_seed_lists_it_and_decides_nothing(tmp_path):
    """The lr-transfer study asking for a seed its stores do not hold: each of its fits lists
    every shape's missing trials and states no decision; the lost axes never decide."""
    studies = checkout_copy(tmp_path)
    path = studies / "lr-transfer" / STUDY_FILE
    doc = yaml.safe_load(path.read_text())
    doc["fits"] = [{**fit, "seeds": [0, 1, 2, 3]} for fit in doc["fits"]]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    report = regenerate(studies, "lr-transfer")
    assert report.count("**Incomplete: no decision.** Missing trials:") == len(doc["fits"])
    assert "- lr-transfer-study-depth-tp6/k8: 24 of 32 (lr, seed) trials, seeds 3 absent" in report
    assert "- lr-transfer-study-vformer/baseline: 24 of 32 (lr, seed) trials, seeds 3 absent" in report
    assert all(NO_DECISION in line for line in decisions(report))
