"""`export`'s files are named by variant (`01-baseline.yaml`), and its `--out` never mixes two
exports: an earlier export's files are replaced, anything else is refused unless `--force`.

The sweep is written through the real results store (no Ray)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from shapesweep.results.store import write_trial
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import config_key, make_config
from shapesweep.sweep.cli.main import main

TRAIN = dict(steps=3, seq_len=32, batch_tokens=256, eval_tokens=512, lr=1e-2)
CANDIDATES = [  # (variant, fields), best first
    ("baseline", dict(family="conventional", d_model=32, n_layers=2, n_heads=2, d_h=96)),
    ("hourglass wide/1", dict(family="hourglass", d_model=32, n_layers=2, n_heads=2, d_h=16, k=2)),
    ("", dict(family="conventional", d_model=32, n_layers=3, n_heads=2, d_h=64)),  # no variant
]


def _sweep(root) -> list[dict]:
    rows = []
    for rank, (variant, fields) in enumerate(CANDIDATES):
        config = make_config(fields)
        document = {"family": config.family, "model": config.model_dump(mode="json", exclude={"family"}),
                    "train": TRAIN}
        row = {"trial_id": f"t{rank}", "key": config_key(config), "family": config.family,
               "variant": variant, "seed": 0, "status": "completed", "val_loss": 2.0 + rank,
               "config_json": json.dumps(document), **account(config, seq_len=32).to_dict()}
        write_trial(str(root), "s", row, [])
        rows.append(row)
    return rows


def _export(tmp_path, top: int, *extra: str) -> int:
    return main(["export", "s", "--root", str(tmp_path / "root"), "--top", str(top),
                 "--out", str(tmp_path / "best"), *extra])


def _files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_exported_files_are_named_by_rank_and_variant_and_keep_their_key(tmp_path, capsys):
    rows = _sweep(tmp_path / "root")
    assert _export(tmp_path, 3) == 0
    names = ["01-baseline.yaml", "02-hourglass-wide-1.yaml", "03-conventional.yaml"]
    assert capsys.readouterr().out.split() == [str(tmp_path / "best" / n) for n in names]
    for name, row in zip(names, rows, strict=True):
        assert yaml.safe_load((tmp_path / "best" / name).read_text())["provenance"]["key"] == row["key"]


def test_an_export_replaces_the_earlier_one_in_its_folder(tmp_path, capsys):
    """The README's first hour run twice: the second export replaces the first's files,
    so `train best/01-*.yaml` still matches one file."""
    _sweep(tmp_path / "root")
    assert _export(tmp_path, 3) == 0
    assert _export(tmp_path, 3) == 0
    assert _export(tmp_path, 1) == 0  # fewer: the earlier 02 and 03 go
    capsys.readouterr()
    assert _files(tmp_path / "best") == ["01-baseline.yaml"]


def test_a_folder_holding_other_files_is_refused_unless_forced(tmp_path, capsys):
    _sweep(tmp_path / "root")
    best = tmp_path / "best"
    best.mkdir()
    (best / "notes.txt").write_text("mine")
    assert _export(tmp_path, 2) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"shapesweep export: error: {best}: --out: holds files no earlier export wrote "
                   "(notes.txt): give an empty or new folder, or --force to write beside them"]
    assert _files(best) == ["notes.txt"]  # nothing written

    assert _export(tmp_path, 2, "--force") == 0
    assert _files(best) == ["01-baseline.yaml", "02-hourglass-wide-1.yaml", "notes.txt"]
    assert _export(tmp_path, 1, "--force") == 0  # the earlier export's files go, the user's stay
    assert _files(best) == ["01-baseline.yaml", "notes.txt"]


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    _sweep(tmp_path / "root")
    (tmp_path / "best").write_text("x")
    assert _export(tmp_path, 1) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"shapesweep export: error: {tmp_path / 'best'}: --out: is a file, not a folder"]


def test_a_language_models_export_carries_no_image_task_keys(tmp_path, capsys):
    """`batch_size` (images per step) and `noise_std` (denoising) are settings no language model
    reads: its export leaves them out, also from rows filed with them; a vision one keeps them."""
    from shapesweep.search_spaces.configs import TrainConfig, train_document
    from shapesweep.search_spaces.solver import candidate_document, plan
    from shapesweep.search_spaces.space import load_space

    root = tmp_path / "root"
    config = make_config(CANDIDATES[0][1])
    filed = {"family": config.family, "model": config.model_dump(mode="json", exclude={"family"}),
             "train": TrainConfig(**TRAIN).model_dump(mode="json", exclude_none=True)}  # every key
    assert {"batch_size", "noise_std"} <= set(filed["train"])
    write_trial(str(root), "s", {"trial_id": "t0", "key": config_key(config), "family": config.family,
                                 "variant": "baseline", "seed": 0, "status": "completed", "val_loss": 2.0,
                                 "config_json": json.dumps(filed), **account(config, seq_len=32).to_dict()}, [])
    assert _export(tmp_path, 1) == 0
    exported = yaml.safe_load((tmp_path / "best" / "01-baseline.yaml").read_text())
    assert not {"batch_size", "noise_std"} & set(exported["train"]) and exported["train"]["lr"] == 1e-2
    capsys.readouterr()

    space = load_space("demo-ucurve")
    candidate = plan(space).candidates[0]
    document = candidate_document(candidate, space.train_for(candidate=candidate))
    assert not {"batch_size", "noise_std"} & set(document["train"])
    assert train_document({"batch_size": 64, "noise_std": 0.1}, "vision_mlp") == {"batch_size": 64,
                                                                                  "noise_std": 0.1}


def test_a_manifest_naming_paths_outside_the_folder_removes_nothing_there(tmp_path, capsys):
    """The manifest is read, never trusted: only names an export writes count as its files."""
    _sweep(tmp_path / "root")
    best = tmp_path / "best"
    best.mkdir()
    (tmp_path / "keep.txt").write_text("mine")
    (best / ".shapesweep-export.json").write_text(json.dumps({"files": ["..", "../keep.txt", "/etc"]}))
    assert _export(tmp_path, 1) == 0
    capsys.readouterr()
    assert (tmp_path / "keep.txt").read_text() == "mine" and (tmp_path / "root").is_dir()
    assert _files(best) == ["01-baseline.yaml"]


def _sweep_of(root, n: int) -> None:
    """`n` conventional candidates of distinct depth, best first (`--format torch` takes them)."""
    for rank in range(n):
        config = make_config(dict(family="conventional", d_model=32, n_layers=1 + rank, n_heads=2,
                                  d_h=64))
        document = {"family": config.family, "train": TRAIN,
                    "model": config.model_dump(mode="json", exclude={"family"})}
        write_trial(str(root), "s", {"trial_id": f"t{rank}", "key": config_key(config),
                                     "family": config.family, "variant": f"v{rank}", "seed": 0,
                                     "status": "completed", "val_loss": 2.0 + rank,
                                     "config_json": json.dumps(document),
                                     **account(config, seq_len=32).to_dict()}, [])


def _killed_midway(tmp_path, command: list[str]) -> list[str]:
    """Start `command` (an export into tmp_path/best), SIGKILL it as soon as a temporary of its
    appears there, and return the temporaries it left (none when it got past them first)."""
    best = tmp_path / "best"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mine = f".{process.pid}.tmp"
    try:
        deadline = time.monotonic() + 120  # a loaded machine imports torch slowly
        while process.poll() is None and time.monotonic() < deadline:
            if best.is_dir() and any(p.name.endswith(mine) for p in best.iterdir()):
                process.send_signal(signal.SIGKILL)
                break
    finally:
        process.kill()
        process.wait()
    return sorted(p.name for p in best.iterdir() if p.name.endswith(mine)) if best.is_dir() else []


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_an_export_removes_the_temporaries_a_killed_export_left(tmp_path, capsys):
    """An export SIGKILLed mid-write leaves its `.NN-NAME.PID.tmp` folder; the next export into
    that folder removes it (its PID is dead), and keeps a live process's temporary."""
    _sweep_of(tmp_path / "root", 6)
    command = [sys.executable, "-m", "shapesweep.sweep.cli", "export", "s", "--root",
               str(tmp_path / "root"), "--top", "6", "--format", "torch", "--out",
               str(tmp_path / "best")]
    best, left = tmp_path / "best", []
    for _ in range(5):  # the kill may land between two folders: try again
        left = _killed_midway(tmp_path, command)
        if left:
            break
    assert left and all(re.fullmatch(r"\.\d\d-v\d+\.\d+\.tmp", name) for name in left), left
    live = best / f".01-v0.{os.getppid()}.tmp"  # a live process's (another export still writing): kept
    live.mkdir()
    assert main(["export", "s", "--root", str(tmp_path / "root"), "--top", "2", "--format", "torch",
                 "--out", str(best)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in best.iterdir() if p.name.startswith(".")) == [
        live.name, ".shapesweep-export.json"]
    assert _files(best) == ["01-v0", "02-v1"]
