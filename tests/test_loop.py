"""The training loop: schedule, accumulation, determinism, resume, early stop, NaN, candidates."""

from __future__ import annotations

import json
import math

import pytest
import torch

from shapesweep.common import UserError
from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.loop import (
    NonFiniteLoss,
    StopTrial,
    lr_multiplier,
    train,
)
from shapesweep.trainers.objective import lm_loss

TINY = dict(family="conventional", d_model=16, n_layers=1, n_heads=2, d_h=64)
RECIPE = dict(steps=12, seq_len=32, batch_tokens=256, eval_tokens=1024, lr=1e-2, eval_every=4)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _comparable(curve):
    return [{k: v for k, v in m.items() if k != "elapsed_s"} for m in curve]


def test_schedule_warmup_then_cosine_to_floor():
    recipe = TrainConfig(steps=100, warmup_frac=0.1, min_lr_frac=0.1)
    values = [lr_multiplier(s, 100, recipe) for s in range(100)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(values[9:], values[10:], strict=False))
    assert values[-1] == pytest.approx(0.1, abs=1e-3)
    linear = TrainConfig(steps=10, warmup_frac=0.0, decay="linear", min_lr_frac=0.0)
    assert lr_multiplier(5, 10, linear) == pytest.approx(0.5)
    assert lr_multiplier(7, 10, TrainConfig(decay="constant", warmup_frac=0)) == 1.0


def test_z_loss_adds_squared_logsumexp():
    logits = torch.randn(2, 3, 11)
    targets = torch.randint(0, 11, (2, 3))
    objective, reported = lm_loss(logits, targets, 1e-2)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    z = torch.logsumexp(logits, -1).pow(2).mean()
    assert torch.allclose(reported, ce) and torch.allclose(objective, ce + 1e-2 * z)


def test_callback_metrics_and_result():
    seen = []
    result = train(make_config(TINY), TrainConfig(**RECIPE), callback=seen.append)
    assert [m["step"] for m in seen] == [4, 8, 12]
    assert {"step", "tokens", "train_loss", "val_loss", "lr", "elapsed_s"} <= set(seen[-1])
    assert seen[-1]["tokens"] == 12 * 256 == result.tokens
    assert result.val_loss == seen[-1]["val_loss"] and result.best_val_loss == min(m["val_loss"] for m in seen)
    assert result.val_ppl == pytest.approx(math.exp(result.val_loss))
    assert result.params_measured == 16 * 256 + 4 * 16 * 16 + 3 * 16 * 64 + 3 * 16
    assert len(result.data_hash) == 64 and result.tokens_per_s > 0 and not result.stopped
    assert (result.torch_version, result.device_name, result.torch_threads) == (
        torch.__version__, "cpu", torch.get_num_threads()) and result.cpu_model
    json.dumps(result.to_dict())  # plain data, ready for a results row


def test_time_spent_reporting_is_not_the_trials(monkeypatch):
    """A sweep's trial waits in its callback while the driver logs to trackers: that wait
    is not the trial's wall time, nor its elapsed time at each evaluation. The clock is
    the loop's own, advanced 100 s by each report, so the check cannot depend on load."""
    import time

    clock, offset = time.perf_counter, [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock() + offset[0])

    def slow_tracker(metrics):
        offset[0] += 100.0

    result = train(make_config(TINY), TrainConfig(**RECIPE), callback=slow_tracker)
    assert offset[0] == 300.0 and result.wall_time_s < 100  # 3 reports, none counted
    assert all(m["elapsed_s"] < 100 for m in result.curve)
    assert result.tokens / result.tokens_per_s < 100


def test_two_runs_are_identical():
    a = train(make_config(TINY), TrainConfig(**RECIPE))
    b = train(make_config(TINY), TrainConfig(**RECIPE))
    assert _comparable(a.curve) == _comparable(b.curve)
    c = train(make_config(TINY), TrainConfig(**{**RECIPE, "seed": 1}))
    assert c.curve[-1]["val_loss"] != a.curve[-1]["val_loss"]


def test_gradient_accumulation_matches_one_big_batch():
    full = train(make_config(TINY), TrainConfig(**RECIPE))
    micro = train(make_config(TINY), TrainConfig(**RECIPE, micro_batch_size=3))  # 8 seqs as 3+3+2
    for a, b in zip(full.curve, micro.curve, strict=True):
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-5)


def test_stop_and_resume_equals_uninterrupted(tmp_path):
    recipe = TrainConfig(**RECIPE)
    whole = train(make_config(TINY), recipe)

    def stop_at_8(metrics):
        if metrics["step"] == 8:
            raise StopTrial

    first = train(make_config(TINY), recipe, callback=stop_at_8, checkpoint_dir=str(tmp_path))
    assert first.stopped and first.steps == 8 and (tmp_path / "checkpoint.pt").exists()
    rest = train(make_config(TINY), recipe, checkpoint_dir=str(tmp_path))
    assert not rest.stopped and rest.steps == 12
    assert _comparable(rest.curve) == _comparable(whole.curve)  # bit-for-bit on CPU
    again = train(make_config(TINY), recipe, checkpoint_dir=str(tmp_path))  # finished: no work
    assert _comparable(again.curve) == _comparable(whole.curve)


def test_checkpoint_of_another_trial_is_refused(tmp_path):
    train(make_config(TINY), TrainConfig(**RECIPE), checkpoint_dir=str(tmp_path))
    with pytest.raises(UserError, match="different trial") as error:
        train(make_config({**TINY, "d_h": 32}), TrainConfig(**RECIPE), checkpoint_dir=str(tmp_path))
    assert error.value.key == "config_key"


def test_checkpoint_of_an_older_version_resumes(tmp_path):
    """A trial interrupted under a version whose recipe lacked a key added since (at its
    default) resumes under this one; a recipe that really differs is still refused."""
    recipe = TrainConfig(**RECIPE)
    whole = train(make_config(TINY), recipe)

    def stop_at_8(metrics):
        if metrics["step"] == 8:
            raise StopTrial

    train(make_config(TINY), recipe, callback=stop_at_8, checkpoint_dir=str(tmp_path))
    path = tmp_path / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    del state["identity"]["train"]["compile_blocks_per_region"]  # as written before it existed
    torch.save(state, path)
    with pytest.raises(UserError, match="different trial") as error:
        train(make_config(TINY), TrainConfig(**{**RECIPE, "lr": 2e-3}), checkpoint_dir=str(tmp_path))
    assert error.value.key == "train"
    rest = train(make_config(TINY), recipe, checkpoint_dir=str(tmp_path))
    assert rest.steps == 12 and _comparable(rest.curve) == _comparable(whole.curve)


@pytest.mark.parametrize("family", ["conventional", "vision_mlp"])
def test_non_finite_loss_names_the_step(family):
    config = make_config(TINY if family == "conventional" else
                         dict(family="vision_mlp", d_z=32, d_h=8, n_layers=1))
    with pytest.raises(NonFiniteLoss, match=r"at step \d+ of 12") as error:
        train(config, TrainConfig(**{**RECIPE, "lr": 1e30, "grad_clip": 0.0}))
    step = int(str(error.value).split("at step ")[1].split()[0])
    assert 1 < step <= 12  # step 1 ran on finite weights


def test_vision_metrics_and_tokens_count_images():
    seen = []
    config = make_config(dict(family="vision_mlp", d_z=32, d_h=8, n_layers=1, task="genclass"))
    result = train(config, TrainConfig(steps=4, batch_size=16, eval_every=2), callback=seen.append)
    assert result.tokens == 64 and result.val_ppl is None
    assert {"psnr", "ssim", "accuracy"} <= set(seen[-1]) and result.psnr == seen[-1]["psnr"]
    assert 0 <= result.accuracy <= 1


def test_no_budget_is_a_user_error():
    with pytest.raises(UserError, match="train.tokens or train.steps"):
        train(make_config(TINY), TrainConfig(seq_len=32))


def test_load_candidate_nested_and_flat(tmp_path):
    nested = tmp_path / "c.yaml"
    nested.write_text("family: hourglass\nmodel: {d_model: 32, n_layers: 2, n_heads: 2, d_h: 8, k: 3}\n"
                      "train: {tokens: 2M, seq_len: 64}\nmetrics: {val_loss: 3.0}\nprovenance: {sweep: x}\n")
    config, recipe = load_candidate(nested)
    assert config.family == "hourglass" and config.k == 3 and recipe.tokens == 2_000_000
    flat = tmp_path / "row.json"
    flat.write_text(json.dumps({"key": "abc", "family": "conventional", "d_model": 32, "n_layers": 2,
                                "n_heads": 2, "d_h": 128, "params_total": 123, "budget_error": 0.0}))
    config, recipe = load_candidate(flat)
    assert config.d_h == 128 and recipe == TrainConfig()


@pytest.mark.parametrize("text, key, problem", [
    ("family: conventional\nmodel: {d_model: 30, n_layers: 2, n_heads: 4, d_h: 8}\n", "model",
     "not divisible"),
    ("family: conventional\nmodel: {d_modl: 32, n_layers: 2, n_heads: 2, d_h: 8}\n", "model.d_modl",
     "unknown key 'd_modl' \\(did you mean 'd_model'\\? allowed: d_model, "),
    ("family: transformer\nmodel: {}\n", "family", "unknown family"),
    ("family: conventional\nmodel: {d_model: 32, n_layers: 2, n_heads: 2, d_h: 8}\ntrain: {lr: -1}\n",
     "train.lr", "greater than 0"),
    ("family: [unclosed\n", None, "not valid YAML"),
    ("- 1\n- 2\n", None, "expected a mapping"),
])
def test_load_candidate_errors_name_file_and_key(tmp_path, text, key, problem):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=problem) as error:
        load_candidate(path)
    assert error.value.file == str(path) and error.value.key == key


def test_group_lr_is_schedule_times_lr_times_lr_scale(tmp_path):
    recipe = TrainConfig(**{**RECIPE, "parametrization": "mup", "mup_base_width": 8})
    train(make_config(TINY), recipe, checkpoint_dir=str(tmp_path))
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    multiplier = lr_multiplier(RECIPE["steps"] - 1, RECIPE["steps"], recipe)
    # LambdaLR has already stepped past the last step: compare against the next multiplier
    following = lr_multiplier(RECIPE["steps"], RECIPE["steps"], recipe)
    scales = sorted({g["lr_scale"] for g in state["optimizer"]["param_groups"]})
    assert scales == [0.5, 1.0]  # muP hidden matrices at width 16 over base 8
    for group in state["optimizer"]["param_groups"]:
        assert group["lr"] == pytest.approx(recipe.lr * group["lr_scale"] * following)
    assert state["curve"][-1]["lr"] == pytest.approx(recipe.lr * multiplier)


def test_z_loss_reaches_the_gradients():
    plain = train(make_config(TINY), TrainConfig(**RECIPE))
    with_z = train(make_config(TINY), TrainConfig(**{**RECIPE, "z_loss": 0.1}))
    assert with_z.curve[-1]["val_loss"] != plain.curve[-1]["val_loss"]
    assert math.isfinite(with_z.val_loss)
