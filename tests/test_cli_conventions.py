"""The conventions a command-line tool is expected to keep: `--version`, shell completion
(bash and zsh, from shtab), JSON from `spaces` and from `status` without a name, `spaces`
at 80 columns, one encoding of a list in every CSV. Exit codes 0 / 1 / 2 are held by the
sweep tests (a sweep with failed trials exits 1: tests/test_sweep_run.py) and every bad-input
test (2).

Real processes and shells: the console entry point in a subprocess, the completion scripts
sourced by a real bash and zsh; sweeps written through the real results store.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import version

import pytest

from shapesweep.results.store import write_trial
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import config_key, make_config
from shapesweep.search_spaces.space import list_builtin
from shapesweep.sweep.cli.main import main

CLI = [sys.executable, "-m", "shapesweep.sweep.cli"]
BUILTINS = dict(list_builtin())
WIDE = {"family": "variable_width", "d_model": 32, "n_layers": 3, "n_heads": 2, "d_h": 64,
        "alpha": 0.5, "shape": "grow"}  # per-layer widths: a list column


def _shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:  # `make shells` installs it; missing is a failure, not a skip
        pytest.fail(f"{name} is not installed (make shells)", pytrace=False)
    return found


def _completion(shell: str, tmp_path) -> str:
    script = subprocess.run([*CLI, "--print-completion", shell], capture_output=True, text=True,
                            check=True).stdout
    path = tmp_path / f"_shapesweep.{shell}"
    path.write_text(script)
    return str(path)


def test_version_is_the_installed_packages():
    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == f"shapesweep {version('shapesweep')}\n"


@pytest.mark.parametrize(("words", "expected"), [
    (["sta"], ["status"]),
    (["run", "--sched"], ["--scheduler"]),
    (["export", "best", "--format", ""], ["hf", "json", "litgpt", "torch", "yaml"]),
    (["spaces", "--for"], ["--format"]),
])
def test_bash_completes_verbs_options_and_choices(tmp_path, words, expected):
    script = _completion("bash", tmp_path)
    line = " ".join(["shapesweep", *words])
    probe = (f'source {script}; COMP_WORDS=(shapesweep {" ".join(repr(w) for w in words)}); '
             f'COMP_CWORD={len(words)}; COMP_LINE={line!r}; COMP_POINT={len(line)}; '
             '_shtab_shapesweep; printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run([_shell("bash"), "-c", probe], capture_output=True, text=True, check=True)
    assert sorted(done.stdout.split()) == expected


@pytest.mark.system  # zsh: `make shells`
def test_zsh_loads_the_completion_function_for_shapesweep(tmp_path):
    folder = tmp_path / "completions"
    folder.mkdir()
    shutil.copy(_completion("zsh", tmp_path), folder / "_shapesweep")  # as the README installs it
    probe = (f"fpath=({folder} $fpath); autoload -U compinit; compinit -u -d {tmp_path}/zcompdump; "
             "print -r -- $_comps[shapesweep]; autoload +X _shapesweep; "
             "print -r -- ${functions[_shapesweep]}")
    done = subprocess.run([_shell("zsh"), "-f", "-c", probe], capture_output=True, text=True,
                          check=True)
    registered, body = done.stdout.split("\n", 1)
    assert registered == "_shapesweep"
    assert all(verb in body for verb in ("status", "run", "export", "spaces"))


def test_spaces_fits_80_columns_one_line_a_space(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["spaces", "--fast"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for name in BUILTINS:
        (line,) = [line for line in lines if line.split(" ", 1)[0] == name]
        assert "…" in line or BUILTINS[name] in line  # cut to fit, or whole
        assert len(line.rstrip().rsplit(" ", 1)[-1]) >= 1  # the description column is there
    header = next(line for line in lines if line.startswith("name "))
    assert len(header) - header.index("description") >= 20  # room for words, not a stub
    # --wide: every description in full (wrapped at the terminal, so compared word by word)
    assert main(["spaces", "--fast", "--wide"]) == 0
    words = capsys.readouterr().out.split()
    text = " ".join(words)
    assert all(" ".join(description.split()) in text for description in BUILTINS.values())


def test_spaces_as_json(capsys):
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    assert main(["spaces", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in records] == list(BUILTINS)
    for record in records:
        space = load_space(record["name"])
        assert record["description"] == BUILTINS[record["name"]]
        assert record["families"] == space.families and record["error"] is None
        assert record["candidates"] == plan(space).counts["unique"]
        assert record["budget"]["tolerance"] == space.budget.tolerance


def _trials(root, sweep: str, fields: dict, statuses: list[str]) -> None:
    """One trial per status, seeds 0.. (the real results store)."""
    config = make_config(fields)
    for seed, status in enumerate(statuses):
        write_trial(root, sweep, {
            "trial_id": f"{sweep}-{seed}", "key": config_key(config), "family": config.family,
            "variant": "baseline", "seed": seed, "status": status,
            "val_loss": None if status == "failed" else 3.0 + seed,
            "config_json": {"family": config.family, "model": config.model_dump(mode="json")},
            **account(config, seq_len=32).to_dict()}, [])


def test_status_without_a_name_as_json_and_csv(tmp_path, capsys):
    root = str(tmp_path / "sweeps")
    _trials(root, "alpha", WIDE, ["completed", "completed", "failed"])
    conventional = {k: v for k, v in WIDE.items() if k not in ("alpha", "shape")}
    _trials(root, "beta", {**conventional, "family": "conventional"}, ["stopped_early"])
    assert main(["status", "--root", root, "--format", "json"]) == 0
    sweeps = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    assert sorted(sweeps) == ["alpha", "beta"]
    assert (sweeps["alpha"]["completed"], sweeps["alpha"]["failed"]) == (2, 1)
    assert sweeps["alpha"]["best_val_loss"] == 3.0 and sweeps["beta"]["stopped_early"] == 1
    assert sweeps["beta"]["best_val_loss"] is None  # none completed
    assert main(["status", "--root", root, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["name"] for r in rows] == list(sweeps) and rows[0]["failed"] == "1"


def test_every_csv_writes_a_list_one_way(tmp_path, capsys):
    """`widths`, in `plan --format csv` and `status NAME --format csv` alike: space-separated."""
    root = str(tmp_path / "sweeps")
    _trials(root, "alpha", WIDE, ["completed", "completed"])
    expected = " ".join(str(w) for w in account(make_config(WIDE), seq_len=32).widths)
    assert re.fullmatch(r"\d+( \d+)+", expected)
    assert main(["status", "alpha", "--root", root, "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert row["widths"] == expected
    assert main(["plan", "vformer-shapes-small", "--format", "csv"]) == 0
    planned = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert planned and all(re.fullmatch(r"\d+( \d+)*", r["widths"]) for r in planned)
