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
from test_compile import FAMILIES

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers.compile_policy import (
    COMPILE_BASE_S,
    COMPILE_PER_BLOCK_S,
    COMPILE_PER_SUBBLOCK_S,
    PAYS_AT,
    REGION_COMPILE_SHARE,
    compile_seconds,
    decide,
    runs,
    traced_blocks,
)
from shapesweep.trainers.models import build_model
from shapesweep.trainers.objective import lm_loss


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


def test_auto_regions_grow_with_the_trial_and_a_fixed_length_is_obeyed():
    """On a GPU, the longest regions whose extra compile is at most REGION_COMPILE_SHARE of
    the expected eager training: one block for a trial that just pays its compile, the whole
    run of 12 alike blocks for a full 113M trial, 4 (three regions of 4) in between."""
    config, train = make_config(BASELINE_113M), TrainConfig(seq_len=2048)
    per_token = decide(config, train, "cuda", 10**9).train_s / 10**9
    one_block = compile_seconds(config)

    def chosen(train_s: float, **changes) -> int:
        decision = decide(config, train.model_copy(update=changes), "cuda", int(train_s / per_token))
        assert decision.compile
        return decision.blocks_per_region

    assert chosen(1.2 * PAYS_AT * one_block) == 1
    assert chosen(2_500_000_000 * per_token) == 12
    extra_for_four = compile_seconds(config, 4) - one_block  # 3 more traced blocks
    assert chosen(1.01 * extra_for_four / REGION_COMPILE_SHARE) == 4
    assert chosen(2_500_000_000 * per_token, compile_blocks_per_region=2) == 2
    assert decide(config, TrainConfig(compile=True), "cpu", 10**12).blocks_per_region == 1
    long = decide(config, train, "cuda", 2_500_000_000)
    assert "; up to 12 alike blocks a region, ~48 s to compile (auto: " in long.reason


def test_auto_is_eager_on_cpu_and_true_or_false_is_obeyed():
    config = make_config(BASELINE_113M)
    assert not decide(config, TrainConfig(), "cpu", 10**12).compile
    assert decide(config, TrainConfig(compile=True), "cpu", 1).compile
    assert not decide(config, TrainConfig(compile=False), "cuda", 10**12).compile
    assert TrainConfig().compile == "auto"


def test_regions_are_the_distinct_block_shapes():
    """One per distinct layer shape: a conventional or hourglass model has one, a ><former as
    many as its distinct widths."""
    assert traced_blocks(make_config(FAMILIES["hourglass"])) == 1
    assert traced_blocks(make_config({**FAMILIES["conventional"], "n_layers": 6})) == 1
    vformer = make_config(FAMILIES["vformer-carry"])
    assert traced_blocks(vformer) == len(set(vformer.layer_shapes())) > 1
    assert traced_blocks(make_config(FAMILIES["vision"])) == 1


def test_a_block_of_k_sub_blocks_costs_more_to_compile():
    """An hourglass block traces k FFN sub-blocks: each beyond the first adds to its compile
    estimate; a conventional block of the same size costs the base block's."""
    conventional = make_config(BASELINE_113M)
    assert compile_seconds(conventional) == pytest.approx(COMPILE_BASE_S + COMPILE_PER_BLOCK_S)
    for k in (1, 4, 8):
        hourglass = make_config({**BASELINE_113M, "family": "hourglass", "k": k, "d_h": 384})
        assert compile_seconds(hourglass, 12) == pytest.approx(
            COMPILE_BASE_S + 12 * (COMPILE_PER_BLOCK_S + (k - 1) * COMPILE_PER_SUBBLOCK_S))


def test_regions_of_several_blocks_cut_each_run_into_near_equal_chunks():
    """`compile_blocks_per_region`: consecutive alike blocks, at most that many a region, in
    chunks of at most two lengths; a compile traces each distinct (shape, length) once."""
    assert runs(list("aaaaaaaaaaaa"), 5) == [range(0, 4), range(4, 8), range(8, 12)]
    assert runs(list("aabbbc"), 2) == [range(0, 2), range(2, 3), range(3, 5), range(5, 6)]
    assert runs(list("abab"), 4) == [range(i, i + 1) for i in range(4)]  # alike, not consecutive
    assert runs([], 3) == []
    six = make_config({**FAMILIES["conventional"], "n_layers": 6})
    assert [traced_blocks(six, n) for n in (1, 2, 3, 4, 5, 6, 12)] == [1, 2, 3, 3, 3, 6, 6]
    seven = make_config({**FAMILIES["conventional"], "n_layers": 7})
    assert traced_blocks(seven, 3) == 2 + 3  # 2, 2, 3: two graphs
    vformer = make_config(FAMILIES["vformer-carry"])  # no two consecutive layers alike
    assert traced_blocks(vformer, 4) == traced_blocks(vformer)
    short, long = (decide(six, TrainConfig(compile=True, compile_blocks_per_region=n), "cuda",
                          10**9) for n in (1, 6))
    assert long.compile_s - short.compile_s == pytest.approx(5 * COMPILE_PER_BLOCK_S)


def test_plan_says_which_candidates_compile_on_a_gpu(capsys):
    from shapesweep.sweep.cli.main import main

    assert main(["plan", "hourglass-fixed-attention-113m", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert all(r["compile_on_cuda"]["compile"] for r in rows)
    assert all(r["compile_on_cuda"]["blocks_per_region"] == 12 for r in rows)  # 2.5B tokens each
    assert "compile on a GPU: 5 of 5 candidates (auto: compile" in err
    assert main(["plan", "demo-quick"]) == 0
    assert "compile on a GPU: 0 of 4 candidates (auto: eager" in capsys.readouterr().out


def test_status_shows_each_trials_compile_seconds(tmp_path, capsys, monkeypatch):
    """Trials that compiled carry `compile_s` in their row, and `status` prints it, with the
    blocks a compiled region held where longer than one."""
    from synthetic import synthetic_sweep

    from shapesweep.results.store import write_trial
    from shapesweep.sweep.cli.main import main

    for i, (row, curve) in enumerate(synthetic_sweep("compiled", 4, families=("conventional",))):
        write_trial(str(tmp_path), "compiled", {**row, "compiled": True, "compile_s": 12.5 + i,
                                                "blocks_per_region": 1 + 3 * (i == 1)}, curve)
    monkeypatch.setenv("COLUMNS", "1000")  # no cell folded
    assert main(["status", "compiled", "--root", str(tmp_path), "--all"]) == 0
    out = capsys.readouterr().out
    assert "compile s" in out and "12.5" in out
    assert out.count("blocks a region") == 1 and "13.5 (4 blocks a region)" in out


def test_status_says_which_machines_the_trials_ran_on(tmp_path, capsys, monkeypatch):
    """A sweep that spans machines says so, most trials first, rows from before the columns
    counted apart: losses differ by float order between machines (docs/small-sweeps.md)."""
    from synthetic import synthetic_sweep

    from shapesweep.results.store import write_trial
    from shapesweep.sweep.cli.main import main

    epyc = {"cpu_model": "AMD EPYC", "torch_version": "2.13.0+cpu", "device_name": "cpu", "torch_threads": 1}
    h200 = {"cpu_model": "Intel Xeon", "torch_version": "2.11.0+cu130", "device_name": "NVIDIA H200",
            "torch_threads": 8}
    where = [epyc, h200, epyc, {}]
    for (row, curve), machine in zip(synthetic_sweep("spans", 4, families=("conventional",)), where, strict=True):
        write_trial(str(tmp_path), "spans", {**row, **machine}, curve)
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(["status", "spans", "--root", str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ran on: "))
    assert line == ("ran on: cpu (AMD EPYC), torch 2.13.0+cpu, 1 thread: 2 trials; NVIDIA H200 "
                    "(Intel Xeon), torch 2.11.0+cu130, 8 threads: 1 trial; not recorded (rows from "
                    "before 2026-11-30): 1 trial")
    assert main(["status", "spans", "--root", str(tmp_path), "--format", "json"]) == 0
    machines = json.loads(capsys.readouterr().out)["machines"]
    assert machines == [{**epyc, "trials": 2}, {**h200, "trials": 1},
                        {**dict.fromkeys(epyc), "trials": 1}]


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
