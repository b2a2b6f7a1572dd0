"""Data-parallel trials: N processes, each on its slice of every step's batch, train the
one-process model (real gloo process groups; a sweep's Ray Train trial is in test_fsdp.py),
through the one trial path (`fitting.train`), its out-of-memory retry included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from sweep_helpers import rendezvous, run, write_space
from test_memory import InjectedOOM

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import fitting
from shapesweep.trainers.loop import train
from shapesweep.trainers.spec import TrialSpec

TINY = dict(family="conventional", d_model=16, n_layers=2, n_heads=2, d_h=64)
RECIPE = dict(steps=12, seq_len=32, batch_tokens=256, eval_tokens=1024, lr=1e-2, eval_every=4)


def _rank(rank: int, world: int, init_method: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank,
                            world_size=world)
    try:
        result = train(make_config(TINY), TrainConfig(**RECIPE), checkpoint_dir=f"{out}.ckpt")
        Path(f"{out}.{rank}").write_text(json.dumps(result.curve))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_workers_train_the_one_worker_curve(tmp_path, one_torch_thread):
    whole = train(make_config(TINY), TrainConfig(**RECIPE))
    out = str(tmp_path / "curve")
    torch.multiprocessing.spawn(_rank, args=(2, rendezvous(Path(out).parent), out), nprocs=2)
    for rank in (0, 1):  # every rank sees the same (averaged) curve
        curve = json.loads(Path(f"{out}.{rank}").read_text())
        assert [m["step"] for m in curve] == [4, 8, 12]
        for key in ("train_loss", "val_loss"):
            assert [m[key] for m in curve] == pytest.approx([m[key] for m in whole.curve],
                                                            abs=1e-5)
    assert whole.curve[-1]["val_loss"] != whole.curve[0]["val_loss"]  # it did train
    # rank 0 alone wrote the checkpoint, at the last evaluation
    from shapesweep.trainers.checkpoint import saved_step

    assert saved_step(f"{out}.ckpt") == 12


def _oom_rank(rank: int, world: int, init_method: str, out: str) -> None:
    """A Ray Train worker's trial (`sweep.driver.trainable._worker`): its spec trained by
    `fitting.train` in a checkpoint folder of its own, out of memory at step 4 on every rank."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        spec = TrialSpec(make_config(TINY), TrainConfig(**RECIPE), device="cpu",
                         checkpoint_dir=f"{out}.ckpt{rank}")
        heard = []
        result, fitted = fitting.train(spec, InjectedOOM({4}, 1), on_retry=heard.append)
        Path(f"{out}.{rank}").write_text(json.dumps(
            {"curve": result.curve, "fitted": fitted.fields(), "heard": len(heard)}))
    finally:
        dist.destroy_process_group()


def test_a_data_parallel_trial_out_of_memory_retries_at_a_smaller_micro_batch(tmp_path):
    """Both ranks run out of memory at step 4's evaluation (after its checkpoint, which rank 0
    alone wrote); both retry at half the micro-batch from that checkpoint and finish on the
    one-process curve."""
    whole = train(make_config(TINY), TrainConfig(**RECIPE))
    out = str(tmp_path / "oom")
    torch.multiprocessing.spawn(_oom_rank, args=(2, rendezvous(tmp_path), out), nprocs=2)
    per_step = RECIPE["batch_tokens"] // RECIPE["seq_len"]
    for rank in (0, 1):
        done = json.loads(Path(f"{out}.{rank}").read_text())
        assert done["heard"] == 1 and done["fitted"]["oom_retries"] == 1
        assert done["fitted"]["micro_batch_size"] == per_step // 2
        # resumed from rank 0's checkpoint at step 4 (rank 1's folder has none): 8 and 12 again
        assert [m["step"] for m in done["curve"]] == [4, 8, 12]
        for key in ("train_loss", "val_loss"):
            assert [m[key] for m in done["curve"]] == pytest.approx(
                [m[key] for m in whole.curve], abs=1e-5)


@pytest.mark.parametrize("workers, problem", [("0", "must be at least 1"),
                                              ("1000", "do not fit this machine's")])
def test_workers_per_trial_that_cannot_run_are_one_line(tmp_path, capsys, workers, problem):
    root = tmp_path / "sweeps"
    assert run("run", str(write_space(tmp_path)), "--root", str(root),
               "--workers-per-trial", workers) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--workers-per-trial: " in line and problem in line
    assert not root.exists()
