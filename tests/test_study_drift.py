"""Every committed study report is what `shapesweep study report` writes from the committed
store today (issue 56): regenerated from a copy of the checkout's studies and stores, it must
equal the committed report.md byte for byte, so a change to the code, a store or a study.yaml
that moves a table fails here until the report is regenerated and committed with it. A report
on incomplete data lists the missing trials and states no decision. So with the docs: every
study include of README.md and docs/ (shapesweep.results.study_docs) is what `shapesweep
study docs` writes from the committed reports, and a study not run or incomplete says so and
decides nothing. No training: the reports read the stores (and plan the studies' spaces) only."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from shapesweep.results.study_docs import INCLUDE, pages, section
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


def docs_copy(tmp_path: Path) -> Path:
    """The checkout's studies, stores, README.md and docs/ copied: `study docs` rewrites the copy."""
    studies = checkout_copy(tmp_path)
    shutil.copy2(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    return studies


def test_committed_docs_includes_have_no_drift(tmp_path, capsys):
    studies = docs_copy(tmp_path)
    assert shapesweep(["study", "docs", "--studies", str(studies)]) == 0
    assert capsys.readouterr().out.endswith(" pages rewritten\n")
    drifted = [page.name for page in pages(REPO)
               if (tmp_path / page.relative_to(REPO)).read_text(encoding="utf-8") != page.read_text(encoding="utf-8")]
    assert not drifted, (f"the study includes of {', '.join(drifted)} differ from what `shapesweep study docs` "
                         "writes from the committed reports: regenerate them and commit them")
    found = [(m["name"], m["section"], m["body"]) for page in pages(REPO)
             for m in INCLUDE.finditer(page.read_text(encoding="utf-8"))]
    table = next(body for name, part, body in found if (name, part) == ("*", "table"))
    assert all(f"| `{name}` |" in table for name in study_names(STUDIES)), "the table lists every study"
    decided = {name for name, part, _ in found if part == "decision"}
    assert decided == set(study_names(STUDIES)), "every study's decision is stated once in the docs"
    assert all(str(REPO) not in body and str(tmp_path) not in body for _, _, body in found)


def test_a_study_not_run_or_incomplete_decides_nothing_in_the_docs(tmp_path):
    """A study with no trial says `not run yet`, one short of a trial says `incomplete`; neither
    states an outcome, in its decision or in the table."""
    studies = checkout_copy(tmp_path)
    shutil.copytree(STUDIES / "hourglass-ffn-ucurve", studies / "pending",
                    ignore=shutil.ignore_patterns("store", REPORT_FILE))
    assert "| `pending` | hourglass-ffn (Fig. 4), small reproduction | - | - | no report yet |" in section(
        studies, "*", "table")
    regenerate(studies, "pending")
    pending = section(studies, "pending", "decision")
    assert "(seeds 0-2; 0 of 91 planned trials): not run yet; no decision on its 3 rules" in " ".join(pending.split())
    assert "| `pending` | hourglass-ffn (Fig. 4), small reproduction | 0 of 91 |" in section(studies, "*", "table")
    report = studies / "adaptive-seeds" / REPORT_FILE
    text = report.read_text(encoding="utf-8")
    data = text.split("## Data\n", 1)[1].split("\n## ", 1)[0]
    short = text.replace(data, "\n**Incomplete: no decision.** Missing trials:\n\n- fixed-6/l1: seeds 5 (pending)\n\n")
    report.write_text(short.split("## Decision")[0] + "## Decision\n\n- rule: **no decision** (data incomplete)\n")
    incomplete = " ".join(section(studies, "adaptive-seeds", "decision").split())
    assert "incomplete (its report lists the missing trials); no decision on its 1 rule" in incomplete
    assert "holds" not in incomplete and "interval" not in incomplete
    assert "| incomplete: no decision |" in section(studies, "*", "table")


@pytest.mark.parametrize("include, problem", [
    ("<!-- study:nosuch:decision -->", "include study:nosuch:decision names no study"),
    ("<!-- study:lr-transfer:table -->", "include study:lr-transfer:table: no section 'table'"),
    ("<!-- study:adaptive-seeds:summary -->", "no section 'summary' for adaptive-seeds")])
def test_a_bad_include_is_one_line(tmp_path, capsys, include, problem):
    studies = docs_copy(tmp_path)
    (tmp_path / "docs" / "studies.md").write_text(f"# x\n\n{include}\n<!-- /study -->\n", encoding="utf-8")
    assert shapesweep(["study", "docs", "--studies", str(studies)]) == 2
    assert problem in capsys.readouterr().err


def test_a_report_brings_the_docs_includes_with_it(tmp_path, capsys):
    """`study report NAME` rewrites the includes too: a stale include is current after it."""
    studies = docs_copy(tmp_path)
    page = tmp_path / "docs" / "statistics.md"
    current = page.read_text(encoding="utf-8")
    body = next(m["body"] for m in INCLUDE.finditer(current) if m["name"] == "adaptive-seeds")
    page.write_text(current.replace(body, "- stale\n"), encoding="utf-8")
    assert shapesweep(["study", "report", "adaptive-seeds", "--studies", str(studies)]) == 0
    assert "wrote docs/statistics.md (its study includes)" in capsys.readouterr().out
    assert page.read_text(encoding="utf-8") == current
