"""Sharded data parallel (FSDP2): N processes, each holding 1/N of the parameters, gradients
and AdamW state, train the one-process model; their checkpoints are the one-process ones
(real gloo process groups on CPU)."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors import safe_open
from sweep_helpers import TINY_TRAIN, rendezvous, run, write_space

from shapesweep.results.store import load_curves, load_trials, read_sweep_file
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.driver.trainable import PARALLEL_FIELD, WORKERS_FIELD
from shapesweep.trainers.checkpoint import WEIGHTS, saved_step
from shapesweep.trainers.distributed import fully_shard_model
from shapesweep.trainers.loop import StopTrial, train
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure

TIED = dict(family="conventional", d_model=16, n_layers=2, n_heads=2, d_h=64, tie_embeddings=True)
RECIPE = dict(steps=12, seq_len=32, batch_tokens=256, eval_tokens=1024, lr=1e-2, eval_every=4,
              micro_batch_size=2)


def _stop_at(step: int):
    def callback(metrics: dict) -> None:
        if metrics["step"] == step:
            raise StopTrial
    return callback


def _rank(rank: int, world: int, init_method: str, out: Path) -> None:
    """Train to step 4 and stop (a checkpoint there), copy it aside, then resume to the end."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank,
                            world_size=world)
    try:
        config, recipe = make_config(TIED), TrainConfig(**RECIPE)
        model = build_model(config)
        groups = fully_shard_model(model, configure(model, config, recipe), 8)
        assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in model.parameters()}
        local = sum(p.to_local().numel() for p in model.parameters())  # this rank's shard
        train(config, recipe, checkpoint_dir=str(out / "ckpt"), callback=_stop_at(4),
              parallel="fsdp")
        if rank == 0:
            shutil.copytree(out / "ckpt", out / "at-4")
        dist.barrier()
        result = train(config, recipe, checkpoint_dir=str(out / "ckpt"), parallel="fsdp",
                       save_dir=str(out / "saved"))
        (out / f"rank{rank}.json").write_text(json.dumps(
            {"curve": result.curve, "params": result.params_measured, "local": local}))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_sharded_workers_train_and_resume_the_one_worker_curve(tmp_path, one_torch_thread):
    config = make_config(TIED)
    whole = train(config, TrainConfig(**RECIPE))
    torch.multiprocessing.spawn(_rank, args=(2, rendezvous(tmp_path), tmp_path), nprocs=2)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    # each rank holds its half of the parameters (and so of their gradients and AdamW state)
    assert sum(done["local"] for done in ranks) == whole.params_measured
    assert all(done["local"] < 0.6 * whole.params_measured for done in ranks)
    for done in ranks:  # stopped at 4, resumed from the checkpoint: the uninterrupted curve
        assert [m["step"] for m in done["curve"]] == [4, 8, 12]
        for key in ("train_loss", "val_loss"):
            assert [m[key] for m in done["curve"]] == pytest.approx(
                [m[key] for m in whole.curve], abs=1e-5)
        # the sharded parameters count as the whole model, the tied table once
        assert done["params"] == whole.params_measured == account(config).params_total
    assert whole.curve[-1]["val_loss"] != whole.curve[0]["val_loss"]  # it did train
    assert saved_step(tmp_path / "ckpt") == 12
    with safe_open(str(tmp_path / "saved" / WEIGHTS), "pt") as saved:  # whole, tied, unsharded
        assert {k: saved.get_slice(k).get_shape() for k in saved.keys()} == {
            k: list(t.shape) for k, t in build_model(config).state_dict().items()}
    # a sharded run's checkpoint is a one-process one: one process resumes it to the same end
    resumed = train(config, TrainConfig(**RECIPE), checkpoint_dir=str(tmp_path / "at-4"))
    assert resumed.val_loss == pytest.approx(whole.val_loss, abs=1e-5)



def test_fsdp_over_one_worker_is_one_line(tmp_path, capsys):
    root = tmp_path / "sweeps"
    assert run("run", str(write_space(tmp_path)), "--root", str(root), "--parallel", "fsdp") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--parallel: fsdp shards" in line and "--workers-per-trial 2 or more" in line
    assert not root.exists()


@pytest.mark.parametrize(("space", "argv", "problem"), [
    ("vformer-moe-small", ["--workers-per-trial", "2", "--parallel", "fsdp"],
     "--parallel: fsdp cannot shard a mixture of experts"),
    # 2,048-token steps of 128-token sequences: 16 sequences do not split over 3 workers
    ("demo-ucurve", ["--workers-per-trial", "3", "--cpus-per-worker", "0.5"],
     "--workers-per-trial: a step's batch of 16 does not split evenly over 3 workers"),
])
def test_a_space_that_cannot_train_data_parallel_is_refused_before_the_sweep(
        tmp_path, capsys, space, argv, problem):
    root = tmp_path / "sweeps"
    assert run("run", space, "--root", str(root), *argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert problem in line
    assert not root.exists()


@pytest.mark.slow
def test_train_on_two_ray_workers_equals_one_worker(local_ray, tmp_path, capsys, one_torch_thread):
    """`shapesweep train --workers 2 --parallel fsdp`: a local Ray's two Ray Train workers
    give the plain one-process result; its --save and --checkpoint-dir are the usual ones."""
    import yaml

    from shapesweep.sweep.cli.main import main

    path = tmp_path / "winner.yaml"
    path.write_text(yaml.safe_dump({"family": "conventional", "model": TIED, "train": RECIPE}))

    def trained(*argv: str) -> dict:
        assert main(["train", str(path), "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    one = trained()
    on_ctrl_c = signal.getsignal(signal.SIGINT)
    two = trained("--workers", "2", "--parallel", "fsdp", "--checkpoint-dir",
                  str(tmp_path / "ckpt"), "--save", str(tmp_path / "saved"))
    assert signal.getsignal(signal.SIGINT) is on_ctrl_c  # Ray Train's own handler is gone
    assert two["val_loss"] == pytest.approx(one["val_loss"], abs=1e-5)
    assert two["steps"] == one["steps"] == 12 and two["params_measured"] == one["params_measured"]
    assert saved_step(tmp_path / "ckpt") == 12 and (tmp_path / "saved" / WEIGHTS).is_file()


def test_train_workers_that_cannot_run_are_one_line(tmp_path, capsys):
    import yaml

    from shapesweep.sweep.cli.main import main

    odd = tmp_path / "odd.yaml"  # three sequences a step
    odd.write_text(yaml.safe_dump({"family": "conventional", "model": TIED,
                                   "train": RECIPE | {"batch_tokens": 96}}))
    for argv, problem in ((["--workers", "0"], "--workers: must be at least 1"),
                          (["--parallel", "fsdp"], "--parallel: fsdp shards a model"),
                          (["--workers", "1000"], "--workers: 1000 workers x 1 CPUs do not fit"),
                          (["--workers", "2"], "--workers: a step's batch of 3 does not split")):
        assert main(["train", str(odd), *argv]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert problem in line
    moe = tmp_path / "moe.yaml"
    moe.write_text(yaml.safe_dump({"family": "conventional", "train": RECIPE,
                                   "model": TIED | {"n_experts": 4, "n_active_experts": 1}}))
    assert main(["train", str(moe), "--workers", "2", "--parallel", "fsdp"]) == 2
    assert "--parallel: fsdp cannot shard a mixture of experts" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sharded_sweep_trial_equals_a_one_process_run(local_ray, tmp_path, one_torch_thread):
    """`run --workers-per-trial 2 --parallel fsdp`: the option reaches each trial's Ray Train
    workers and is kept in sweep.json for `resume`; kept checkpoints are saved at every
    evaluation (rank 0's, gathered whole), so the one kept is the final state; the trial lands
    the one-process curve. (ddp takes the same Ray Train
    path; the loop's ddp is tested in test_data_parallel.py.)"""
    space_path = write_space(tmp_path, name="sharded", search={"n_layers": [2]},
                             train={**TINY_TRAIN, "tokens": 8 * TINY_TRAIN["batch_tokens"]})
    root = str(tmp_path / "sweeps")
    assert run("run", str(space_path), "--root", root, "--scheduler", "fifo",
               "--workers-per-trial", "2", "--parallel", "fsdp", "--keep-checkpoints") == 0
    (row,) = load_trials(root, ["sharded"]).itertuples()
    assert row.status == "completed", row.error
    document = json.loads(row.config_json)
    whole = train(make_config(document["model"] | {"family": document["family"]}),
                  TrainConfig(**document["train"]))
    assert row.val_loss == pytest.approx(whole.val_loss, abs=1e-5)
    curve = load_curves(root, ["sharded"])
    assert list(curve["step"]) == [m["step"] for m in whole.curve]
    assert list(curve["val_loss"]) == pytest.approx([m["val_loss"] for m in whole.curve], abs=1e-5)
    (kept,) = (tmp_path / "sweeps" / "sharded" / "_ray").glob("*/*/checkpoint_0*")
    assert saved_step(kept) == whole.curve[-1]["step"]
    assert json.loads(read_sweep_file(root, "sharded", "sweep.json"))["parallel"] == "fsdp"
    logged = [json.loads(line) for path in (tmp_path / "sweeps" / "sharded" / "_ray").glob(
        "*/*/result.json") for line in path.read_text().splitlines()]
    assert logged and {(r[WORKERS_FIELD], r[PARALLEL_FIELD]) for r in logged} == {(2, "fsdp")}


def _analysed_rank(rank: int, world: int, init_method: str, out: Path) -> None:
    """Train sharded with the representation analysis on; write this rank's layer rows."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank,
                            world_size=world)
    try:
        result = train(make_config(TIED), TrainConfig(**RECIPE, analysis=True), parallel="fsdp")
        (out / f"layers{rank}.json").write_text(json.dumps(result.layers))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_the_analysis_of_a_sharded_model_is_the_one_process_analysis(tmp_path, one_torch_thread):
    """The logit lens decodes with the root's (sharded) norm and unembedding: inside the
    forward pass, where FSDP has gathered them, every rank measures what one process does."""
    whole = train(make_config(TIED), TrainConfig(**RECIPE, analysis=True)).layers
    torch.multiprocessing.spawn(_analysed_rank, args=(2, rendezvous(tmp_path), tmp_path), nprocs=2)
    for rank in (0, 1):
        rows = json.loads((tmp_path / f"layers{rank}.json").read_text())
        assert len(rows) == len(whole)
        for mine, one in zip(rows, whole, strict=True):
            assert mine == pytest.approx(one, rel=1e-4, abs=1e-6)
