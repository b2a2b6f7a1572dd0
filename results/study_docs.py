"""The docs' study results, generated (issue 56): every table of studies and every sentence
that states what a study found is the body of an include in README.md or docs/*.md,

    <!-- study:NAME:SECTION -->
    ...generated...
    <!-- /study -->

which `shapesweep study docs` (and `study report`, after the report) rewrites from the
committed study files alone: each study's `study.yaml` (its question, seeds, rules and
machine; its spaces planned for the trial count) and the `report.md` that `shapesweep study
report` wrote from its store (a study without one: `no report yet`). The store itself is
never read, so trials another session adds to it move the docs only once its report is
regenerated and committed (tests/test_study_drift.py fails on drift at either step).

Sections: `*:table`, one row per study (what it asks, trials run of those planned, the
machine it names, whether it has decided); `NAME:decision`, each of the study's decisions
with its seeds, its comparison's Holm-adjusted interval and the rule's outcome (an lr-fit
study: each axis's verdict with its shapes' intervals), or one line saying the study has not
run or is incomplete and decides nothing; `NAME:summary` (lr-fit only), one sentence: which
axes transfer. The text names no path of the machine that writes it.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from shapesweep.common import UserError
from shapesweep.results.study_lr import LrStudy, is_lr_fit, read_lr_study
from shapesweep.results.study_spec import REPORT_FILE, STUDY_FILE, Study, read_study, study_names
from shapesweep.search_spaces.safe_yaml import read_yaml
from shapesweep.search_spaces.solver import plan

INCLUDE = re.compile(r"^<!-- study:(?P<name>[^:\s]+):(?P<section>[a-z-]+) -->\n(?P<body>.*?)^<!-- /study -->$",
                     re.M | re.S)
ALL = "*"
SECTIONS = {ALL: ("table",), "study": ("decision",), "lr-fit": ("decision", "summary")}
WIDTH = 95  # the docs' prose width


def pages(root: Path) -> list[Path]:
    """The pages that may hold includes: the README and every page under docs/."""
    return [p for p in (root / "README.md", *sorted((root / "docs").glob("*.md"))) if p.is_file()]


def fill(text: str, studies: Path) -> str:
    """`text` with every include's body regenerated (an unknown study or section: UserError)."""
    return INCLUDE.sub(lambda m: f"<!-- study:{m['name']}:{m['section']} -->\n"
                                 f"{section(studies, m['name'], m['section'])}<!-- /study -->", text)


def write_docs(studies: Path) -> list[Path]:
    """Rewrite the includes of the pages beside `studies` (its parent's README.md and docs/);
    the pages whose text changed."""
    changed = []
    for page in pages(studies.parent):
        text = page.read_text(encoding="utf-8")
        new = fill(text, studies)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def section(studies: Path, name: str, part: str) -> str:
    """One include's body, each line ending in a newline."""
    if name == ALL:
        kind = ALL
    elif name in study_names(studies):
        kind = "lr-fit" if is_lr_fit(studies, name) else "study"
    else:
        raise UserError(f"include study:{name}:{part} names no study (studies: "
                        f"{', '.join(study_names(studies)) or 'none'})", file=str(studies))
    if part not in SECTIONS[kind]:
        raise UserError(f"include study:{name}:{part}: no section {part!r} for {'every study' if kind == ALL else name} "
                        f"(sections: {', '.join(SECTIONS[kind])})", file=str(studies))
    if kind == ALL:
        lines = _table(studies)
    elif kind == "lr-fit":
        lines = _lr_decision(studies, name) if part == "decision" else _wrap(_lr_summary(studies, name))
    else:
        lines = _decision(studies, name)
    return "".join(f"{line}\n" for line in lines)


# --- the committed report, read back -------------------------------------------------------


def _report(studies: Path, name: str) -> str:
    path = studies / name / REPORT_FILE
    if not path.is_file():
        raise UserError(f"no {REPORT_FILE} yet: run `shapesweep study report {name}` first", file=str(path))
    return path.read_text(encoding="utf-8")


def _sections(report: str) -> dict[str, str]:
    """The report's `## TITLE` sections by title."""
    return {head.split("\n", 1)[0]: head.split("\n", 1)[1] if "\n" in head else ""
            for head in report.split("\n## ")[1:]}


def _rows(body: str) -> list[list[str]]:
    """The cells of a Markdown table's body rows (the header and the rule left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
            if line.startswith("|")]
    return [r for r in rows[2:]] if rows else []


def _bullets(body: str) -> list[str]:
    return [line[2:] for line in body.splitlines() if line.startswith("- ")]


def _wrap(text: str, bullet: bool = False) -> list[str]:
    """`text` wrapped at the docs' width, never inside a `code span`."""
    kept = re.sub(r"`[^`]*`", lambda m: m[0].replace(" ", "\0"), text)
    lines = textwrap.wrap(kept, WIDTH, initial_indent="- " if bullet else "", subsequent_indent="  " if bullet else "",
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace("\0", " ") for line in lines]


def _seeds(seeds: list[int]) -> str:
    """`0-5` for a run of consecutive seeds, else the list."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


# --- a study of sweeps ---------------------------------------------------------------------


def _planned(study: Study) -> int:
    """The trials the study plans: each sweep's candidates x (choice trials + measure seeds;
    an adaptive sweep at its max)."""
    total = 0
    for sweep, space in study.spaces.items():
        seeds = list(range(study.adaptive[sweep][1])) if sweep in study.adaptive else study.seeds
        total += len(plan(space).candidates) * space.trials_per_candidate(seeds)
    return total


def _ran(parts: dict[str, str]) -> int:
    return sum(int(row[-1]) for row in _rows(parts.get("Machine", "")))


def _state(parts: dict[str, str], ran: int) -> str:
    """`not run yet`, `incomplete`, `other machine` or `complete`, from the report's Data."""
    data = parts.get("Data", "").strip()
    if ran == 0:
        return "not run yet"
    if data.startswith("Complete"):
        return "complete"
    return "incomplete: no decision" if data.startswith("**Incomplete") else "other machine: no decision"


def _unreported(studies: Path, name: str) -> bool:
    return not (studies / name / REPORT_FILE).is_file()


def _decision(studies: Path, name: str) -> list[str]:
    study = read_study(studies, name)
    if _unreported(studies, name):
        return _wrap(f"`{name}`: no report yet (`shapesweep study report {name}`); no decision.")
    parts = _sections(_report(studies, name))
    ran, planned = _ran(parts), _planned(study)
    state = _state(parts, ran)
    rules = len(study.decisions)
    head = f"`{name}` (seeds {_seeds(study.seeds)}; {ran} of {planned} planned trials)"
    if state != "complete":
        why = {"not run yet": "not run yet", "incomplete: no decision": "incomplete (its report lists the missing trials)",
               "other machine: no decision": "trials from another machine than it names"}[state]
        return _wrap(f"{head}: {why}; no decision on its {rules} rule{'s' * (rules != 1)} "
                     f"(`studies/{name}/{REPORT_FILE}`).")
    comparisons = _comparisons(parts.get("Comparisons", ""))
    lines = []
    for decision, outcome in zip(study.decisions, _bullets(parts["Decision"]), strict=True):
        row, family = comparisons[decision.pair.label]
        verdict = outcome.split(" -> ", 1)[1] if " -> " in outcome else outcome
        lines += _wrap(f"`{name}` (seeds {_seeds(study.seeds)}), {decision.pair.label}: {study.quantity} "
                       f"{row[2]} [{row[4]}, {row[5]}] ({row[1]} paired seeds; {family}): `{decision.text}` "
                       f"{verdict}", bullet=True)
    if study.agreement is not None:
        lines += _wrap(f"`{name}` (seeds {_seeds(study.seeds)}): "
                       f"{_agreement(parts.get('Fixed vs adaptive seeds', ''))}", bullet=True)
    return lines


def _comparisons(body: str) -> dict[str, tuple[list[str], str]]:
    """Each comparison's table row, by label, with its family's name and level."""
    out: dict[str, tuple[list[str], str]] = {}
    for block in body.split("Family ")[1:]:
        family = re.match(r"`([^`]+)`: (\d+) comparisons.*?Bonferroni at ([\d.]+%)", block, re.S)
        assert family, block
        label = f"adjusted over family `{family[1]}` of {family[2]}, Bonferroni {family[3]}"
        out.update({row[0]: (row, label) for row in _rows(block)})
    return out


def _agreement(body: str) -> str:
    """The fixed and adaptive sweeps' trials, and how their verdicts agree."""
    rows = _rows(body.split("\n\n| comparison")[0])
    fixed, adaptive, saved = rows[0], rows[1], rows[2]
    verdicts = next((line for line in body.splitlines() if line.startswith("Verdicts:")), "")
    return (f"the adaptive sweep ran {adaptive[1]} trials against the fixed sweep's {fixed[1]} "
            f"(saving {saved[1]}). {verdicts}")


# --- an lr-fit study -----------------------------------------------------------------------


def _lr_parts(studies: Path, name: str) -> tuple[LrStudy, dict[str, str], list[str]]:
    """The lr-fit study, its report's sections and its Decision bullets."""
    study = read_lr_study(studies, name)
    report = _report(studies, name)
    return study, _sections(report), _bullets(_sections(report)["Decision"])


def _lr_decision(studies: Path, name: str) -> list[str]:
    if _unreported(studies, name):
        return _wrap(f"`{name}`: no report yet (`shapesweep study report {name}`); no decision.")
    study, parts, outcomes = _lr_parts(studies, name)
    lines = []
    for fit, outcome in zip(study.doc.fits, outcomes[:len(study.doc.fits)], strict=True):
        verdict = outcome.rsplit("): ", 1)[1]
        title = next(t for t in parts if t.startswith(f"Fit `{fit.name}`"))
        fitted = parts[title].split("The fit:", 1)[1] if "The fit:" in parts[title] else ""
        rows = [row for row in _rows(fitted) if (row[0], row[1]) != tuple(fit.base.split(":", 1))]
        shapes = [f"{v}: " + ", ".join(f"{row[1]} {_interval(row[5])}" for row in rows if row[7] == v)
                  for v in dict.fromkeys(row[7] for row in rows)]
        lines += _wrap(f"`{name}` fit `{fit.name}`, {fit.axis} under {fit.rule} (seeds {_seeds(fit.seeds)}; "
                       f"{fit.lrs} lrs each): {verdict}; each shape's optimum in sqrt(2) steps from the base's, "
                       f"{100 * study.doc.level:.4g}% t-interval per shape, by verdict: " + "; ".join(shapes) + ".",
                       bullet=True)
    if study.doc.lost:
        axes: dict[str, list[str]] = {}
        for entry in study.doc.lost:
            axes.setdefault(entry.axis, []).append(entry.rule)
        lost = "; ".join(f"{axis} under {', '.join(rules)}" for axis, rules in axes.items())
        lines += _wrap(f"`{name}`, no decision on {len(study.doc.lost)} (axis, rule) pairs without committed "
                       f"data: {lost}.",
                       bullet=True)
    return lines


def _interval(cell: str) -> str:
    """`+1.72 [-1.76, +5.19]` of a fit table's `+1.72 [-1.76, +5.19] 95% t, 2 df`."""
    found = re.match(r"\S+ \[[^\]]*\]", cell)
    return found[0] if found else cell


def _lr_summary(studies: Path, name: str) -> str:
    if _unreported(studies, name):
        return f"The `{name}` study has no report yet (`shapesweep study report {name}`)."
    study, _, outcomes = _lr_parts(studies, name)
    verdicts = [o.rsplit("): ", 1)[1] for o in outcomes[:len(study.doc.fits)]]
    transfers = [f"{fit.axis} under {fit.rule}" for fit, v in zip(study.doc.fits, verdicts, strict=True)
                 if v.startswith("**transfers**")]
    counted = (f"{len(study.doc.fits)} (axis, rule) pairs fitted from committed trials, "
               f"{len(study.doc.lost)} without committed data")
    if not transfers:
        return f"The `{name}` study shows no axis on which the lr transfers under any rule ({counted})."
    return f"The `{name}` study shows the lr transfers on {'; '.join(transfers)} ({counted})."


# --- every study ---------------------------------------------------------------------------


def _question(text: str) -> str:
    """A question's head: up to its first `?` or `:` (outside brackets), cut at a clause
    before 100 characters."""
    depth, end = 0, len(text)
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and ch in "?:":
            end = i + (ch == "?")
            break
    head = " ".join(text[:end].split())
    if len(head) > 100:
        cuts = [m.start() for m in re.finditer(", ", head[:100]) if _balanced(head[:m.start()])]
        head = head[:cuts[-1]] if cuts else head[:100]
    return head.replace("|", "\\|")


def _balanced(text: str) -> bool:
    return sum(text.count(c) for c in "([{") == sum(text.count(c) for c in ")]}")


def _table(studies: Path) -> list[str]:
    lines = ["| study | what it asks | trials run | machine | state |", "|---|---|---|---|---|"]
    for name in study_names(studies):
        if _unreported(studies, name):
            doc = read_yaml(studies / name / STUDY_FILE)
            question = _question(str(doc.get("question", ""))) if isinstance(doc, dict) else "-"
            lines.append(f"| `{name}` | {question} | - | - | no report yet |")
            continue
        if is_lr_fit(studies, name):
            study, parts, outcomes = _lr_parts(studies, name)
            ran = sum(int(row[-1]) for title, body in parts.items() if title.startswith("Fit ")
                      for row in _rows(body.split("Seed-mean", 1)[0]))
            lost = sum(lost.trials for lost in study.doc.lost)
            cpus = sorted({row[1] for title, body in parts.items() if title.startswith("Fit ")
                           for row in _rows(body.split("Seed-mean", 1)[0])})
            decided = sum("**no decision**" not in o for o in outcomes)
            lines.append(f"| `{name}` | {_question(study.doc.question)} | {ran} committed ({lost} lost) | "
                         f"{', '.join(cpus)} (as recorded) | {decided} of {len(outcomes)} (axis, rule) pairs decided |")
            continue
        spec = read_study(studies, name)
        parts = _sections(_report(studies, name))
        ran = _ran(parts)
        state = _state(parts, ran)
        if state == "complete":
            held = sum(" -> **holds**" in b for b in _bullets(parts["Decision"]))
            state = f"decided: {held} of {len(spec.decisions)} rules hold"
        machine = spec.machine.get("cpu_model", "any")
        lines.append(f"| `{name}` | {_question(spec.question)} | {ran} of {_planned(spec)} | {machine} | {state} |")
    return lines
