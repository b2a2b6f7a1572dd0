"""Warmup-stable-decay and cooldown evaluations: the schedule's shape, a branch that leaves
the main run bit for bit as it was, the branch trained on the batches that follow, its
tokens counted, a resumed trial reporting the same, and the recipe's bad input refused."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import cooldown
from shapesweep.trainers.loop import StopTrial, lr_multiplier, train

TINY = dict(family="conventional", d_model=16, n_layers=1, n_heads=2, d_h=64)
WSD = dict(steps=20, seq_len=32, batch_tokens=256, eval_tokens=1024, lr=1e-2, eval_every=5,
           decay="wsd", cooldown_frac=0.2, warmup_frac=0.1)
MAIN = ("step", "tokens", "train_loss", "val_loss", "val_ppl", "lr")  # what the main run measures


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _main(curve):
    return [{k: m[k] for k in MAIN} for m in curve]


@pytest.mark.parametrize("shape", ["linear", "1-sqrt"])
def test_wsd_warms_up_holds_then_cools_to_the_floor_in_its_last_fraction(shape):
    recipe = TrainConfig(steps=100, warmup_frac=0.1, decay="wsd", cooldown_frac=0.2,
                         cooldown_shape=shape, min_lr_frac=0.1)
    values = [lr_multiplier(s, 100, recipe) for s in range(100)]
    assert values[0] == pytest.approx(0.1) and values[9] == 1.0
    assert values[10:80] == [1.0] * 70  # constant until the last 20 steps
    assert all(a > b for a, b in zip(values[80:], values[81:], strict=False))
    progress = 10 / 20  # step 90 is halfway through the cooldown
    left = 1 - progress if shape == "linear" else 1 - math.sqrt(progress)
    assert values[90] == pytest.approx(0.1 + 0.9 * left)
    assert values[-1] == pytest.approx(0.1 + 0.9 * (1 - (19 / 20 if shape == "linear"
                                                          else math.sqrt(19 / 20))))


def test_cooldown_evaluations_leave_the_main_run_bit_identical():
    config = make_config(TINY)
    plain = train(config, TrainConfig(**WSD, cooldown_evals="off"))
    cooled = train(config, TrainConfig(**WSD, cooldown_evals="all"))
    assert _main(cooled.curve) == _main(plain.curve)  # exact, not approx
    assert all("val_loss_cooled" not in m for m in plain.curve) and plain.cooldown_tokens == 0
    # every evaluation but the last branched a cooldown of a fifth of its steps; the last is
    # the main run's own cooled loss
    assert [m["step"] for m in cooled.curve] == [5, 10, 15, 20]
    assert cooled.curve[-1]["val_loss_cooled"] == cooled.curve[-1]["val_loss"]
    assert all(m["val_loss_cooled"] != m["val_loss"] for m in cooled.curve[:-1])
    assert cooled.cooldown_tokens == (1 + 2 + 3) * 256 == cooled.curve[-1]["cooldown_tokens"]
    assert cooled.tokens == 20 * 256  # training tokens only


def test_a_denoising_trials_cooled_evaluations_record_its_psnr_too():
    config = make_config(dict(family="vision_mlp", d_x=64, d_z=32, d_h=16, n_layers=1, d_out=64))
    recipe = TrainConfig(steps=20, batch_size=16, lr=1e-2, eval_every=5, decay="wsd",
                         cooldown_frac=0.2, cooldown_evals="all", noise_std=0.25)
    curve = train(config, recipe).curve
    assert [m["step"] for m in curve] == [5, 10, 15, 20]
    assert all(math.isfinite(m["psnr_cooled"]) for m in curve)
    assert curve[-1]["psnr_cooled"] == curve[-1]["psnr"]  # the last is the main run's own
    assert all(m["psnr_cooled"] != m["psnr"] for m in curve[:-1])


def test_a_branch_is_the_run_that_cools_down_there_on_the_batches_that_follow(monkeypatch):
    """The cooled loss at step 10 (a 2-step cooldown from lr factor 1 to the floor) is the
    loss of a run that trains steps 0..11 under that lr and evaluates."""
    from shapesweep.trainers import loop

    config = make_config(TINY)
    recipe = TrainConfig(**WSD, cooldown_evals="all")
    at_10 = next(m for m in train(config, recipe).curve if m["step"] == 10)
    factors = [lr_multiplier(s, 20, recipe) for s in range(10)]
    factors += [cooldown.factor(recipe, 1.0, j, 2) for j in range(2)]
    monkeypatch.setattr(loop, "lr_multiplier", lambda step, *args, **kwargs: factors[min(step, 11)])
    manual = train(config, TrainConfig(**{**WSD, "steps": 12, "eval_every": 12}))
    assert manual.val_loss == at_10["val_loss_cooled"]


def test_cooled_evaluations_at_the_rungs_only_and_resume_reports_the_same(tmp_path):
    config = make_config(TINY)
    recipe = TrainConfig(**WSD)  # cooldown_evals defaults to `rungs` under wsd
    assert recipe.cooldown_evals == "rungs"
    whole = train(config, recipe, eval_at=[3 * 256, 12 * 256])
    assert [m["step"] for m in whole.curve] == [3, 5, 10, 12, 15, 20]
    assert [m["step"] for m in whole.curve if "val_loss_cooled" in m] == [3, 12, 20]
    assert whole.cooldown_tokens == (1 + 2) * 256  # round(0.2 x 3) = 1, round(0.2 x 12) = 2

    def stop_at_10(metrics):
        if metrics["step"] == 10:
            raise StopTrial

    folder = str(tmp_path / "ckpt")
    first = train(config, recipe, eval_at=[3 * 256, 12 * 256], checkpoint_dir=folder,
                  checkpoint_every_s=0, callback=stop_at_10)
    assert first.stopped and first.cooldown_tokens == 256
    resumed = train(config, recipe, eval_at=[3 * 256, 12 * 256], checkpoint_dir=folder)
    assert _main(resumed.curve) == _main(whole.curve)
    assert [m.get("val_loss_cooled") for m in resumed.curve] == \
        [m.get("val_loss_cooled") for m in whole.curve]
    assert resumed.cooldown_tokens == whole.cooldown_tokens


@pytest.mark.parametrize(("fields", "problem"), [
    ({"decay": "wsd", "cooldown_frac": 0.0}, "greater than 0"),
    ({"decay": "wsd", "cooldown_frac": 0.6}, "less than or equal to 0.5"),
    ({"decay": "cosine", "cooldown_evals": "rungs"}, "need decay: wsd"),
    ({"decay": "linear", "cooldown_evals": "all"}, "need decay: wsd"),
    ({"cooldown_frac": 0.3}, "need decay: wsd"),  # cosine by default
])
def test_a_recipe_with_a_cooldown_it_cannot_have_is_refused(fields, problem):
    with pytest.raises(ValidationError, match=problem):
        TrainConfig(steps=10, **fields)


def test_a_cosine_recipe_round_trips_with_the_cooldown_defaults():
    """A dumped recipe carries the cooldown fields' defaults; reading it back is no error."""
    dumped = TrainConfig(steps=10).model_dump(mode="json", exclude_none=True)
    assert TrainConfig.model_validate(dumped).cooldown_evals == "off"


def test_cooled_rank_fidelity_ranks_on_the_cooled_losses_against_the_final_ones():
    import pandas as pd

    from shapesweep.results.stats import cooled_rank_fidelity, rank_fidelity

    finals = {"a": 3.0, "b": 3.1, "c": 3.2}  # the final ranking: a, b, c
    trials = pd.DataFrame([{"sweep": "s", "trial_id": f"{k}-s{seed}", "key": k, "seed": seed,
                            "tuned_json": "{}", "status": "completed", "variant": k,
                            "val_loss": v + seed * 0.01}
                           for k, v in finals.items() for seed in (0, 1)])
    # at 100 tokens the plain losses rank c, b, a (a high lr's noise), the cooled ones a, b, c
    curves = pd.DataFrame([{"sweep": "s", "trial_id": f"{k}-s{seed}", "tokens": 100,
                            "val_loss": 4.0 - v, "val_loss_cooled": v + 0.5}
                           for k, v in finals.items() for seed in (0, 1)])
    assert rank_fidelity(trials, curves)["kendall_tau"].tolist() == [-1.0]
    assert cooled_rank_fidelity(trials, curves)["kendall_tau"].tolist() == [1.0]
    assert cooled_rank_fidelity(trials, curves.drop(columns="val_loss_cooled")).empty
    # A metric where higher is better ranks on its own cooled column, against its own finals.
    trials["psnr"], curves["psnr_cooled"] = -trials["val_loss"], -curves["val_loss_cooled"]
    assert cooled_rank_fidelity(trials, curves, "psnr")["kendall_tau"].tolist() == [1.0]
    curves["psnr_cooled"] = -curves["psnr_cooled"]  # cooled PSNR in the reverse order
    assert cooled_rank_fidelity(trials, curves, "psnr")["kendall_tau"].tolist() == [-1.0]
