"""`shapesweep train`: a tiny model of every family learns real built-in data."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.cli.main import main
from shapesweep.trainers.data import builtin_corpus, unigram_entropy
from shapesweep.trainers.models import build_model
from shapesweep.trainers.vision_data import VisionTask, load_images

LM_TRAIN = dict(steps=60, seq_len=64, batch_tokens=2048, eval_tokens=4096, lr=1e-2, warmup_frac=0.1)
LM_MODELS = {
    "conventional": dict(d_model=32, n_layers=2, n_heads=2, d_h=128),
    "hourglass": dict(d_model=32, n_layers=2, n_heads=2, d_h=16, k=2),
    "variable_width": dict(d_model=32, n_layers=3, n_heads=2, d_h=128, shape="bottleneck", alpha=0.5),
}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _candidate(tmp_path, family, model, train) -> str:
    path = tmp_path / f"{family}.yaml"
    path.write_text(yaml.safe_dump({"family": family, "model": model, "train": train,
                                    "metrics": {"val_loss": 9.9}}))
    return str(path)


def _train_json(capsys, *argv) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("family", sorted(LM_MODELS))
def test_every_lm_family_beats_the_unigram_baseline(tmp_path, capsys, family):
    baseline = unigram_entropy(builtin_corpus().val)  # ~3.2 nats/byte for Python source
    path = _candidate(tmp_path, family, LM_MODELS[family], LM_TRAIN)
    summary = _train_json(capsys, path)
    assert summary["val_loss"] < baseline - 0.2, (summary["val_loss"], baseline)
    assert summary["tokens"] == 60 * 2048 and summary["steps"] == 60
    expected = sum(p.numel() for p in build_model(make_config({"family": family, **LM_MODELS[family]}))
                   .parameters())
    assert summary["params_measured"] == expected and summary["tokens_per_s"] > 0


@pytest.mark.parametrize("task, margin_db", [("denoise", 2.0), ("superres", 3.0), ("genclass", 5.0)])
def test_vision_tasks_beat_the_trivial_answer(tmp_path, capsys, task, margin_db):
    model = dict(d_x=16 if task == "superres" else 64, d_z=128, d_h=32, n_layers=2, task=task)
    summary = _train_json(capsys, _candidate(tmp_path, "vision_mlp", model,
                                             dict(steps=150, batch_size=64, lr=1e-2)))
    baseline = VisionTask(load_images(), task, 0.25, 0, 32768).baseline_psnr()
    assert summary["psnr"] > baseline + margin_db, (summary["psnr"], baseline)
    assert summary["tokens"] == 150 * 64 and 0 < summary["ssim"] <= 1
    if task == "genclass":
        assert summary["accuracy"] > 0.7  # chance is 0.1


def test_steps_and_tokens_override_and_table_output(tmp_path, capsys):
    path = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], {**LM_TRAIN, "steps": None,
                                                                           "tokens": "10M"})
    assert _train_json(capsys, path, "--steps", "3")["steps"] == 3
    assert _train_json(capsys, path, "--tokens", "8K")["tokens"] == 4 * 2048  # rounded up to steps
    assert main(["train", path, "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "val_loss" in out and "params_measured" in out and "conventional" in out
    assert "val_loss_se" in out and "train_loss_tail" in out  # xformer's reported loss, 2 steps in
    assert TrainConfig(**{**LM_TRAIN, "steps": None, "tokens": "10M"}).tokens == 10_000_000


def test_checkpoint_dir_resumes_a_finished_run(tmp_path, capsys):
    path = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], {**LM_TRAIN, "steps": 4})
    first = _train_json(capsys, path, "--checkpoint-dir", str(tmp_path / "ckpt"))
    again = _train_json(capsys, path, "--checkpoint-dir", str(tmp_path / "ckpt"))
    assert again["val_loss"] == first["val_loss"] and again["steps"] == 4


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    """In process, as `shapesweep train` runs it (`main`'s return is the exit status; the
    process's own exit path is test_sweep_startup's and the CLI tests')."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: conventional\nmodel: {d_model: 32, n_layers: 2, n_heads: 2, d_h: 0}\n")
    assert main(["train", str(bad), "--steps", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "model.d_h" in lines[0], lines
    wrong_data = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], LM_TRAIN)
    assert main(["train", wrong_data, "--data", str(tmp_path / "nowhere.txt")]) == 2
    assert "nowhere.txt: data path not found" in capsys.readouterr().err


def test_user_data_text_and_tokens(tmp_path, capsys):
    import hashlib

    import numpy as np

    text = tmp_path / "notes.txt"
    text.write_bytes(b"shapesweep trains tiny models on real bytes.\n" * 400)
    path = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], {**LM_TRAIN, "steps": 3})
    summary = _train_json(capsys, path, "--data", str(text))
    assert summary["data_hash"] == hashlib.sha256(text.read_bytes()).hexdigest()
    np.save(tmp_path / "ids.npy", (np.arange(20_000) * 7 % 1000).astype(np.uint16))
    wide = _candidate(tmp_path, "hourglass", {**LM_MODELS["hourglass"], "vocab_size": 1000},
                      {**LM_TRAIN, "steps": 3})
    assert _train_json(capsys, wide, "--data", str(tmp_path / "ids.npy"))["steps"] == 3
    assert main(["train", path, "--data", str(tmp_path / "ids.npy")]) == 2  # vocab 1000 > 256
    assert "vocab_size=256" in capsys.readouterr().err


def _train_subprocess(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "train", *argv],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_train_uses_the_threads_it_is_given_and_the_free_cores_by_default(tmp_path):
    """`--threads N` is what torch trains on, whatever OMP_NUM_THREADS says; the default is
    the free cores, never more than this process may use (`trainers.threads`)."""
    from shapesweep.trainers.threads import usable_cores

    path = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], {**LM_TRAIN, "steps": 2})
    run = _train_subprocess(path, "--threads", "1", "--json", env={"OMP_NUM_THREADS": "8"})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["threads"] == 1
    run = _train_subprocess(path, "--json", env={"OMP_NUM_THREADS": "64"})
    assert run.returncode == 0, run.stderr
    assert 1 <= json.loads(run.stdout)["threads"] <= usable_cores()


@pytest.mark.parametrize(("cores", "load", "free"), [(2, 0.0, 2), (2, 0.3, 2), (2, 0.7, 1), (2, 1.2, 1),
                                                     (2, 7.5, 1), (16, 4.2, 12)])
def test_free_cores_are_the_usable_ones_less_the_load_at_least_one(cores, load, free):
    from shapesweep.trainers.threads import free_cores

    assert free_cores(cores, load) == free


@pytest.mark.parametrize("threads", ["0", "100000"])
def test_threads_beyond_this_machine_are_one_line(tmp_path, capsys, threads):
    from shapesweep.trainers.threads import usable_cores

    path = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], LM_TRAIN)
    assert main(["train", path, "--threads", threads]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"shapesweep train: error: --threads: must be 1 to {usable_cores()} (the cores this process "
        f"may use), got {threads}"]


def test_train_given_several_files_says_so_in_one_line(tmp_path, capsys):
    """`train best/01-*.yaml` when the glob matches two files: one line, exit 2, nothing trained."""
    first = _candidate(tmp_path, "conventional", LM_MODELS["conventional"], LM_TRAIN)
    second = _candidate(tmp_path, "hourglass", LM_MODELS["hourglass"], LM_TRAIN)
    assert main(["train", first, second, "--steps", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"shapesweep train: error: CONFIG: train takes one config file, got 2: {first}, {second}"]
