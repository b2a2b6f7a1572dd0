"""An option is declared once: a field on the options model, and `run --help`, the range
check and the sweep's options file all follow from it (issue 26)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from sweep_helpers import write_space

from shapesweep.common import UserError
from shapesweep.results.store import sweep_dir
from shapesweep.sweep.options import option
from shapesweep.sweep.run_command import add_arguments_resume, add_arguments_run, resume, run
from shapesweep.sweep.runner import OPTIONS_FILE, load_options
from shapesweep.sweep.sweep_options import SweepOptions


@dataclass
class WithDummy(SweepOptions):
    """Two test-only options, each declared here and nowhere else."""

    dummy_rate: float = option(0.5, "--dummy-rate", "--dummy-speed", at_least=0,
                               help="a test-only rate, kept for resume")
    dummy_note: str = option("none", "--dummy-note", saved=False,
                             help="a test-only note, not kept")


def parser_for(add_arguments) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shapesweep run")
    add_arguments(parser, WithDummy)
    return parser


def test_a_declared_option_is_in_help_with_its_aliases_and_default():
    parser = parser_for(add_arguments_run)
    text = parser.format_help()
    assert "--dummy-rate DUMMY_RATE, --dummy-speed DUMMY_RATE" in text
    assert "a test-only rate, kept for resume" in text and "--dummy-note" in text
    assert "--dummy-rate" not in parser_for(add_arguments_resume).format_help()  # not resume=True
    assert parser.parse_args(["space"]).dummy_rate == 0.5
    assert parser.parse_args(["space", "--dummy-speed", "2"]).dummy_rate == 2.0  # typed from the field


def test_a_declared_range_refuses_a_bad_value_naming_its_flag(tmp_path):
    root = tmp_path / "sweeps"
    args = parser_for(add_arguments_run).parse_args(
        [str(write_space(tmp_path)), "--root", str(root), "--dummy-rate", "-1"])
    with pytest.raises(UserError) as refused:
        run(args, WithDummy)
    assert str(refused.value) == "--dummy-rate: must be 0 or more"
    assert not root.exists()


@pytest.mark.slow
def test_a_declared_option_is_saved_for_resume_unless_declared_unsaved(local_ray, tmp_path):
    root = tmp_path / "sweeps"
    space = write_space(tmp_path, search={"n_layers": [1]})
    args = parser_for(add_arguments_run).parse_args(
        [str(space), "--root", str(root), "--no-progress", "--dummy-rate", "0.25",
         "--dummy-note", "hello"])
    assert run(args, WithDummy) == 0
    name = "tiny-depths"
    saved = json.loads((Path(sweep_dir(str(root), name)) / OPTIONS_FILE).read_text())
    assert saved["dummy_rate"] == 0.25 and "dummy_note" not in saved and "root" not in saved
    assert load_options(str(root), name, WithDummy).dummy_rate == 0.25
    args = parser_for(add_arguments_resume).parse_args([name, "--root", str(root), "--no-progress"])
    assert resume(args, WithDummy) == 0  # nothing left to run; the options file written again
    saved = json.loads((Path(sweep_dir(str(root), name)) / OPTIONS_FILE).read_text())
    assert saved["dummy_rate"] == 0.25
