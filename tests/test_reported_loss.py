"""The xformer paper's reported loss (the training loss over a run's last steps, every 10th) and the
standard error of the evaluation, through the real loop on the built-in corpus and the real
results store."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F

from shapesweep.results.rows import TrialRecord, final_metrics
from shapesweep.results.store import load_trials
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.loop import StopTrial, evaluate, make_task, train
from shapesweep.trainers.loss_tail import LossTail
from shapesweep.trainers.models import build_model

CONFIG = {"family": "conventional", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_h": 64,
          "vocab_size": 256}
# eval_every 1: each curve point's train_loss is that one step's loss
RECIPE = {"steps": 45, "seq_len": 32, "batch_tokens": 256, "eval_tokens": 2048, "eval_every": 1,
          "loss_tail_steps": 20}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def test_the_tail_samples_every_tenth_step_back_from_the_last():
    tail = LossTail(steps=45, window=20)
    assert [d for d in range(1, 46) if tail.sampled(d)] == [35, 45]
    assert [d for d in range(1, 46) if LossTail(45, 1000).sampled(d)] == [5, 15, 25, 35, 45]  # capped
    assert [d for d in range(1, 3001) if LossTail(3000, 1000).sampled(d)] == list(range(2010, 3001, 10))
    pairs = [torch.tensor([9.0, float(d)]) for d in range(31, 41)]  # (objective, reported) of 31..40
    tail.add(pairs, 40)
    assert tail.values == [35.0] and tail.mean() is None  # step 45 not in yet
    tail.add([torch.tensor([9.0, 45.0])], 45)
    assert tail.mean() == 40.0


def test_a_run_reports_the_mean_training_loss_of_its_last_steps():
    result = train(make_config(CONFIG), TrainConfig(**RECIPE))
    losses = {point["step"]: point["train_loss"] for point in result.curve}
    assert result.train_loss_tail == pytest.approx((losses[35] + losses[45]) / 2, rel=1e-12)
    assert result.to_dict()["train_loss_tail"] == result.train_loss_tail  # what `train --json` prints


def test_a_resumed_run_counts_the_samples_before_its_checkpoint(tmp_path):
    """Stopped at step 40 (a checkpoint there, one sample in), resumed to the end: the same
    tail as the uninterrupted run; the stopped run itself reports none."""
    whole = train(make_config(CONFIG), TrainConfig(**RECIPE))

    def stop(metrics):
        if metrics["step"] == 40:
            raise StopTrial
    stopped = train(make_config(CONFIG), TrainConfig(**RECIPE), callback=stop,
                    checkpoint_dir=str(tmp_path))
    assert stopped.stopped and stopped.train_loss_tail is None
    resumed = train(make_config(CONFIG), TrainConfig(**RECIPE), checkpoint_dir=str(tmp_path))
    assert resumed.train_loss_tail == pytest.approx(whole.train_loss_tail, rel=1e-9)


def test_the_evaluation_states_its_standard_error_over_held_out_sequences():
    """val_loss_se = std(ddof 1) / sqrt(n) of the held-out sequences' mean cross-entropies."""
    config, recipe = make_config(CONFIG), TrainConfig(**RECIPE)
    torch.manual_seed(0)
    model = build_model(config)
    task = make_task(config, recipe, None, None)[0]
    grads = []
    model.register_forward_hook(lambda *_: grads.append(torch.is_grad_enabled()))
    metrics = evaluate(model, task, 16, torch.device("cpu"), contextlib.nullcontext)
    assert grads and not any(grads)  # evaluation builds no autograd graph
    with torch.no_grad():
        per_token = F.cross_entropy(model(task.val_x).flatten(0, 1), task.val_y.flatten(), reduction="none")
    per_sequence = per_token.double().view(task.val_y.shape).mean(1)
    assert len(per_sequence) == 2048 // 32
    assert metrics["val_loss"] == pytest.approx(per_sequence.mean().item(), rel=1e-6)
    assert metrics["val_loss_se"] == pytest.approx(
        per_sequence.std().item() / math.sqrt(len(per_sequence)), rel=1e-6)


def test_the_trial_row_keeps_both(tmp_path):
    """A finished trial's row carries train_loss_tail and val_loss_se; a stopped one's only
    the standard error of its last evaluation."""
    result = train(make_config(CONFIG), TrainConfig(**RECIPE))
    last = result.to_dict()
    metrics = final_metrics(last, result.curve, "completed")
    assert metrics["train_loss_tail"] == result.train_loss_tail
    assert metrics["val_loss_se"] == result.val_loss_se == result.curve[-1]["val_loss_se"] > 0
    assert final_metrics(result.curve[-1], result.curve, "stopped_early")["train_loss_tail"] is None
    row = {"key": "k", "family": "conventional", "variant": "baseline"}
    TrialRecord(sweep="s", trial_id="t", key="k", seed=0, status="completed", candidate=row,
                document={"family": "conventional", "model": {}, "train": {}}, budget_tokens=1,
                metrics=metrics).write(str(tmp_path))
    (stored,) = load_trials(str(tmp_path), ["s"]).itertuples()
    assert (stored.train_loss_tail, stored.val_loss_se) == (result.train_loss_tail, result.val_loss_se)
