"""The memory model (shapesweep.trainers.memory) against measured peaks, `micro_batch_size:
auto`, `plan`'s memory columns, `run`'s refusals of trials that cannot fit, and out-of-memory
recovery (shapesweep.trainers.fitting)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.cli.main import main
from shapesweep.trainers import fitting, memory
from shapesweep.trainers.fitting import compare_cli
from shapesweep.trainers.loop import train
from shapesweep.trainers.spec import TrialSpec
from tests.sweep_helpers import TINY_SPACE, write_space

LM = dict(vocab_size=256, n_heads=4)
FAMILIES = {  # one of each kind of block the model counts
    "conventional swiglu": dict(family="conventional", d_model=64, n_layers=2, d_h=256, **LM),
    "conventional relu, GQA": dict(family="conventional", d_model=64, n_layers=2, d_h=256,
                                   activation="relu", n_kv_heads=2, **LM),
    "hourglass k 4": dict(family="hourglass", d_model=64, n_layers=2, d_h=32, k=4, **LM),
    "><former bottleneck": dict(family="variable_width", d_model=64, n_layers=4, d_h=256,
                                shape="bottleneck", beta=0.5, alpha=0.5, **LM),
    "mixture of experts": dict(family="conventional", d_model=64, n_layers=2, d_h=64,
                               n_experts=4, n_active_experts=2, **LM),
}
TOLERANCE = 0.15  # issue 37's target: every prediction within 15% of the measured peak


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _recipe(micro: int, **changes) -> TrainConfig:
    return TrainConfig(steps=2, seq_len=64, batch_tokens=64 * 8, micro_batch_size=micro,
                       eval_tokens=128, eval_every=2, **changes)


@pytest.mark.parametrize(("name", "micro", "z_loss"), [
    ("conventional swiglu", 2, 0.0), ("conventional swiglu", 8, 1e-4),
    ("conventional relu, GQA", 4, 0.0), ("hourglass k 4", 8, 0.0), ("hourglass k 4", 2, 1e-4),
    ("><former bottleneck", 4, 0.0), ("mixture of experts", 4, 0.0)])
def test_the_model_predicts_the_measured_cpu_peak(name, micro, z_loss):
    """Eager fp32 on CPU: the predicted peak against the peak of live tensor bytes torch's
    profiler records over a real two-step run (the second step's backward holds AdamW's
    states and the gradients), within 15%, across families and micro-batches."""
    config, recipe = make_config(FAMILIES[name]), _recipe(micro, z_loss=z_loss)
    measured, result = memory.measured_peak(lambda: train(config, recipe))
    predicted = memory.estimate(config, recipe, "cpu")
    assert result.steps == 2 and predicted.micro_batch == micro
    assert abs(predicted.total / measured - 1) <= TOLERANCE, (predicted.to_dict(), measured)


def test_a_trial_frees_its_tensors_when_it_returns():
    """Nothing a trial trained with (model, gradients, AdamW's states) waits for Python's cycle
    collector: a scheduler closing over the trial that held it kept them all alive until a
    later trial's step, where the profiler saw them freed and the measured peak fell 30-55%
    below the prediction (the flaky case above)."""
    config, recipe = make_config(FAMILIES["conventional swiglu"]), _recipe(2)
    gc.collect()
    gc.disable()
    try:
        train(config, recipe)
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds goes to gc.garbage
        gc.collect()
        held = sum(isinstance(o, torch.Tensor) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert held == 0, f"{held} tensors held in reference cycles after the trial"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_evaluation_upcasts_its_logits_a_chunk_at_a_time(dtype):
    """Held-out losses are the same whole or a chunk at a time, and the evaluation's peak
    beyond its logits is one chunk's fp32 tensors, as `evaluation_bytes` predicts (15%):
    whole, it would be twice the logits (the packed 113M sweep's evaluation, docs/memory.md)."""
    from shapesweep.trainers.loop import example_losses

    micro, seq, vocab = 16, 1024, 2048  # 16K tokens, chunks of 4 sequences
    torch.manual_seed(0)
    out, y = torch.randn(micro, seq, vocab).to(dtype), torch.randint(vocab, (micro, seq))
    whole = torch.nn.functional.cross_entropy(out.float().flatten(0, 1), y.flatten(),
                                              reduction="none").view(y.shape).mean(1)
    measured, chunked = memory.measured_peak(lambda: example_losses(out.clone(), y))
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-6)
    p = memory.Precision(act=out.element_size(), compiled=False)
    predicted = memory.evaluation_bytes(vocab, p, micro, seq)
    assert abs(predicted / measured - 1) <= TOLERANCE, (predicted, measured)
    assert measured < 0.6 * out.numel() * (out.element_size() + 8)  # not the whole batch upcast


def test_the_larger_of_the_step_and_the_evaluation_is_the_peak():
    """A compiled bf16 trial holds its logits in bf16 twice (forward, gradient); its
    evaluation holds them once, and a chunk in fp32: at a small micro-batch the chunk can
    be the larger peak, and `total` (what `auto` and packing plan by) says so."""
    config = make_config(dict(family="conventional", d_model=64, n_layers=1, d_h=128,
                              vocab_size=100352, n_heads=4))
    recipe = TrainConfig(steps=2, seq_len=2048, batch_tokens=2048 * 8, compile=True)
    small, large = (memory.estimate(config, recipe, "cuda", m) for m in (1, 8))
    assert small.states + small.evaluation > small.step and small.total > small.step
    assert large.total == max(large.step, large.states + large.evaluation)


GPU_FIXED = dict(d_model=768, n_layers=12, n_heads=12, vocab_size=100352, tie_embeddings=False,
                 activation="swiglu")
GPU_113M = dict(tokens=10**9, seq_len=2048, batch_tokens=524288, micro_batch_size=8, z_loss=1e-5,
                compile=True)


def _gpu_cases():
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    space = load_space("vformer-shapes-500m")
    first = plan(space).candidates[0]
    return [
        (make_config(dict(family="conventional", d_h=3072, **GPU_FIXED)), TrainConfig(**GPU_113M), 43.9),
        (make_config(dict(family="hourglass", d_h=384, k=8, **GPU_FIXED)), TrainConfig(**GPU_113M), 49.9),
        (first.config, space.train_for(candidate=first).model_copy(update={"compile": True}), 44.9),
    ]


def test_the_model_predicts_issue_37s_gpu_peaks():
    """The three peaks measured on an H200 (bf16 autocast, compiled, the loss outside the
    compiled region: `LOSS_IN_GRAPH` False), each within 15%."""
    for config, recipe, gib in _gpu_cases():
        p = memory.Precision.of(recipe, "cuda")
        e = memory.estimate(config, recipe, "cuda")
        logits = memory.logit_bytes(config.vocab_size, p, recipe.z_loss > 0, in_graph=False)
        total = e.step - e.logits + int(logits * e.micro_batch * recipe.seq_len)
        assert abs(total / (gib * 2**30) - 1) <= TOLERANCE, (config.family, total / 2**30, gib)


def test_auto_picks_the_largest_micro_batch_dividing_the_step_that_fits():
    config = make_config(FAMILIES["conventional swiglu"])
    recipe = _recipe(8).model_copy(update={"micro_batch_size": "auto"})
    sizes = {m: memory.estimate(config, recipe, "cpu", m).total for m in (1, 2, 4, 8)}
    # the peak grows with the micro-batch: room for 4, not 8, picks 4; for none, 1
    assert sizes[1] < sizes[2] < sizes[4] < sizes[8]
    room = int(sizes[4] / memory.MARGIN) + 1
    assert memory.fitting_micro_batch(config, recipe, "cpu", room) == 4
    assert memory.fitting_micro_batch(config, recipe, "cpu", sizes[1] // 2) == 1
    # what the loop asks, on the device it trains on, with the bytes the run may use
    assert memory.micro_batch(config, recipe, torch.device("cpu"), 8, have=room) == 4
    assert memory.micro_batch(config, recipe, torch.device("cpu"), 8, room, imposed=2) == 2
    # unset: the whole step on CPU as before `auto`; on CUDA a given number is the most
    unset = recipe.model_copy(update={"micro_batch_size": None})
    assert memory.chosen(config, unset, "cpu", lambda: room) == 8
    assert memory.chosen(config, unset, "cuda", lambda: room) == 4
    assert memory.chosen(config, _recipe(2), "cuda", lambda: room) == 2
    assert memory.chosen(config, _recipe(8), "cpu", lambda: room) == 8


def test_auto_trains_the_same_step_as_the_whole_batch():
    """`auto` only splits the step: the curve is the whole-batch one (accumulation)."""
    config = make_config(FAMILIES["conventional swiglu"])
    whole = train(config, _recipe(8))
    auto = _recipe(8).model_copy(update={"micro_batch_size": "auto"})
    room = int(memory.estimate(config, auto, "cpu", 2).total / memory.MARGIN) + 1
    assert memory.micro_batch(config, auto, torch.device("cpu"), 8, have=room) == 2  # auto's pick
    split = train(config, auto, micro_batch=2)
    assert split.micro_batch_size == 2
    assert split.val_loss == pytest.approx(whole.val_loss, rel=1e-4)


def shapesweep(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_carries_each_candidates_micro_batch_and_peak_on_the_device_described(capsys):
    rows = {}
    for size in ("80GiB", "24GiB"):
        code, out, err = shapesweep(capsys, "plan", "hourglass-fixed-attention-113m", "--format",
                                    "json", "--gpu-memory", size)
        assert code == 0, err
        rows[size] = json.loads(out)
        assert f"memory on cuda ({size[:-3]}.0 GiB per trial" in err
    for big, small in zip(rows["80GiB"], rows["24GiB"], strict=True):
        assert 1 <= small["micro_batch_size"] <= big["micro_batch_size"] <= 16
        assert 256 % small["micro_batch_size"] == 0  # 256 sequences per step, whole micro-batches
        assert small["memory_peak_bytes"] <= memory.MARGIN * 24 * 2**30
    code, out, _ = shapesweep(capsys, "plan", "demo-quick", "--format", "json", "--device", "cpu")
    assert code == 0 and all(r["micro_batch_size"] == 8 for r in json.loads(out))  # unchanged


@pytest.mark.parametrize(("argv", "says"), [
    (("--gpu-memory", "lots"), "--gpu-memory: cannot read 'lots' as a memory size"),
    (("--device", "cpu", "--gpu-memory", "8GiB"), "--gpu-memory: describes a GPU"),
    (("--gpu-memory", "8GiB", "--gpus-per-trial", "0"), "--gpus-per-trial: must be in (0, 1]"),
])
def test_plan_refuses_bad_memory_flags_in_one_line(capsys, argv, says):
    code, out, err = shapesweep(capsys, "plan", "demo-quick", *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err and out == "", err


HUGE = dict(TINY_SPACE, name="huge", budget={"non_embedding_params": 137438953472, "tolerance": 0.05},
            fixed={"d_model": 16384, "n_heads": 128, "vocab_size": 256, "d_h": 65536,
                   "n_layers": 32}, search={}, solve=[])


def test_run_refuses_a_candidate_no_machine_fits_before_ray(capsys, tmp_path):
    """Issue 39: a 137B-parameter space (about 2 TiB to train) is one line, nothing written."""
    root = tmp_path / "sweeps"
    code, _, err = shapesweep(capsys, "run", str(write_space(tmp_path, HUGE)), "--root", str(root),
                              "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "model: conventional candidate" in err and "even at micro-batch 1" in err
    assert not root.exists()


def test_run_refuses_gpu_shares_a_candidate_cannot_fit(capsys, tmp_path):
    """A trial's share (--gpus-per-trial x --gpu-memory, given for a cluster joined with
    --address) smaller than a candidate at micro-batch 1: refused before Ray is reached."""
    root = tmp_path / "sweeps"
    code, _, err = shapesweep(capsys, "run", str(write_space(tmp_path)), "--root", str(root),
                              "--no-progress", "--gpus-per-trial", "0.25", "--gpu-memory", "1MiB",
                              "--address", "127.0.0.1:9")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--gpus-per-trial: conventional candidate" in err and "0.25 x 1.0 MiB = 0.2 MiB" in err
    assert not root.exists()


def test_run_counts_the_trials_that_run_at_once(capsys, tmp_path, monkeypatch):
    """On a machine (simulated: its memory) that holds two trials of the tiny space and not
    four, --max-concurrent 4 is refused with the number that fits; 2 passes the check."""
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space
    from shapesweep.sweep.driver.packing import check_memory
    from shapesweep.sweep.options.sweep_options import SweepOptions

    path = write_space(tmp_path)
    space = load_space(str(path))
    candidates = plan(space).candidates
    peak = max(memory.estimate(c.config, space.train_for(candidate=c), "cpu").total
               for c in candidates)
    monkeypatch.setattr(memory, "device_bytes", lambda device: int(2.5 * peak / memory.MARGIN))
    flags = ("--cpus-per-trial", "0.01")  # the CPUs hold them all, whatever this machine's count
    code, _, err = shapesweep(capsys, "run", str(path), "--root", str(tmp_path / "r"),
                              "--no-progress", "--max-concurrent", "4", *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--max-concurrent: 4 trials at once" in err and "(--max-concurrent 2)" in err
    check_memory(SweepOptions(space=str(path), max_concurrent=2, cpus_per_trial=0.01), space,
                 candidates)


class InjectedOOM:
    """A callback that raises CUDA's out-of-memory error at evaluations (`at`: which steps,
    `times`: how often in all), as the allocator raises it mid-step."""

    def __init__(self, at: set[int], times: int):
        self.at, self.left = at, times

    def __call__(self, metrics: dict) -> None:
        if metrics["step"] in self.at and self.left:
            self.left -= 1
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")


def test_out_of_memory_is_retried_at_half_the_micro_batch_from_the_last_checkpoint(tmp_path):
    config = make_config(FAMILIES["conventional swiglu"])
    recipe = _recipe(4).model_copy(update={"steps": 8, "eval_every": 4})
    plain = train(config, recipe)
    spec = TrialSpec(config, recipe, device="cpu", checkpoint_dir=str(tmp_path / "ckpt"))
    result, fitted = fitting.train(spec, InjectedOOM({4}, 1))
    assert (fitted.oom_retries, fitted.micro_batch_size) == (1, 2)
    assert fitted.memory_peak_bytes == memory.estimate(config, recipe, "cpu", 2).total
    assert fitted.memory_peak_bytes_measured and fitted.memory_peak_bytes_measured > 0
    # resumed at step 4 (its checkpoint), the same tokens per step: the uninterrupted curve
    assert [m["step"] for m in result.curve] == [4, 8] and result.tokens == plain.tokens
    assert result.val_loss == pytest.approx(plain.val_loss, rel=1e-4)


def test_out_of_memory_at_micro_batch_1_fails_the_run():
    config = make_config(FAMILIES["conventional swiglu"])
    heard = []
    with pytest.raises(torch.OutOfMemoryError, match="at micro-batch 1 after 2 retries"):
        fitting.train(TrialSpec(config, _recipe(4), device="cpu"), InjectedOOM({2}, 9),
                      on_retry=lambda f: heard.append(f.micro_batch_size))
    assert heard == [2, 1]


def test_measured_peak_counts_live_tensors():
    measured, _ = memory.measured_peak(lambda: torch.ones(2**20).sum())  # 4 MiB, then a scalar
    assert 4 * 2**20 <= measured < 5 * 2**20


@pytest.mark.slow
def test_a_packed_cpu_sweep_runs_and_its_rows_say_how_it_used_memory(local_ray, tmp_path):
    """Real Ray: two trials at once on this machine's CPUs; each row holds its micro-batch
    (the whole step on CPU, as before `auto`), no retries, the predicted and measured peak."""
    from shapesweep.results.store import load_trials

    path = write_space(tmp_path, search={"n_layers": [1, 2]})
    root = tmp_path / "sweeps"
    assert main(["run", str(path), "--root", str(root), "--no-progress", "--max-concurrent", "2",
                 "--scheduler", "fifo"]) == 0
    trials = load_trials(str(root), ["tiny-depths"])
    assert len(trials) == 2 and set(trials["status"]) == {"completed"}
    per_step = TINY_SPACE["train"]["batch_tokens"] // TINY_SPACE["train"]["seq_len"]
    assert set(trials["micro_batch_size"]) == {per_step} and set(trials["oom_retries"]) == {0}
    assert (trials["memory_peak_bytes"] > 0).all() and (trials["memory_peak_bytes_measured"] > 0).all()


def test_candidate_files_compare_on_cpu(tmp_path, capsys, monkeypatch):
    """`compare_cli`, the GPU check's command, runs anywhere (here on CPU)."""
    import sys

    assert main(["plan", "demo-quick", "--out", str(tmp_path)]) == 0
    file = sorted(Path(tmp_path).glob("*.yaml"))[0]
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["compare", str(file), "--device", "cpu", "--steps", "2"])
    compare_cli()
    row = json.loads(capsys.readouterr().out)
    assert {"states", "activations", "logits", "total", "measured", "error"} <= set(row)
    assert abs(row["error"]) <= TOLERANCE
