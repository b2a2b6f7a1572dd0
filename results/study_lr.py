"""A study of learning-rate transfer (`kind: lr-fit` in its study.yaml): each shape's fitted
optimum lr and its distance from the base's, per axis and parametrization, from committed
stores (shapesweep.results.lr_fit), and the axes whose data are lost, listed as withdrawn.

The study.yaml names its store (a folder of the repository, relative to the study's), each
fit (the sweeps it reads, the base shape, the shapes on its axis, the grid and seeds every
shape must have whole) and each lost axis. The rules are lr_fit's, stated in the file's
`decide`: a shape is `within one step` when its distance's interval at `level` lies inside
(-1, +1) sqrt(2) steps, `moves` when it lies outside [-1, +1], else `unresolved`; an axis
transfers under a rule when every shape on it is within one step, does not when one moves,
and is not shown to either way otherwise. A fit missing any trial, and every lost axis,
states no decision. The report holds no time or path of the machine that writes it.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shapesweep.common import UserError
from shapesweep.results.lr_fit import completed, fit_markdown, fit_table
from shapesweep.results.study_spec import REPORT_FILE, STUDY_FILE
from shapesweep.search_spaces.safe_yaml import read_yaml

LR_FIT = "lr-fit"
MACHINE_COLUMNS = ("cpu_model", "torch_version", "device_name")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Fit(_Strict):
    """One axis under one rule: `stores` maps each rule label of the table to its sweep in
    the study's store; `base` is LABEL:SHAPE; `shapes` the shapes on the axis (by label)."""

    name: str
    axis: str
    rule: str
    stores: dict[str, str] = Field(min_length=1)
    base: str
    shapes: dict[str, list[str]]
    lrs: int = Field(ge=3)
    seeds: list[int] = Field(min_length=2)


class Lost(_Strict):
    """An axis whose trials are not committed: listed, never decided."""

    axis: str
    rule: str
    sweep: str
    trials: int
    why: str


class Decide(_Strict):
    shape: str
    axis: str


class LrStudyFile(_Strict):
    kind: Literal["lr-fit"]
    question: str
    data: str
    store: str
    level: float = Field(default=0.95, gt=0, lt=1)
    decide: Decide
    fits: list[Fit] = Field(min_length=1)
    lost: list[Lost] = []


@dataclass(frozen=True)
class LrStudy:
    name: str
    folder: Path
    text: str
    doc: LrStudyFile
    store: Path
    store_shown: str  # the store's path in the repository, as the report prints it


def is_lr_fit(studies: Path, name: str) -> bool:
    """Whether `studies/NAME/study.yaml` is an lr-fit study (a `kind: lr-fit` key)."""
    path = studies / name / STUDY_FILE
    if not path.is_file():
        return False
    doc = read_yaml(path)
    return isinstance(doc, dict) and doc.get("kind") == LR_FIT


def read_lr_study(studies: Path, name: str) -> LrStudy:
    """The study file read strictly (one `file: key: problem` line) and its store found."""
    folder = studies / name
    path = folder / STUDY_FILE
    try:
        doc = LrStudyFile.model_validate(read_yaml(path))
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(first["msg"], file=str(path), key=".".join(map(str, first["loc"]))) from None
    repo = studies.resolve().parent
    store = (folder / doc.store).resolve()
    if not store.is_relative_to(repo) or not store.is_dir():
        raise UserError(f"{doc.store!r}: no such folder in the repository", file=str(path), key="store")
    for i, fit in enumerate(doc.fits):
        label = fit.base.split(":", 1)[0]
        if ":" not in fit.base or label not in fit.stores:
            raise UserError(f"{fit.base!r} is not LABEL:SHAPE with LABEL one of {', '.join(fit.stores)}",
                            file=str(path), key=f"fits.{i}.base")
        unknown = sorted(set(fit.shapes) - set(fit.stores))
        if unknown:
            raise UserError(f"{unknown[0]!r} is not one of the fit's stores ({', '.join(fit.stores)})",
                            file=str(path), key=f"fits.{i}.shapes")
    return LrStudy(name, folder, path.read_text(encoding="utf-8"), doc, store,
                   Path(os.path.relpath(store, repo)).as_posix())


def _trials(study: LrStudy, sweep: str) -> pd.DataFrame:
    return completed(str(study.store), sweep) if (study.store / sweep).is_dir() else pd.DataFrame()


def missing(fit: Fit, trials: dict[str, pd.DataFrame]) -> list[str]:
    """One line per expected shape (the base and the axis's) short of its whole grid x seeds."""
    base_label, base_shape = fit.base.split(":", 1)
    expected = [(base_label, base_shape)] + [(label, s) for label, shapes in fit.shapes.items() for s in shapes]
    lines = []
    for label, shape in expected:
        done = trials[label]
        own = done[done["variant"] == shape] if len(done) else done
        cells = len(own.groupby(["lr", "seed"])) if len(own) else 0
        seeds = set(own["seed"]) if len(own) else set()
        lacking = [s for s in fit.seeds if s not in seeds]
        if cells < fit.lrs * len(fit.seeds) or lacking:
            lines.append(f"{fit.stores[label]}/{shape}: {cells} of {fit.lrs * len(fit.seeds)} (lr, seed) trials"
                         + (f", seeds {', '.join(map(str, lacking))} absent" if lacking else ""))
    return lines


def _loss_table(fit: Fit, trials: dict[str, pd.DataFrame]) -> list[str]:
    """Seed-mean final val_loss per shape and lr; **bold** the shape's lowest."""
    frames = [t.assign(label=label) for label, t in trials.items() if len(t)]
    if not frames:
        return ["No trial is in the store."]
    done = pd.concat(frames)
    means = done.groupby(["label", "variant", "lr"])["val_loss"].mean().unstack("lr")
    lrs = list(means.columns)
    lines = ["| rule | shape | " + " | ".join(map(_lr, lrs)) + " |", "|---|---|" + "---|" * len(lrs)]
    for (label, shape), row in means.iterrows():
        best = row.min()
        cells = ["-" if v != v else (f"**{v:.3f}**" if v == best else f"{v:.3f}") for v in row]
        lines.append(f"| {label} | {shape} | " + " | ".join(cells) + " |")
    return lines


def _lr(lr: float) -> str:
    """1.5e-3, 3e-3, 1.2e-2: two significant digits, as the docs print the grid."""
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def _machines(fit: Fit, trials: dict[str, pd.DataFrame]) -> list[str]:
    lines = []
    for label, frame in trials.items():
        counts = Counter(tuple(str(v) if pd.notna(v) else "unrecorded" for v in row)
                         for row in frame.reindex(columns=list(MACHINE_COLUMNS)).itertuples(index=False))
        lines += [f"| {fit.stores[label]} | {cpu} | {torch} | {device} | {n} |"
                  for (cpu, torch, device), n in sorted(counts.items())]
    return lines


def axis_decision(fit: Fit, table: pd.DataFrame, lacking: list[str]) -> str:
    """The axis's verdict under its rule, from its shapes' verdicts (none on incomplete data)."""
    if lacking:
        return "**no decision** (data incomplete)"
    on_axis = table[[(r, s) in {(label, x) for label, xs in fit.shapes.items() for x in xs}
                     for r, s in zip(table["rule"], table["shape"], strict=True)]]
    counts = Counter(on_axis["verdict"])
    shown = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    if counts.get("within one step", 0) == len(on_axis):
        return f"**transfers** ({shown})"
    if counts.get("moves", 0):
        return f"**does not transfer** ({shown})"
    return f"**not shown to transfer** ({shown})"


def render(study: LrStudy) -> str:
    doc = study.doc
    digest = hashlib.sha256(study.text.encode()).hexdigest()[:12]
    lines = [f"# Study `{study.name}`", "", f"Question: {doc.question.strip()}", "",
             f"Generated by `shapesweep study report {study.name}` from `{study.store_shown}` "
             f"(study.yaml sha256 {digest}); intervals at {100 * doc.level:.4g}%, a t-interval over "
             "per-seed fits (shapesweep.results.lr_fit).", "", "## Data", "", doc.data.strip(), "",
             f"Shape rule: {doc.decide.shape.strip()}", "", f"Axis rule: {doc.decide.axis.strip()}", ""]
    decisions = []
    for fit in doc.fits:
        trials = {label: _trials(study, sweep) for label, sweep in fit.stores.items()}
        lacking = missing(fit, trials)
        lines += [f"## Fit `{fit.name}`: {fit.axis}, {fit.rule}", ""]
        lines += (["**Incomplete: no decision.** Missing trials:", ""] + [f"- {m}" for m in lacking]
                  if lacking else [f"Complete: every shape has {fit.lrs} lrs x seeds "
                                   f"{', '.join(map(str, fit.seeds))}."])
        lines += ["", "| sweep | CPU | torch | device | trials |", "|---|---|---|---|---|",
                  *_machines(fit, trials), "", "Seed-mean final validation loss at each lr:", "",
                  *_loss_table(fit, trials), ""]
        present = {label: (str(study.store), sweep) for label, sweep in fit.stores.items() if len(trials[label])}
        base_label, base_shape = fit.base.split(":", 1)
        base_rows = trials[base_label]
        if base_label in present and (base_rows["variant"] == base_shape).any():
            table = fit_table(present, (base_label, base_shape), level=doc.level)
            lines += ["The fit:", "", fit_markdown(table, doc.level), ""]
        else:
            table = pd.DataFrame(columns=["rule", "shape", "verdict"])
            lacking = lacking or [f"{fit.stores[base_label]}/{base_shape}: the base"]
        decisions.append(f"- `{fit.name}` ({fit.axis}, {fit.rule}): {axis_decision(fit, table, lacking)}")
    if doc.lost:
        lines += ["## Lost: withdrawn", "", "Their stores are not committed; what the docs stated of them is "
                  "withdrawn, and nothing here is decided from them.", "",
                  "| axis | rule | sweep | trials | why |", "|---|---|---|---|---|"]
        lines += [f"| {lost.axis} | {lost.rule} | {lost.sweep} | {lost.trials} | {lost.why} |" for lost in doc.lost]
        lines.append("")
        decisions += [f"- {lost.axis}, {lost.rule}: **no decision** (no committed data)" for lost in doc.lost]
    lines += ["## Decision", "", *decisions]
    return "\n".join(lines) + "\n"


def write_lr_report(study: LrStudy) -> tuple[str, bool]:
    """Write the report beside study.yaml; its path (relative to the studies folder) and
    whether every fit states a decision (lost axes never do)."""
    text = render(study)
    (study.folder / REPORT_FILE).write_text(text, encoding="utf-8")
    return f"{study.name}/{REPORT_FILE}", "**no decision** (data incomplete)" not in text
