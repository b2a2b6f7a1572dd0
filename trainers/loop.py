"""The short-trial training loop: one candidate config, real data, a handful of metrics.

AdamW with per-group lr (schedule x train.lr x the group's lr_scale from
`shapesweep.trainers.mup.configure`), linear warmup then cosine/linear/constant/power decay, gradient
clipping, gradient accumulation so every optimizer step sees `batch_tokens` tokens
(`batch_size` images), the model's own loss (cross-entropy + optional z-loss, hourglass-ffn;
`shapesweep.trainers.objective`, computed inside the compiled step), periodic evaluation.
The loop knows nothing of Ray: it reports through `callback(metrics)` after each
evaluation, and a callback stops the trial by raising `StopTrial`. The time spent in the
callback (a sweep's trial waits there while the driver files its result and logs it to
trackers) is no part of the trial's `elapsed_s` and `wall_time_s`.

On a GPU the step never waits for the device: losses stay on it and are read once per
evaluation interval (where a NaN is caught and named by its step), batches are pinned and
the next one is copied ahead; bf16 autocast (`train.autocast`), fused AdamW and TF32 matmuls.

Why one module (over 400 lines): the step, its evaluation points and its checkpoint and
retry bookkeeping are one sequence a reader follows top to bottom; the schedule, the
optimizer and the evaluation itself live in `schedule.py` and `evaluation.py`.
`train.compile` compiles the training step block by block on any device (Inductor on CPU
too; `shapesweep.trainers.compiled`: a fresh cache per trial, graph breaks, recompiles and
compile seconds counted into the result); `auto` decides by the trial's length
(`shapesweep.trainers.compile_policy`). On CPU, uncompiled and in fp32, the arithmetic is
exactly that of a plain loop.

Data parallel: run in N processes of a torch.distributed group (Ray Train's workers), the
loop wraps the model in DDP, or shards it with FSDP2 (`parallel="fsdp"`: each rank holds
1/N of the parameters, gradients and AdamW state), and each rank trains its slice of every
step's (seed, step) batch, so the step, and the curve, are the one-process ones. Every rank
calls `callback` (Ray Train's report is collective); rank 0 alone writes checkpoints and
`save_dir`, whole state dicts in the one-process format whichever way the model was split.

The step reads top to bottom in `_attempt` (nanoGPT's train.py is the model): `_Trial` builds
what it trains with (model, init, optimizer, schedule, the compiled forward, the cadence) and
restores a checkpoint; the parts that stand alone are their own modules (`recipe` and
`schedule`: the recipe and its lr schedule and AdamW; `evaluation`, `tasks`, `cooldown`,
`compiled`, `checkpoint`, `parallel`, `mup`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Unpack

import torch
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from shapesweep.families.base import load, of
from shapesweep.search_spaces.cadence import (
    at_steps,
    cooldown_points,
    cooldown_tokens,
    eval_steps,
    total_steps,
)
from shapesweep.search_spaces.configs import config_key
from shapesweep.trainers import analysis, checkpoint, cooldown, machine
from shapesweep.trainers.compile_policy import decide, peak_flops
from shapesweep.trainers.compiled import CompiledStep, eager
from shapesweep.trainers.distributed import (
    agreed,
    data_parallel,
    from_rank0,
    full_state,
    fully_shard_model,
    load_full_state,
    over_ranks,
    process_group,
    shard_batches,
)
from shapesweep.trainers.evaluation import evaluate, example_losses  # noqa: F401 (tests)
from shapesweep.trainers.loss_tail import LossTail
from shapesweep.trainers.memory import check_fits, micro_batch, share_bytes
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure
from shapesweep.trainers.parallel import check_compilable, check_shardable
from shapesweep.trainers.recipe import TrainConfig
from shapesweep.trainers.schedule import (  # noqa: F401 (re-exported: tests, benchmarks)
    adamw,
    autocast_dtype,
    lr_multiplier,
    warmup_steps,
)
from shapesweep.trainers.spec import Options, Reporter, TrialSpec
from shapesweep.trainers.tasks import Made, TrainerTask


class StopTrial(Exception):
    """Raised by a callback to end the trial early (e.g. an ASHA decision); not an error."""


class OutOfMemoryAt(torch.OutOfMemoryError):
    """CUDA ran out of memory in a run at `micro_batch` sequences (images) a forward."""

    def __init__(self, micro_batch: int):
        super().__init__(f"out of memory at micro-batch {micro_batch}")
        self.micro_batch = micro_batch


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or inf (the message names the step)."""


@dataclass
class TrainResult:
    val_loss: float  # at the last evaluation
    best_val_loss: float
    val_ppl: float | None  # LM only
    train_loss: float  # mean over the steps since the previous evaluation
    val_loss_se: float | None  # standard error of val_loss over its held-out sequences (images)
    tokens: int  # images for vision
    steps: int
    wall_time_s: float  # training, evaluation and checkpoints; not the time in `callback`
    tokens_per_s: float  # training steps only (evaluation excluded)
    params_measured: int  # trainable numel of the built model
    data_hash: str
    stopped: bool = False
    curve: list[dict[str, Any]] = field(default_factory=list)
    psnr: float | None = None
    ssim: float | None = None
    accuracy: float | None = None  # vision genclass only
    layers: list[dict[str, Any]] = field(default_factory=list)  # shapesweep.trainers.analysis rows, if run
    train_loss_tail: float | None = None  # xformer's reported loss (shapesweep.trainers.loss_tail)
    # torch.compile and autocast as they ran (shapesweep.trainers.compiled): compiled is
    # whether dynamo compiled the training forward; the counts are None without train.compile
    compiled: bool = False
    graph_breaks: int | None = None
    recompiles: int | None = None  # graphs compiled after the forward's first call
    compile_s: float | None = None  # seconds torch.compile spent in this trial; None: eager
    blocks_per_region: int | None = None  # alike blocks a compiled region held at most; None: eager
    autocast_dtype: str = "none"  # bfloat16 | none
    cooldown_tokens: int = 0  # trained by cooldown branches (trainers/cooldown.py), not in `tokens`
    # where it ran (shapesweep.trainers.machine): rank 0's CPU, torch build, device and threads
    micro_batch_size: int | None = None  # sequences (images) a forward (`memory.micro_batch`)
    cpu_model: str | None = None
    torch_version: str | None = None
    device_name: str | None = None  # the CUDA device's name, or "cpu"
    torch_threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trainer_task(config: BaseModel) -> TrainerTask:
    """The torch side of the config's family's task (`FamilySpec.task`)."""
    return load(of(config).task.trainer)


def make_task(config: BaseModel, train: TrainConfig, data: str | None,
              tokenizer: str | None) -> Made:
    """The data task: (task, items per optimizer step, tokens or images per step, data hash)."""
    return trainer_task(config).made(config, train, data, tokenizer)


def _backward(forward, x, y, micro: int, dev, autocast, z_loss: float) -> torch.Tensor:
    """Accumulate gradients of one optimizer step's batch over micro-batches; return its
    (objective, reported) losses as one tensor left on the device (reading it would sync).
    `forward(x, targets, z_loss)` is the model's own loss (`shapesweep.trainers.objective`),
    a mixture of experts' load-balancing loss included in the objective."""
    objective_sum = torch.zeros((), device=dev)
    reported_sum = torch.zeros((), device=dev)
    for xs, ys in zip(x.split(micro), y.split(micro), strict=True):
        xs, ys = xs.to(dev, non_blocking=True), ys.to(dev, non_blocking=True)
        with autocast():
            objective, reported = forward(xs, ys, z_loss)
        weight = len(xs) / len(x)
        (objective * weight).backward()
        objective_sum += objective.detach() * weight
        reported_sum += reported.detach() * weight
    return torch.stack([objective_sum, reported_sum])


def _interval_loss(losses: list[torch.Tensor], last_step: int, steps: int, lr: float) -> float:
    """Mean reported loss of the steps since the previous evaluation, read from the device in
    one transfer (the interval's only wait for it). Raises NonFiniteLoss naming the first step
    whose loss was NaN or inf."""
    values = torch.stack(losses).tolist()
    for step, (objective, reported) in enumerate(values, last_step - len(values) + 1):
        if not (math.isfinite(objective) and math.isfinite(reported)):
            raise NonFiniteLoss(f"training loss became {objective} at step {step} of {steps} "
                                f"(lr={lr:g}); lower the learning rate")
    return sum(reported for _, reported in values) / len(values)


def prefetched(train_batch: Callable, steps: range, per_step: int, dev) -> Iterator[tuple]:
    """(step, x, y) for each step, the next step's batch built and its copy queued before this
    one is trained on. On CUDA batches go through pinned memory with non-blocking copies
    (PyTorch's pinned-memory cache keeps a buffer until its copy is done); on CPU they are the
    task's tensors untouched. Batches stay a pure function of (seed, step)."""
    def load(step):
        x, y = train_batch(step, per_step)
        if dev.type == "cuda":
            x, y = (t.pin_memory().to(dev, non_blocking=True) for t in (x, y))
        return x, y

    ahead = load(steps[0]) if steps else None
    for i, step in enumerate(steps):
        batch, ahead = ahead, (load(steps[i + 1]) if i + 1 < len(steps) else None)
        yield step, *batch


def _cuda_speedups() -> None:
    """TF32 for the float32 matmuls autocast leaves (bf16 does the rest)."""
    torch.set_float32_matmul_precision("high")


def _progress(enabled: bool) -> contextlib.AbstractContextManager[Progress | None]:
    if not enabled:
        return contextlib.nullcontext(None)
    return Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.description}"), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=False)


def train(model_config: BaseModel, recipe: TrainConfig, callback: Reporter | None = None,
          **options: Unpack[Options]) -> TrainResult:
    """One attempt at `TrialSpec(model_config, recipe, **options)` (`run`): the shorthand of
    tests and benchmarks. The CLI, the sweep and its workers train through
    `shapesweep.trainers.fitting.train`, which retries an out-of-memory error."""
    return run(TrialSpec(model_config, recipe, **options), callback)


def run(spec: TrialSpec, reporter: Reporter | None = None) -> TrainResult:
    """One attempt at training `spec`, resumed from its `checkpoint_dir` if that holds one;
    `reporter(metrics)` hears each evaluation. CUDA running out of memory is raised as
    `OutOfMemoryAt` the micro-batch it ran at (`shapesweep.trainers.fitting` retries it)."""
    checkpoint.check_save_dir(spec.save_dir)
    dev = torch.device(spec.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    world = process_group()[1]
    sharded = world > 1 and spec.parallel == "fsdp"
    if sharded:
        check_shardable(spec.model)
        check_compilable(spec.recipe)
    have = share_bytes(dev, spec.memory_share)
    # refuse a model too large before torch allocates it
    check_fits(spec.model, spec.recipe, dev, world if sharded else 1, have, spec.micro_batch)
    if dev.type == "cuda":
        _cuda_speedups()
    made = make_task(spec.model, spec.recipe, spec.data, spec.tokenizer)
    # the retry's, the recipe's, or what fits
    micro = micro_batch(spec.model, spec.recipe, dev, made[1], have, spec.micro_batch)
    try:
        result = _attempt(spec, reporter, dev, made, micro)
    except torch.OutOfMemoryError as error:
        raise OutOfMemoryAt(micro) from error
    result.micro_batch_size = micro
    return result


class _Trial:
    """One attempt's state, built before its first step as nanoGPT's train.py builds it: the
    model (initialised, moved, sharded or wrapped, compiled), the optimizer and schedule, the
    evaluation cadence, and what a resumed checkpoint restores. `_attempt` runs its steps."""

    def __init__(self, spec: TrialSpec, dev: torch.device, made: Made, micro: int):
        self.spec, self.train, self.dev, self.made, self.micro = spec, spec.recipe, dev, made, micro
        config, train, units = spec.model, spec.recipe, made.units_per_step
        self.rank, self.world = process_group()
        self.sharded = self.world > 1 and spec.parallel == "fsdp"
        self.analysed = analysis.wanted(config, train)
        # the cadence: total steps, evaluations, a scheduler's rungs, cooldown branches
        self.steps = total_steps(train, units)
        self.evals = set(eval_steps(train, self.steps, units, spec.eval_at))
        self.rungs = at_steps(spec.eval_at, self.steps, units)  # a scheduler may pause there
        self.cooled = cooldown_points(train, self.evals, self.rungs, self.steps)
        self.eval_batch = trainer_task(config).eval_batch(micro)
        # the model, its init, the optimizer and schedule
        torch.manual_seed(train.seed)
        self.model = model = build_model(config)
        if self.analysed:
            analysis.check(model)
        groups = configure(model, config, train)
        model.to(dev)
        if self.sharded:
            groups = fully_shard_model(model, groups, made.per_step)
        self.params_measured = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.optimizer = adamw(groups, train, fused=dev.type == "cuda")
        # a plain lambda: LambdaLR's state (in checkpoints) keeps no state of functions; over
        # locals, not `self`: a scheduler closing over the trial that holds it is a reference
        # cycle, which kept the model, its gradients and AdamW's states alive after the trial
        # until Python's cycle collector ran (in a later trial's step)
        steps = self.steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_multiplier(s, steps, train, units))
        self.params = [p for g in groups for p in g["params"]]
        # the forward: DDP-wrapped over ranks, compiled block by block when it pays
        data_par = self.world > 1 and not self.sharded
        self.forward = data_parallel(model, made.per_step, dev) if data_par else model
        decision = decide(config, train, dev.type, self.steps * units, _peak_flops(dev))
        self.compiling = not self.sharded and decision.compile
        self.stepper = (CompiledStep(model, self.forward, train.compile_mode,
                                     decision.blocks_per_region)
                        if self.compiling else self.forward)
        self.dtype = autocast_dtype(train, dev)
        self.identity = {"config_key": config_key(config), "family": of(config).name,
                         "train": train.model_dump(mode="json"), "data_hash": made.data_hash}

    def lr_factor(self, step: int) -> float:
        return lr_multiplier(step, self.steps, self.train, self.made.units_per_step)

    def autocast(self) -> contextlib.AbstractContextManager:
        return (torch.autocast(self.dev.type, dtype=self.dtype) if self.dtype
                else contextlib.nullcontext())

    def evaluated(self) -> dict[str, float]:
        """The held-out metrics, with the compiled regions run eagerly (see `compiled`)."""
        with _eager(self.compiling):
            return evaluate(self.forward, self.made.task, self.eval_batch, self.dev, self.autocast)

    def optimizer_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One step's gradient, clipped and applied (the main run's and a cooldown branch's)."""
        loss = _backward(self.stepper, x, y, self.micro, self.dev, self.autocast, self.train.z_loss)
        if self.train.grad_clip > 0:  # no sync: a non-finite norm is caught with the loss
            torch.nn.utils.clip_grad_norm_(self.params, self.train.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def resume(self) -> dict[str, Any] | None:
        """The checkpoint's state restored into the model, optimizer, schedule and RNGs (None:
        a fresh start)."""
        saved = checkpoint.load(self.spec.checkpoint_dir, self.identity,
                                reread={"train": _recipe_today})
        state = from_rank0(saved, self.world)
        if state is not None:
            load_full_state(self.model, self.optimizer, state, self.sharded)
            self.scheduler.load_state_dict(state["scheduler"])
            checkpoint.set_rng_state(state["rng"])
        return state

    def brancher(self, batches: Callable) -> cooldown.Brancher:
        """The cooldown branches an evaluation may run (trainers/cooldown.py)."""
        return cooldown.Brancher(self.train, self.steps, self.model, self.optimizer,
                                 self.scheduler.base_lrs, self.optimizer_step,
                                 lambda step: batches(step, self.made.per_step), self.evaluated,
                                 self.lr_factor)

    def save(self, done: int, curve: list, tail: LossTail, elapsed: float,
             train_time: float) -> float:
        """A checkpoint after step `done` (rank 0 writes it; gathering is collective); returns
        when its state was gathered (the next one is due checkpoint_every_s after)."""
        weights, moments = full_state(self.model, self.optimizer, self.sharded)
        gathered = time.perf_counter()
        if self.rank == 0 and self.spec.checkpoint_dir is not None:
            checkpoint.save(self.spec.checkpoint_dir, weights, self.spec.model, self.train, {
                "identity": self.identity, "optimizer": moments,
                "scheduler": self.scheduler.state_dict(), "rng": checkpoint.rng_state(),
                "step": done, "curve": curve, "loss_tail": tail.values, "elapsed_s": elapsed,
                "train_time_s": train_time})
        return gathered

    def finish(self, curve: list, elapsed: Callable[[], float], train_time: float,
               tail: LossTail, stopped: bool) -> TrainResult:
        """The trained model saved where asked, the analysis run, and the result (its wall
        time `elapsed()` once both are done)."""
        if self.spec.save_dir is not None:
            weights = full_state(self.model, None, self.sharded)[0]
            if self.rank == 0:
                checkpoint.save_model(self.spec.save_dir, weights, self.spec.model, self.train)
        task = self.made.task
        with _eager(self.compiling):
            layers = (analysis.analyse(self.model, *analysis.sequences(task.val_x, task.val_y,
                                                                       self.model), self.autocast)
                      if self.analysed and not stopped else [])
        result = _result(curve, elapsed(), train_time, self.params_measured, self.made.data_hash,
                         stopped, trainer_task(self.spec.model).perplexity)
        result.layers, result.train_loss_tail = layers, tail.mean()
        result.autocast_dtype = str(self.dtype).removeprefix("torch.") if self.dtype else "none"
        for name, value in machine.describe(self.dev).items():
            setattr(result, name, value)
        if isinstance(self.stepper, CompiledStep):
            for name, value in self.stepper.report().items():
                setattr(result, name, value)
        return result


def _attempt(spec: TrialSpec, reporter: Reporter | None, dev: torch.device, made: Made,
             micro: int) -> TrainResult:
    """`run`'s training, on `made` (`make_task`'s) at `micro` sequences (images) a forward:
    the trial built (or resumed), then each step, each evaluation with its checkpoint and
    report, then the saved model and the result."""
    trial, train, units = _Trial(spec, dev, made, micro), spec.recipe, made.units_per_step
    state = trial.resume()
    start, curve = (state["step"], state["curve"]) if state else (0, [])
    prior_elapsed, train_time = (state["elapsed_s"], state["train_time_s"]) if state else (0.0, 0.0)
    tail = LossTail(trial.steps, train.loss_tail_steps, state.get("loss_tail") if state else None)
    t0 = saved_at = time.perf_counter()
    reporting = 0.0  # time in `reporter`: a sweep's trial waits there on the driver (trackers)
    losses, stopped = [], False  # this interval's per-step losses, on the device
    trial.model.train()
    with _progress(spec.progress) as bar:
        bar_task = bar.add_task("", total=trial.steps, completed=start) if bar else None
        t_interval = time.perf_counter()
        batches = shard_batches(made.task.train_batch, trial.rank, trial.world)
        brancher = trial.brancher(batches)
        for step, x, y in prefetched(batches, range(start, trial.steps), made.per_step, dev):
            lr_now = train.lr * trial.lr_factor(step)
            losses.append(trial.optimizer_step(x, y))
            trial.scheduler.step()
            done = step + 1
            if bar is not None and bar_task is not None:
                bar.update(bar_task, completed=done)
            if done not in trial.evals:
                continue
            # an evaluation: the interval's training loss (the one wait for the device), the
            # held-out metrics, cooldown branches, a checkpoint when due, the report
            losses = over_ranks(losses, trial.world)
            train_loss = _interval_loss(losses, done, trial.steps, train.lr)
            tail.add(losses, done)
            train_time += time.perf_counter() - t_interval
            losses = []
            metrics = {"step": done, "tokens": done * units, "train_loss": train_loss,
                       **trial.evaluated(), "lr": lr_now,
                       "elapsed_s": prior_elapsed + time.perf_counter() - t0 - reporting}
            if trial.cooled:
                if done in trial.cooled:
                    metrics.update(brancher.cooled(done, metrics))
                metrics["cooldown_tokens"] = cooldown_tokens(train, trial.cooled, done,
                                                             trial.steps, units)
            curve.append(metrics)
            due = spec.checkpoint_dir is not None and agreed(
                done in trial.rungs or time.perf_counter() - saved_at >= spec.checkpoint_every_s,
                trial.world, dev)
            if due:
                saved_at = trial.save(done, curve, tail, metrics["elapsed_s"], train_time)
            if bar is not None and bar_task is not None:
                bar.update(bar_task, description=f"loss {metrics['train_loss']:.4f} "
                                                 f"val {metrics['val_loss']:.4f}")
            if reporter is not None:
                called = time.perf_counter()
                try:
                    reporter(dict(metrics))
                except StopTrial:
                    stopped = True
                    break
                finally:
                    reporting += time.perf_counter() - called
            t_interval = time.perf_counter()
    return trial.finish(curve, lambda: prior_elapsed + time.perf_counter() - t0 - reporting,
                        train_time, tail, stopped)


def _recipe_today(saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved recipe as this version dumps it: a key added since, at its
    default, leaves an interrupted trial resumable."""
    return TrainConfig(**saved).model_dump(mode="json")


def _eager(compiling: bool) -> contextlib.AbstractContextManager:
    """Run compiled regions eagerly inside this context (evaluation, analysis)."""
    return eager() if compiling else contextlib.nullcontext()


def _peak_flops(dev: torch.device) -> float | None:
    """The CUDA device's dense bf16 peak (`compile_policy.PEAK_TFLOPS`), None elsewhere."""
    return peak_flops(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else None


def _result(curve, wall, train_time, params_measured, data_hash, stopped,
            perplexity: bool) -> TrainResult:
    last = curve[-1]
    return TrainResult(
        val_loss=last["val_loss"], best_val_loss=min(m["val_loss"] for m in curve),
        val_ppl=math.exp(min(last["val_loss"], 700.0)) if perplexity else None,
        train_loss=last["train_loss"], val_loss_se=last.get("val_loss_se"),
        tokens=last["tokens"], steps=last["step"],
        wall_time_s=wall, tokens_per_s=last["tokens"] / max(train_time, 1e-9),
        params_measured=params_measured, data_hash=data_hash, stopped=stopped, curve=list(curve),
        psnr=last.get("psnr"), ssim=last.get("ssim"), accuracy=last.get("accuracy"),
        cooldown_tokens=last.get("cooldown_tokens", 0))
