"""Every flag of every verb, from the declared groups (sweep/cli/verb_table.py), given 0, -1, NaN,
infinity, a huge value and a wrong type (issue 57): each is accepted at its declared range,
with the meaning ACCEPTED documents for a number a reader might doubt, or refused in one line
naming the flag, exit 2, before any work: nothing is written and no verb runs. In-process
(`cli.main`, `cli.parse`); no Ray starts.
"""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from shapesweep.common import UserError
from shapesweep.sweep.cli import main as cli
from shapesweep.sweep.options.fields import flagged, value_type

PROBES = {"zero": "0", "negative": "-1", "nan": "nan", "inf": "inf", "huge": "1" + "0" * 30,
          "text": "x"}
# (verb, flag, probe) accepted at the declaration, and what it means there
ACCEPTED = {
    ("*", "--gpus-per-trial", "zero"): "trains on the CPU (plan: refused, it plans a GPU's share)",
    ("*", "--gpus-per-trial", "huge"): "refused by the verb: more GPUs than the machine has",
    ("*", "--cpus-per-trial", "huge"): "refused by run: more CPUs than the machine has",
    ("*", "--workers-per-trial", "huge"): "refused by run: more workers than the machine holds",
    ("*", "--workers", "huge"): "refused by train: more workers than the machine holds",
    ("*", "--max-concurrent", "huge"): "as many trials at once as the resources hold",
    ("*", "--num-samples", "huge"): "an Optuna search until stopped (Ctrl-C; resume finishes it)",
    ("*", "--max-failures", "zero"): "a trial whose worker died is not retried",
    ("*", "--max-failures", "huge"): "a died worker's trial is always retried",
    ("*", "--checkpoint-every", "zero"): "a checkpoint at every evaluation",
    ("*", "--checkpoint-every", "huge"): "no trial saves a checkpoint",
    ("*", "--reduction-factor", "huge"): "ASHA keeps one candidate after its first rung",
    ("*", "--grace-tokens", "huge"): "refused by the scheduler: not below the trial budget",
    ("*", "--sampler-seed", "zero"): "seed 0, the default",
    ("*", "--seq-len", "huge"): "FLOPs at that length (a recipe's own seq_len is checked)",
    ("*", "--gpus", "huge"): "the wall time on that many GPUs",
    ("*", "--gpu-hour-price", "zero"): "the sweep costs nothing",
    ("*", "--gpu-hour-price", "huge"): "the price as given",
    ("*", "--min-effect", "huge"): "a verdict needs the fewest seeds",
    ("*", "--seed-sd", "huge"): "refused by plan: more seeds than a sweep may have",
    ("*", "--top", "huge"): "every config or trial",
    ("*", "--top", "zero"): "status: refused by the verb (--all lists every trial)",
    ("*", "--top", "negative"): "status: refused by the verb (--all lists every trial)",
    ("*", "--port", "zero"): "a free port, printed",
    ("*", "--steps", "huge"): "refused by the recipe's bound on steps",
    ("*", "--tokens", "huge"): "refused by the recipe's bound on tokens",
    ("*", "--seeds", "zero"): "refused by the seed check: no seeds",
    ("*", "--seeds", "huge"): "refused by the seed check: too many seeds",
    ("*", "--seeds", "negative"): "refused by the seed check",
    ("*", "--poll", "huge"): "refused: at most a day",
    ("*", "--threads", "zero"): "refused by train: 1 to the cores this process may use",
    ("*", "--threads", "negative"): "refused by train: 1 to the cores this process may use",
    ("*", "--threads", "huge"): "refused by train: 1 to the cores this process may use",
}
BASE = {"spaces": [], "plan": ["tiny"], "train": ["c.yaml"], "run": ["tiny"], "resume": ["s"],
        "status": [], "export": ["s", "--top", "1", "--out", "out"], "dashboard": ["s"],
        "serve": [], "demo": [], "study": ["list"]}


def numeric_flags() -> list[tuple[str, str, str]]:
    """(verb, flag, probe) for every flag whose value is a number or a count."""
    cases = []
    for verb, spec in cli.VERBS.items():
        hints = typing.get_type_hints(spec.arguments)
        for f, flag in flagged(spec.arguments):
            kind = value_type(hints[f.name])
            if flag.names[0].startswith("-") and (kind in (int, float) or f.name == "seeds"):
                cases += [(verb, flag.names[0], probe) for probe in PROBES]
    return cases


def text_flags() -> list[tuple[str, str]]:
    """(verb, flag) for every flag that takes a value that is not a number."""
    cases = []
    for verb, spec in cli.VERBS.items():
        hints = typing.get_type_hints(spec.arguments)
        for f, flag in flagged(spec.arguments):
            kind = value_type(hints[f.name])
            if flag.names[0].startswith("-") and kind not in (int, float, bool) and f.name != "seeds":
                cases.append((verb, flag.names[0]))
    return cases


def _argv(verb: str, flag: str, value: str) -> list[str]:
    base = list(BASE[verb])
    if flag in base:  # export's --top and --out are required: replace the base's
        at = base.index(flag)
        del base[at:at + 2]
    return [verb, *base, f"{flag}={value}"]


def test_the_table_covers_every_verb_and_its_number_flags():
    verbs = {verb for verb, _, _ in numeric_flags()}
    assert verbs == set(cli.VERBS) - {"spaces", "dashboard"}
    assert len(numeric_flags()) >= 6 * 25


@pytest.mark.parametrize(("verb", "flag", "probe"), numeric_flags())
def test_a_number_flag_is_accepted_with_a_meaning_or_refused_in_one_line(verb, flag, probe, tmp_path,
                                                                         monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = _argv(verb, flag, PROBES[probe])
    try:
        args = cli.parse(argv)
    except UserError as refused:
        assert str(refused).startswith(f"{flag}: ") and "\n" not in str(refused)
        # the whole command: one line, exit 2, nothing written, no verb run
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"shapesweep {verb}: error: {flag}: " in err, err
        assert list(tmp_path.iterdir()) == []
        return
    except SystemExit as refused:  # argparse: a flag the verb does not take is not in the table
        pytest.fail(f"argparse refused {argv}: {refused}")
    value = getattr(args, next(f.name for f, fl in flagged(cli.VERBS[verb].arguments)
                               if fl.names[0] == flag))
    assert not (isinstance(value, float) and math.isnan(value)), argv
    assert probe in ("zero", "huge", "negative") and (("*", flag, probe) in ACCEPTED), (
        f"{argv} accepted as {value!r}: refuse it, or say in ACCEPTED what it means")


@pytest.mark.parametrize(("verb", "flag"), text_flags())
def test_a_text_flag_takes_its_text_or_refuses_in_one_line(verb, flag, tmp_path, monkeypatch, capsys):
    """Names, paths and choices: a number where text is expected is text (a sweep may be
    named 0); a choice outside its list is argparse's one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    for probe in ("0", "nan"):
        argv = _argv(verb, flag, probe)
        try:
            cli.parse(argv)
        except UserError as refused:
            assert str(refused).startswith(f"{flag}: ")
        except SystemExit as refused:
            assert refused.code == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "invalid choice" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_flag_a_verb_does_not_take_is_argparses_one_line(capsys):
    with pytest.raises(SystemExit) as refused:
        cli.parse(["plan", "tiny", "--cpus-per-trial", "2"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --cpus-per-trial" in err


def test_the_run_flags_the_issue_found_are_refused_before_any_work(tmp_path, capsys):
    """`run --cpus-per-trial 0` (Ray's ResourceRequest error, 4 files, a hang) and
    `run --scheduler asha --grace-tokens -1` (a NaN traceback): one line, nothing written."""
    root = tmp_path / "root"
    for extra, flag in ((["--cpus-per-trial", "0"], "--cpus-per-trial"),
                        (["--scheduler", "asha", "--grace-tokens", "-1"], "--grace-tokens"),
                        (["--reduction-factor", "1"], "--reduction-factor"),
                        (["--gpus-per-trial", "nan"], "--gpus-per-trial")):
        assert cli.main(["run", "tiny-depths", "--root", str(root), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"shapesweep run: error: {flag}: " in err, err
        assert not root.exists()


@pytest.mark.parametrize(("url", "package"), [
    ("mysql://u:pw@127.0.0.1:1/db", "mysqlclient"),
    ("mysql+pymysql://u:pw@127.0.0.1:1/db", "PyMySQL"),
    ("mssql+pyodbc://u:pw@127.0.0.1:1/db", "pyodbc"),
])
def test_a_storage_url_without_its_driver_names_the_package(url, package, tmp_path, capsys):
    """The driver of each URL is not installed here (the dev extra has none of them)."""
    import importlib.util

    module = {"mysqlclient": "MySQLdb", "PyMySQL": "pymysql", "pyodbc": "pyodbc"}[package]
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    root = tmp_path / "root"
    for verb in (["status"], ["resume", "s"], ["dashboard", "s"]):
        assert cli.main([*verb, "--root", str(root), "--storage", url]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--storage: " in err and f"pip install {package}" in err, err
        assert "pw" not in err and not root.exists()
    assert dataclasses.is_dataclass(cli.VERBS["status"].arguments)
