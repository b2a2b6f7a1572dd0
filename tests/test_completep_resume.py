"""A sweep saved when `depth_mup: completep` meant CompleteP over residual branches (the rule
now named `completep-subblocks`) is not resumed under Dey et al.'s L / L_base rule, which the
name means since 97b324d (issue 56): `resume` refuses it in one line saying how to go on,
before anything runs. A sweep saved since (its options file records `completep_rule`), or one
whose space names no `completep`, resumes as before. No training: `--dry-run` stops where a
sweep would start."""

from __future__ import annotations

import json

import pytest
import yaml
from sweep_helpers import TINY_SPACE, run

from shapesweep.results.store import read_sweep_file, sweep_dir, write_sweep_file
from shapesweep.sweep.driver.runner import OPTIONS_FILE, SPACE_FILE, SweepOptions
from shapesweep.sweep.driver.sweep_files import COMPLETEP_KEY, COMPLETEP_RULE

NAME = "old-completep"
TRAIN = {**TINY_SPACE["train"], "init": "mup", "mup_base_width": 32, "mup_base_depth": 2}


def saved_sweep(root: str, depth_mup: str | None, marked: bool, where: str = "train") -> None:
    """A sweep folder as `run` writes one: sweep.json (with or without the rule key) and the
    space it ran, with `depth_mup` in its train recipe or in a variant's."""
    space = {**TINY_SPACE, "name": NAME, "train": TRAIN}
    if depth_mup is not None and where == "train":
        space["train"] = {**TRAIN, "depth_mup": depth_mup}
    elif depth_mup is not None:
        space = {key: value for key, value in space.items() if key != "search"}
        space["variants"] = [{"name": "baseline", "fixed": {"n_layers": 2}},
                             {"name": "deep", "fixed": {"n_layers": 4}, "train": {"depth_mup": depth_mup}}]
    options = SweepOptions(space=SPACE_FILE, name=NAME, root=root, seeds=[0])
    saved = {**options.__dict__, **({COMPLETEP_KEY: COMPLETEP_RULE} if marked else {})}
    write_sweep_file(root, NAME, OPTIONS_FILE, json.dumps(saved))
    write_sweep_file(root, NAME, SPACE_FILE, yaml.safe_dump(space, sort_keys=False))


@pytest.mark.parametrize("where", ["train", "variant"])
def test_an_old_completep_sweep_is_refused_in_one_line(tmp_path, capsys, where):
    root = str(tmp_path / "root")
    saved_sweep(root, "completep", marked=False, where=where)
    before = read_sweep_file(root, NAME, OPTIONS_FILE)
    assert run("resume", NAME, "--root", root, "--dry-run") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert f"{sweep_dir(root, NAME)}/{SPACE_FILE}: depth_mup: sweep {NAME!r} started before" in line
    assert "before `depth_mup: completep` became Dey et al.'s L / L_base rule" in line
    assert "now `completep-subblocks`" in line and "under a new --name" in line
    assert read_sweep_file(root, NAME, OPTIONS_FILE) == before  # nothing rewritten


@pytest.mark.parametrize("depth_mup, marked", [("completep", True), ("completep-subblocks", False),
                                               ("tp6", False), (None, False)])
def test_a_sweep_of_todays_rule_or_another_resumes(tmp_path, capsys, depth_mup, marked):
    """Saved since the change (the key), or naming another rule: resume goes on (here, its
    dry run plans the sweep and exits 0)."""
    root = str(tmp_path / "root")
    saved_sweep(root, depth_mup, marked)
    assert run("resume", NAME, "--root", root, "--dry-run") == 0, capsys.readouterr().err
    assert "completep" not in capsys.readouterr().err
