"""The loss inside the model (trainers/objective.py) and when a trial compiles (compile_policy).

The fused loss must give what the loop computed before it moved into the compiled region:
cross-entropy and z-loss from two separate log-sum-exps over the fp32 logits (every
family, fp32 on CPU, to 1e-5), and a mixture of experts' load-balancing loss on top.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.compile_policy import PAYS_AT, decide, distinct_regions
from shapesweep.trainers.models import build_model
from shapesweep.trainers.objective import lm_loss
from test_compile import FAMILIES


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _before(logits: torch.Tensor, y: torch.Tensor, z_loss: float) -> tuple[float, float]:
    """The loop's loss before issue 36: torch's cross-entropy, and a second log-sum-exp."""
    flat = logits.float().flatten(0, -2)
    ce = F.cross_entropy(flat, y.flatten())
    return (ce + z_loss * torch.logsumexp(flat, -1).pow(2).mean()).item(), ce.item()


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_every_family_s_loss_is_the_loops_before(name, z_loss):
    config = make_config(FAMILIES[name])
    torch.manual_seed(0)
    model = build_model(config)
    if name == "vision":
        x, y = torch.randn(8, config.d_x), torch.randn(8, config.d_out)
        objective, reported = model(x, y, z_loss)
        expected = F.mse_loss(model(x), y).item()
        assert objective.item() == pytest.approx(expected, abs=1e-6)
        assert reported.item() == pytest.approx(expected, abs=1e-6)
        return
    x = torch.randint(0, config.vocab_size, (4, 16))
    y = torch.randint(0, config.vocab_size, (4, 16))
    objective, reported = model(x, y, z_loss)
    want_objective, want_reported = _before(model(x), y, z_loss)
    aux = model.aux_loss()
    aux = float(aux) if isinstance(aux, float) else aux.item()
    assert reported.item() == pytest.approx(want_reported, abs=1e-5)
    assert objective.item() == pytest.approx(want_objective + aux, abs=1e-5)
    assert (aux > 0) == ("moe" in name)


def test_the_z_loss_is_one_log_sum_exp_of_fp32_logits_from_bf16():
    """bf16 logits in, fp32 losses out, equal to float64 arithmetic within 1e-5."""
    logits = (torch.randn(64, 1000) * 4).bfloat16()
    y = torch.randint(0, 1000, (64,))
    objective, reported = lm_loss(logits, y, 1e-3)
    assert objective.dtype == reported.dtype == torch.float32
    wide = logits.double()
    lse = torch.logsumexp(wide, -1)
    ce = F.cross_entropy(wide, y)
    assert reported.item() == pytest.approx(ce.item(), abs=1e-5)
    assert objective.item() == pytest.approx((ce + 1e-3 * lse.square().mean()).item(), abs=1e-5)


# --- compile: auto --------------------------------------------------------------------

BASELINE_113M = dict(family="conventional", d_model=768, n_layers=12, n_heads=12, d_h=3072,
                     vocab_size=100352, tie_embeddings=False)


def test_auto_compiles_a_long_gpu_trial_and_not_a_short_one():
    config, train = make_config(BASELINE_113M), TrainConfig(seq_len=2048)
    long, short = (decide(config, train, "cuda", tokens) for tokens in (2_500_000_000, 1_000_000))
    assert long.compile and not short.compile
    assert long.train_s >= PAYS_AT * long.compile_s > short.train_s
    assert long.reason.startswith("auto: compile") and short.reason.startswith("auto: eager")
    # a faster device trains the same tokens sooner: the same trial may no longer pay
    assert decide(config, train, "cuda", 2_500_000_000, peak=4 * 989e12).train_s == \
        pytest.approx(long.train_s / 4)


def test_auto_is_eager_on_cpu_and_true_or_false_is_obeyed():
    config = make_config(BASELINE_113M)
    assert not decide(config, TrainConfig(), "cpu", 10**12).compile
    assert decide(config, TrainConfig(compile=True), "cpu", 1).compile
    assert not decide(config, TrainConfig(compile=False), "cuda", 10**12).compile
    assert TrainConfig().compile == "auto"


def test_regions_are_the_distinct_block_shapes():
    """One per distinct layer shape: a conventional or hourglass model has one, a ><former as
    many as its distinct widths."""
    assert distinct_regions(make_config(FAMILIES["hourglass"])) == 1
    assert distinct_regions(make_config({**FAMILIES["conventional"], "n_layers": 6})) == 1
    vformer = make_config(FAMILIES["vformer-carry"])
    assert distinct_regions(vformer) == len(set(vformer.layer_shapes())) > 1
    assert distinct_regions(make_config(FAMILIES["vision"])) == 1


def test_plan_says_which_candidates_compile_on_a_gpu(capsys):
    from shapesweep.sweep.cli import main

    assert main(["plan", "hourglass-fixed-attention-113m", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert all(r["compile_on_cuda"]["compile"] for r in rows)
    assert "compile on a GPU: 5 of 5 candidates (auto: compile" in err
    assert main(["plan", "demo-quick"]) == 0
    assert "compile on a GPU: 0 of 4 candidates (auto: eager" in capsys.readouterr().out


def test_status_shows_each_trials_compile_seconds(tmp_path, capsys):
    """Trials that compiled carry `compile_s` in their row, and `status` prints it."""
    from shapesweep.results.store import write_trial
    from shapesweep.sweep.cli import main
    from synthetic import synthetic_sweep

    for i, (row, curve) in enumerate(synthetic_sweep("compiled", 4, families=("conventional",))):
        write_trial(str(tmp_path), "compiled", {**row, "compiled": True, "compile_s": 12.5 + i},
                    curve)
    assert main(["status", "compiled", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "compile s" in out and "12.5" in out


def test_the_fused_gradient_is_autograds():
    """`_CrossEntropyZLoss`'s one-pass backward equals autograd through torch's ops (in float64;
    the fused loss computes in fp32)."""
    logits = (torch.randn(32, 50, dtype=torch.float64) * 3).requires_grad_()
    y = torch.randint(0, 50, (32,))
    objective, _ = lm_loss(logits, y, 0.3)
    (mine,) = torch.autograd.grad(objective, logits)
    reference = F.cross_entropy(logits, y) + 0.3 * torch.logsumexp(logits, -1).square().mean()
    (want,) = torch.autograd.grad(reference, logits)
    assert torch.allclose(mine, want, rtol=1e-5, atol=1e-8)  # the loss runs in fp32
