"""Adaptive measure seeds end to end (issue 58): `seeds: {min: 2, max: 4}` runs in rounds, a
clearly worse candidate is resolved at an early look and gets no more seeds, `status` says
per candidate the seeds it used, the look that decided it and why it stopped; a driver
killed between rounds resumes the round and never decides a look again; bad input is one
line, exit 2, before any work. (The design's error control is tests/test_sequential.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_helpers import CHILD_ENV, TINY_TRAIN, raw_trial_rows, run, write_space

from shapesweep.results.adaptive import LOOKS_FILE
from shapesweep.results.store import load_trials, sweep_dir
from shapesweep.sweep.cli.main import main

MAX = 4
# Four shapes at one budget: `frozen` barely trains (lr 1e-6: its loss stays near ln 256, about
# 1 nat above the others), so its comparison resolves at the first look that can resolve one
# (look 2: on 2 seeds O'Brien-Fleming asks |t| ~1000); the others differ from the baseline by
# far less and run until resolved, futile or max.
ADAPTIVE = {
    "name": "adaptive", "family": "conventional",
    "budget": {"non_embedding_params": 30912, "tolerance": 0.05},
    "fixed": {"d_model": 32, "n_heads": 2, "vocab_size": 256}, "solve": "d_h",
    "variants": [{"name": "baseline", "fixed": {"n_layers": 2}},
                 {"name": "deep", "fixed": {"n_layers": 4}},
                 {"name": "slow", "fixed": {"n_layers": 3}, "train": {"lr": 1.0e-3}},
                 {"name": "frozen", "fixed": {"n_layers": 1}, "train": {"lr": 1.0e-6}}],
    "train": TINY_TRAIN, "seeds": {"min": 2, "max": MAX},
}


def _status(root: Path, name: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["status", name, "--root", str(root), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _looks(root: Path, name: str) -> dict | None:
    path = Path(sweep_dir(str(root), name)) / LOOKS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _check_finished(root: Path, name: str, capsys) -> dict:
    """What every finished adaptive sweep of ADAPTIVE shows, whatever the machine's losses."""
    document = _status(root, name, capsys)
    assert document["seed_design"]["kind"] == "adaptive" and document["seed_design"]["max"] == MAX
    by = {c["variant"]: c for c in document["candidates"]}
    frozen = by["frozen"]
    assert frozen["stopped"] == "resolved" and frozen["sequential_state"] == "resolved-worse"
    assert frozen["decided_look"] == 2 and frozen["seeds_used"] == 3  # resolved early: no 4th seed
    others = [c for v, c in by.items() if v != "baseline"]
    for c in others:  # every comparison stopped, with its reason, on 2..max seeds
        assert c["stopped"] in ("resolved", "futile", "max") and 2 <= c["seeds_used"] <= MAX, c
        assert c["decided_look"] == c["seeds_used"] - 1  # one look a seed, from 2
        assert c["n_seeds"] == c["seeds_used"]  # it ran exactly the seeds it was given
    assert by["baseline"]["seeds_used"] == max(c["seeds_used"] for c in others)  # paired
    trials = load_trials(str(root), [name])
    assert len(trials) == sum(c["seeds_used"] for c in by.values()) < len(by) * MAX
    assert (trials["status"] == "completed").all()
    rows = raw_trial_rows(root, name)
    assert rows["trial_id"].is_unique  # no trial ran twice
    return document


def _ray_trials(root: Path, sweep: str) -> list[set[str]]:
    """The trial ids each driver's Tune experiments started, one set per experiment, oldest first."""
    folder = Path(sweep_dir(str(root), sweep)) / "_ray"
    return [{p.name for p in e.iterdir() if p.is_dir()}
            for e in sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime)]


@pytest.mark.slow
def test_a_worse_candidate_stops_early_and_a_driver_killed_between_rounds_resumes(local_ray, tmp_path,
                                                                                 capsys):
    """One adaptive sweep, its driver SIGKILLed once its first look is made, then resumed: the
    resume makes no look again and runs no trial the store held, and the sweep ends as an
    uninterrupted one does (its rounds 2 on, each followed by its look, run in the resuming
    driver): `frozen` resolved worse at look 2 on 3 seeds, every comparison stopped with its
    reason, status says why. (An uninterrupted sweep of the same space was a test of its own,
    the same checks: 30 s quiet.)"""
    space, root = write_space(tmp_path, {**ADAPTIVE, "name": "killed"}), tmp_path / "sweeps"
    args = ("--root", str(root), "--max-concurrent", "2")
    driver = subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space), *args,
                               "--no-progress"], env=CHILD_ENV, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 480
    while _looks(root, "killed") is None:  # the first look made: round 2 is starting
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, "no look made"
        time.sleep(0.1)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    first = _looks(root, "killed")
    held = set(load_trials(str(root), ["killed"])["trial_id"])
    assert len(first["looks"]) in (1, 2)  # killed after look 1 (rarely, round 2 was quick)

    assert run("resume", "killed", *args) == 0
    again = _looks(root, "killed")
    assert again["looks"][: len(first["looks"])] == first["looks"]  # no look decided again
    _check_finished(root, "killed", capsys)
    resumed = set().union(*_ray_trials(root, "killed")[1:])  # the resume's rounds
    assert not resumed & held  # no trial the store held ran again
    assert [look["seeds"] for look in again["looks"]] == list(range(2, 2 + len(again["looks"])))
    assert len(again["looks"][0]["ran"]) == 4  # round 1: every candidate and the baseline
    capsys.readouterr()
    assert main(["status", "killed", "--root", str(root)]) == 0
    text = capsys.readouterr().out
    assert "adaptive seeds 2-4" in text and "frozen: 3 seeds, stopped at look 2: resolved (worse)" in text


def _refused(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("seeds", "says"), [
    ({"min": 1, "max": 4}, "seeds.min: adaptive seeds start at 2"),
    ({"min": 3, "max": 2}, "max=2 is less than min=3"),
    ({"min": 2, "max": 4.5}, "whole number"),
    ({"min": "two", "max": 4}, "whole number")])
def test_a_bad_range_in_the_space_is_one_line_naming_the_file(tmp_path, capsys, seeds, says):
    space, root = write_space(tmp_path, {**ADAPTIVE, "seeds": seeds}), tmp_path / "sweeps"
    err = _refused(capsys, "run", str(space), "--root", str(root), "--no-progress")
    assert str(space) in err and says in err, err
    assert not root.exists()


@pytest.mark.parametrize(("argv", "says"), [
    (["--seeds", "min=1,max=4"], "--seeds: adaptive seeds start at 2"),
    (["--seeds", "min=4,max=3"], "--seeds: max=3 is less than min=4"),
    (["--seeds", "min=2,max=x"], "--seeds: expected a whole number"),
    (["--min-effect", "0"], "--min-effect: must be more than 0"),
    (["--min-effect", "nan"], "--min-effect"),
    (["--scheduler", "asha"], "--scheduler: adaptive seeds look after whole rounds of trials; ASHA"),
    (["--search", "optuna"], "--search: adaptive seeds need a grid")])
def test_bad_flags_for_adaptive_seeds_are_refused_before_any_work(tmp_path, capsys, argv, says):
    space, root = write_space(tmp_path, ADAPTIVE), tmp_path / "sweeps"
    err = _refused(capsys, "run", str(space), "--root", str(root), "--no-progress", *argv)
    assert says in err, err
    assert not root.exists()


def test_adaptive_seeds_without_a_baseline_are_refused(tmp_path, capsys):
    variants = [{**v, "name": "base"} if v["name"] == "baseline" else v for v in ADAPTIVE["variants"]]
    space, root = write_space(tmp_path, {**ADAPTIVE, "variants": variants}), tmp_path / "sweeps"
    err = _refused(capsys, "run", str(space), "--root", str(root), "--no-progress")
    assert f"{space}: seeds: adaptive seeds compare each candidate with one baseline" in err, err
    assert not root.exists()


def test_the_dry_run_of_an_adaptive_sweep_passes(tmp_path, capsys):
    space, root = write_space(tmp_path, ADAPTIVE), tmp_path / "sweeps"
    capsys.readouterr()
    assert main(["run", str(space), "--root", str(root), "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"adaptive seeds 2-{MAX}: at most {4 * MAX} trials" in out and "expected" in out, out
    assert "(the default)" in out  # where the expected figure comes from
    assert not root.exists()


def test_plan_prices_an_adaptive_range_from_the_stated_effect(tmp_path, capsys):
    space = write_space(tmp_path, ADAPTIVE)
    capsys.readouterr()
    assert main(["plan", str(space), "--min-effect", "0.05", "--seed-sd", "0.03"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("adaptive seeds"))
    most = int(line.split("at most ")[1].split()[0])
    expected = [float(p.split(" trials")[0].replace(",", "")) for p in line.split("expected ")[1].split("; ")]
    assert most == 4 * MAX and all(3 * 2 + 2 <= e <= most for e in expected), line  # between min and max
    assert "--min-effect 0.05)" in line and "sd of 0.03," in line  # what the figure comes from
