"""The GPU hot path, checked on CPU: no per-step host reads, CPU arithmetic unchanged,
NaN still named by its step, batches still a pure function of (seed, step), bench_gpu runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import evaluation, loop, schedule
from shapesweep.trainers.compiled import compile_cache
from shapesweep.trainers.loop import (
    NonFiniteLoss,
    lr_multiplier,
    make_task,
    prefetched,
    train,
)
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure

TINY = dict(family="conventional", d_model=16, n_layers=1, n_heads=2, d_h=64)
RECIPE = dict(steps=12, seq_len=32, batch_tokens=256, eval_tokens=1024, lr=1e-2, eval_every=4)
ROOT = Path(__file__).resolve().parents[1]
# Every way a tensor's value reaches Python (each one waits for the GPU when it is there).
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _count_reads(monkeypatch) -> list[str]:
    """Record every tensor read whose caller is the loop: trainers/loop.py or the modules
    it was split into, evaluation.py and schedule.py (torch's own CPU-side reads, e.g.
    AdamW's step counter, are not the loop's)."""
    ours = {loop.__file__, evaluation.__file__, schedule.__file__}
    calls = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            if sys._getframe(1).f_code.co_filename in ours:
                calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


@pytest.mark.parametrize("eval_every", [4, 6])
def test_the_step_reads_nothing_from_the_device(monkeypatch, eval_every):
    """One read of the interval's losses and one of the val loss (with its standard error)
    per evaluation, none per step."""
    calls = _count_reads(monkeypatch)
    result = train(make_config(TINY), TrainConfig(**{**RECIPE, "eval_every": eval_every,
                                                     "micro_batch_size": 3, "z_loss": 1e-3}))
    assert len(result.curve) == 12 // eval_every
    assert calls == ["tolist", "tolist"] * len(result.curve)


def test_cpu_losses_equal_a_plain_reference_loop():
    """Per-step train losses (eval every step) match a straightforward loop written here:
    same init, batches, AdamW groups, schedule and clipping; bit for bit on CPU."""
    config, recipe = make_config(TINY), TrainConfig(**{**RECIPE, "eval_every": 1})
    ours = [m["train_loss"] for m in train(config, recipe).curve]

    task, n_seq, _, _ = make_task(config, recipe, None, None)
    torch.manual_seed(recipe.seed)
    model = build_model(config)
    groups = configure(model, config, recipe)
    optimizer = torch.optim.AdamW([{**g, "lr": recipe.lr * g.get("lr_scale", 1.0)} for g in groups],
                                  lr=recipe.lr, betas=(recipe.beta1, recipe.beta2))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, recipe.steps, recipe))
    reference = []
    for step in range(recipe.steps):
        x, y = task.train_batch(step, n_seq)
        loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        reference.append(loss.item())
    assert recipe.grad_clip > 0 and ours == pytest.approx(reference, abs=1e-6, rel=0)
    assert ours == reference  # in fact bit-identical: the loop adds no arithmetic on CPU


def test_nan_named_at_its_step_not_at_the_evaluation():
    """Reading losses once per interval still names the first non-finite step: the same step
    as a run that reads every step (eval_every=1)."""
    diverge = {**RECIPE, "lr": 1e30, "grad_clip": 0.0}
    named = []
    for eval_every in (1, 4):
        with pytest.raises(NonFiniteLoss, match=r"at step \d+ of 12") as error:
            train(make_config(TINY), TrainConfig(**{**diverge, "eval_every": eval_every}))
        named.append(int(str(error.value).split("at step ")[1].split()[0]))
    assert named[0] == named[1] and named[1] % 4 != 0  # inside the interval, not at its end


def test_prefetched_batches_are_the_tasks_batches():
    config, recipe = make_config(TINY), TrainConfig(**RECIPE)
    task, n_seq, _, _ = make_task(config, recipe, None, None)
    got = list(prefetched(task.train_batch, range(5, 9), n_seq, torch.device("cpu")))
    assert [step for step, _, _ in got] == [5, 6, 7, 8]
    for step, x, y in got:
        want_x, want_y = task.train_batch(step, n_seq)
        assert torch.equal(x, want_x) and torch.equal(y, want_y)
    assert list(prefetched(task.train_batch, range(3, 3), n_seq, torch.device("cpu"))) == []


def test_compile_cache_is_shared_and_overridable(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("SHAPESWEEP_CACHE", str(tmp_path / "cache"))
    assert compile_cache() == str(tmp_path / "cache" / "inductor")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache() == str(tmp_path / "mine")


@pytest.mark.slow
def test_bench_gpu_quick_on_cpu():
    """The GPU benchmark's CPU mode prints every field for the four shapes and the mixture of
    experts within its budget (no timing checks), compiled as on CUDA (traced by dynamo and
    AOTAutograd and run by eager ops here, to keep it quick)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:aot_eager"}
    out = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--device", "cpu",
                          "--repeats", "1", "--peak-tflops", "1", "--budget-s", "900"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=900, check=True).stdout
    lines = [line for line in out.splitlines() if ": tokens/s " in line]
    assert [line.split(":")[0] for line in lines] == [
        "conventional tiny", "hourglass tiny k=2", "><former tiny constant",
        "><former tiny bottleneck"]
    for line in lines:
        for field in ("plain tokens/s", "loop/plain", "eager tokens/s", "compiled/eager", "MFU",
                      "peak memory n/a (CPU)", "compile s ", "micro-batch",
                      "compile 0 graph breaks, 0 recompiles, autocast none"):
            assert field in line
        assert "MFU n/a" not in line  # --peak-tflops gives a number
    assert "mixture of experts, compiled vs eager: eager val_loss" in out
    assert out.splitlines()[-1].startswith("done, ")


def test_bench_gpu_stops_at_its_budget():
    """With no budget left, every item is skipped, each said in one line, and it ends cleanly."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--device", "cpu",
                          "--budget-s", "0", "--sweep"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    skipped = [line for line in out.splitlines() if "skipped" in line]
    assert len(skipped) == 7 and out.splitlines()[-1].startswith("done, ")


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_bench_gpu_items_pick_and_order_and_refuse_unknown_names():
    """`--items` runs the named items in its order; an unknown name is one line, exit 2."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--device", "cpu",
                          "--budget-s", "0", "--items", "moe,baseline"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    skipped = [line.split(":")[0] for line in out.splitlines() if "skipped" in line]
    assert skipped == ["mixture of experts, compiled vs eager", "conventional tiny"]
    bad = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--items", "packed,nope"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown item nope" in bad.stderr


@pytest.mark.slow  # a torch.compile in each of 4 fresh processes: the fast tier's longest test
def test_bench_gpu_compile_and_peaks_items_run_on_cpu():
    """The `compile` item compiles a stand-in four ways, each in a fresh process, then times
    the four side by side; `peaks` measures the memory model's step and evaluation peaks
    apart. Each line carries its fields (traced by dynamo and AOTAutograd, run by eager ops
    here, to keep it quick: the code path, no figure)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:aot_eager"}
    out = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--device", "cpu",
                          "--budget-s", "600", "--items", "compile,peaks"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    line = next(line for line in out.splitlines()
                if line.startswith("whole, nested, regional and regions-of-4 compile: "))
    for field in ("compile whole ", "nested ", "regional ", "regional:4 ", "steady tok/s whole ",
                  "over whole's (median, 10-90% of rounds): nested "):
        assert field in line
    line = next(line for line in out.splitlines()
                if line.startswith("memory peaks, step and evaluation: conventional"))
    for field in ("step predicted ", "measured ", "evaluation predicted "):
        assert field in line
    assert re.search(r"conventional compiled step, one block a region [\d.]+ GiB, regions of 2 "
                     r"[\d.]+ GiB \([+-][\d.]+%\)", out), out
    assert out.splitlines()[-1].startswith("done, ")


@pytest.mark.slow
def test_bench_gpu_packed_sweep_runs_on_cpu():
    """The packed-sweep item runs a real `shapesweep run` (tiny stand-in, no GPU share) and
    reports every trial's micro-batch, predicted and measured peak and OOM retries."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--device", "cpu",
                          "--budget-s", "600", "--items", "packed"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    assert "packed 113M sweep: exit 0, 2 trials" in out and "2 completed" in out
    trials = [line for line in out.splitlines() if line.startswith("  conventional")]
    assert len(trials) == 2
    for line in trials:
        for field in ("completed, micro-batch ", "predicted ", "measured ", "0 OOM retries"):
            assert field in line


@pytest.mark.slow
def test_bench_gpu_end_to_end_sweep_runs_on_cpu(tmp_path):
    """The `e2e` item runs plan, run, status and export as a user would (a tiny stand-in, a
    few seconds of training), sets each candidate's predicted peak beside the measured one,
    and writes what it measured into the figures file `--figures` names, each figure with its
    device, torch build and command (on CPU the committed file is never written)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    figures = tmp_path / "figures.json"
    out = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--device", "cpu",
                          "--budget-s", "600", "--items", "e2e", "--figures", str(figures)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                         check=True).stdout
    assert re.search(r"end-to-end 113M sweep: plan 2 candidates; run exit 0 in [\d.]+ s; status "
                     r"exit 0; export exit 0, [1-9]\d* files", out), out
    rows = [line for line in out.splitlines() if line.startswith("  L")]
    assert len(rows) == 2 and all("completed" in r and "peak predicted " in r for r in rows), out
    written = json.loads(figures.read_text())["figures"]
    assert {"e2e_wall_s", "e2e_step_s_measured_L1", "e2e_peak_gib_predicted_L2"} <= set(written)
    for figure in written.values():
        assert figure["device"] == "CPU" and figure["torch"] and figure["value"] > 0
        assert figure["command"].startswith("python benchmarks/bench_gpu.py --quick")
