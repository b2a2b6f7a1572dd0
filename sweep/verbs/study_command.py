"""`shapesweep study run|report|list|docs [NAME]`: a pre-registered study (`studies/NAME/study.yaml`,
shapesweep.results.study_spec) run into its own store and reported from it.

`run` reads and checks the whole study first (one line, exit 2, nothing run), then runs
each of its sweeps through the same code as `shapesweep run`, into `studies/NAME/store`
(the study's `--root`) with the study's seeds; a sweep the store already holds is
resumed (`shapesweep resume`), so an interrupted study finishes where it stopped.
`report` writes `studies/NAME/report.md` from the store (shapesweep.results.study_report),
then the docs' study includes from the reports, as `docs` does alone: `docs` rewrites every study include of README.md and docs/ beside the studies folder from the
committed study files and reports (shapesweep.results.study_docs).
"""

from __future__ import annotations

from pathlib import Path

import torch

from shapesweep.common import UserError, terminal_console
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.study_docs import INCLUDE, pages, write_docs
from shapesweep.results.study_lr import is_lr_fit, read_lr_study, write_lr_report
from shapesweep.results.study_report import write_report
from shapesweep.results.study_spec import STUDY_FILE, Study, read_study, study_names
from shapesweep.search_spaces.safe_yaml import read_yaml
from shapesweep.sweep.cli.main import parse
from shapesweep.sweep.cli.verb_table import ResumeArgs, StudyArgs
from shapesweep.sweep.driver.sweep_files import OPTIONS_FILE
from shapesweep.sweep.options.store_args import check_store_args
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.verbs import run_command
from shapesweep.trainers.machine import cpu_model


def study(args: StudyArgs) -> int:
    studies = Path(args.studies)
    if args.action == "list":
        return _list(studies)
    if args.action == "docs":
        return _docs(studies, args.name)
    if args.name is None:
        raise UserError(f"study {args.action} needs the study's NAME (studies: "
                        f"{', '.join(study_names(studies)) or 'none'})", key="NAME")
    if is_lr_fit(studies, args.name):  # its trials are committed stores: reported, never run
        lr_study = read_lr_study(studies, args.name)
        if args.action == "run":
            raise UserError("an lr-fit study reads committed stores and runs nothing: "
                            f"shapesweep study report {args.name}", file=str(lr_study.folder / STUDY_FILE))
        path, complete = write_lr_report(lr_study)
    else:
        found = read_study(studies, args.name)  # every check, before any work
        if args.action == "run":
            return _run(found, args)
        path, complete = write_report(found)
    verdict = "decision stated" if complete else "data incomplete: missing trials listed, no decision"
    print(f"wrote {studies / path} ({verdict})")
    for page in write_docs(studies):  # the docs' includes follow the report
        print(f"wrote {page.relative_to(studies.parent).as_posix()} (its study includes)")
    return 0


def _list(studies: Path) -> int:
    names = study_names(studies)
    if not names:
        print(f"no studies under {studies}")
    for name in names:
        doc = read_yaml(studies / name / STUDY_FILE)
        question = doc.get("question", "") if isinstance(doc, dict) else ""
        print(f"{name}: {' '.join(str(question).split())}")
    return 0


def _docs(studies: Path, name: str | None) -> int:
    if name is not None:
        raise UserError("study docs rewrites the includes of every study: give no NAME", key="NAME")
    root = studies.parent
    changed = write_docs(studies)
    count = sum(len(INCLUDE.findall(page.read_text(encoding="utf-8"))) for page in pages(root))
    for page in changed:
        print(f"wrote {page.relative_to(root).as_posix()}")
    print(f"{count} study includes, {len(changed)} pages rewritten")
    return 0


def _run(found: Study, args: StudyArgs) -> int:
    """Each sweep run (or resumed) in turn; the exit code is the worst of theirs."""
    _check_machine(found)
    root = str(found.store)
    found.store.mkdir(exist_ok=True)
    store = ParquetStore(root)
    held = {name for name in store.sweeps() if _has_options(root, name)}
    _check_unchanged(found, store, held)
    commands = [_command(found, name, name in held, args) for name in found.sweeps]
    code = 0
    for name, sweep in zip(found.sweeps, commands, strict=True):
        verb = "resume" if isinstance(sweep, ResumeArgs) else "run"
        terminal_console(soft_wrap=True, stderr=True).print(
            f"study [bold]{found.name}[/]: {verb} sweep {name}")
        check_store_args(sweep)
        try:
            code = max(code, run_command.resume(sweep) if isinstance(sweep, ResumeArgs)
                       else run_command.run(sweep))
        finally:  # interrupted too: the sweep's folder exists once it started
            if _has_options(root, name):
                store.write_file(name, STUDY_FILE, found.text)
    print(f"study {found.name}: every sweep run; to report: shapesweep study report {found.name}"
          + ("" if args.studies == "studies" else f" --studies {args.studies}"))
    return code


def _check_unchanged(found: Study, store: ParquetStore, held: set[str]) -> None:
    """A study is fixed before it runs: its sweeps resume only under the study.yaml they ran
    under (each sweep's folder keeps a copy)."""
    for name in sorted(held):
        ran_under = store.read_file(name, STUDY_FILE)
        if ran_under is not None and ran_under != found.text:
            raise UserError(f"changed since sweep {name!r} of the study ran (a study is fixed before "
                            "it runs: restore the file, or make a new study)",
                            file=str(found.folder / STUDY_FILE))


def _has_options(root: str, name: str) -> bool:
    return ParquetStore(root).read_file(name, OPTIONS_FILE) is not None


def _command(found: Study, name: str, resume: bool, args: StudyArgs) -> SweepOptions | ResumeArgs:
    """The `run` (or `resume`) arguments of one sweep of the study, parsed as the CLI does."""
    root = str(found.store)
    if resume:
        argv = ["resume", name, "--root", root]
    else:
        argv = ["run", found.sweeps[name], "--name", name, "--root", root,
                "--seeds", found.run_seeds(name)]
        if found.machine.get("device_name") == "cpu":
            argv += ["--gpus-per-trial", "0"]
    if args.max_concurrent is not None:
        argv += ["--max-concurrent", str(args.max_concurrent)]
    if not args.progress:
        argv.append("--no-progress")
    parsed = parse(argv)
    assert isinstance(parsed, SweepOptions | ResumeArgs)  # the arguments of `run` or `resume`
    return parsed


def _check_machine(found: Study) -> None:
    """A study that names its machine runs only there (its data would not compare)."""
    here = {"cpu_model": cpu_model(), "torch_version": str(torch.__version__)}
    for column, value in here.items():
        wanted = found.machine.get(column)
        if wanted is not None and wanted != value:
            raise UserError(f"the study must run on {column} {wanted!r}; this machine has {value!r}",
                            file=str(found.folder / STUDY_FILE), key=f"machine.{column}")
