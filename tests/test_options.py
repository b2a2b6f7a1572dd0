"""An option is declared once: a field on the options model, and `run --help`, the range
check and the sweep's options file all follow from it (issue 26); an option several verbs
take is declared on its group and reads the same in each (issue 54)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from sweep_helpers import write_space

from shapesweep.common import UserError
from shapesweep.results.store import sweep_dir
from shapesweep.sweep.cli import main as cli
from shapesweep.sweep.cli.verb_table import ResumeArgs
from shapesweep.sweep.driver.runner import OPTIONS_FILE, load_options
from shapesweep.sweep.options.fields import add_flags, arguments, flagged, option, parsed, resumed
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.verbs.run_command import resume, run


@dataclass
class WithDummy(SweepOptions):
    """Two test-only options, each declared here and nowhere else."""

    dummy_rate: float = option(0.5, "--dummy-rate", "--dummy-speed", at_least=0,
                               help="a test-only rate, kept for resume")
    dummy_note: str = option("none", "--dummy-note", saved=False,
                             help="a test-only note, not kept")


def parser_for(verb: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"shapesweep {verb}")
    if verb == "resume":
        parser.add_argument("name")
    add_flags(parser, WithDummy, resumed if verb == "resume" else lambda flag: True)
    return parser


def test_a_declared_option_is_in_help_with_its_aliases_and_default():
    parser = parser_for("run")
    text = parser.format_help()
    assert "--dummy-rate DUMMY_RATE, --dummy-speed DUMMY_RATE" in text
    assert "a test-only rate, kept for resume" in text and "--dummy-note" in text
    assert "--dummy-rate" not in parser_for("resume").format_help()  # not resume=True
    assert parser.parse_args(["space"]).dummy_rate == 0.5
    given = parser.parse_args(["space", "--dummy-speed", "2"])
    assert parsed(WithDummy, given)["dummy_rate"] == 2.0  # read as the field's type


def test_a_declared_range_refuses_a_bad_value_naming_its_flag(tmp_path):
    root = tmp_path / "sweeps"
    args = parser_for("run").parse_args(
        [str(write_space(tmp_path)), "--root", str(root), "--dummy-rate", "-1"])
    with pytest.raises(UserError) as refused:
        run(arguments(WithDummy, args))
    assert str(refused.value) == "--dummy-rate: must be 0 or more"
    assert not root.exists()


def _flag(verb: str, dest: str):
    return next(flag for f, flag in flagged(cli.VERBS[verb].arguments) if f.name == dest)


def test_a_flag_several_verbs_take_reads_the_same_in_each():
    """Declared once on its group: the same names, help and range wherever it is taken."""
    shared = {"gpus_per_trial": ("plan", "run", "train"), "gpu_memory": ("plan", "run", "resume"),
              "address": ("run", "resume", "train"), "device": ("plan", "train"),
              "parallel": ("run", "train"), "data": ("run", "train"), "seeds": ("plan", "run"),
              "metric": ("status", "export"), "tokenizer": ("train", "export"),
              "adjust": ("status", "dashboard"), "max_concurrent": ("run", "resume", "demo")}
    for dest, verbs in shared.items():
        flags = {verb: _flag(verb, dest) for verb in verbs}
        first = flags[verbs[0]]
        for verb, flag in flags.items():
            assert (flag.names, flag.at_least, flag.above, flag.read) == (
                first.names, first.at_least, first.above, first.read), (dest, verb)
            if dest != "max_concurrent":  # demo states its own default (2) in its help
                assert flag.help == first.help, (dest, verb)


def test_every_verb_that_reads_a_root_takes_storage():
    for verb, spec in cli.VERBS.items():
        dests = {f.name for f, _ in flagged(spec.arguments)}
        assert ("root" in dests) == ("storage" in dests), verb
    assert {verb for verb, spec in cli.VERBS.items()
            if "root" in {f.name for f, _ in flagged(spec.arguments)}} == {
        "run", "resume", "status", "export", "dashboard", "serve", "demo"}


def test_gpus_per_trial_has_one_meaning(monkeypatch):
    """plan and train resolve the default by the device they plan or train on; run by this
    machine (option_groups.gpus_here): a GPU a trial where there is one, else 0."""
    from shapesweep.sweep.options import option_groups

    assert cli.parse(["plan", "tiny"]).gpus_per_trial is None
    assert cli.parse(["train", "c.yaml"]).gpus_per_trial is None
    monkeypatch.setattr(option_groups, "has_gpu", lambda: False)
    assert cli.parse(["run", "tiny"]).gpus_per_trial == 0.0
    monkeypatch.setattr(option_groups, "has_gpu", lambda: True)
    assert cli.parse(["run", "tiny"]).gpus_per_trial == 1.0
    assert cli.parse(["run", "tiny", "--gpus-per-worker", "0.5"]).gpus_per_trial == 0.5


def test_help_imports_no_verb_module():
    """`--help` builds every parser from the light declarations: no verb module, no torch,
    Ray or numpy (a fresh interpreter, as the command starts)."""
    import subprocess
    import sys

    probe = ("import sys; from shapesweep.sweep.cli.main import build_parser; "
             "[build_parser().parse_known_args([v, 'x']) for v in ('run', 'plan')]; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray', 'numpy', "
             "'pandas', 'pydantic') or m.endswith('_command')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.slow
def test_a_declared_option_is_saved_for_resume_unless_declared_unsaved(local_ray, tmp_path):
    root = tmp_path / "sweeps"
    space = write_space(tmp_path, search={"n_layers": [1]})
    args = parser_for("run").parse_args(
        [str(space), "--root", str(root), "--no-progress", "--dummy-rate", "0.25",
         "--dummy-note", "hello"])
    assert run(arguments(WithDummy, args)) == 0
    name = "tiny-depths"
    saved = json.loads((Path(sweep_dir(str(root), name)) / OPTIONS_FILE).read_text())
    assert saved["dummy_rate"] == 0.25 and "dummy_note" not in saved and "root" not in saved
    assert load_options(str(root), name, WithDummy).dummy_rate == 0.25
    args = parser_for("resume").parse_args([name, "--root", str(root), "--no-progress"])
    assert resume(arguments(ResumeArgs, args), WithDummy) == 0  # nothing left to run; the options file written again
    saved = json.loads((Path(sweep_dir(str(root), name)) / OPTIONS_FILE).read_text())
    assert saved["dummy_rate"] == 0.25
