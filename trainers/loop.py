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

Why one module of this length: the loop is one function whose steps share its state
(model, optimizer, schedule, checkpoint, evaluation cadence); the parts that stand
alone are their own modules (`cooldown`, `compiled`, `checkpoint`, `parallel`, `mup`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Unpack

import torch
import torch.nn.functional as F
from pydantic import BaseModel

from shapesweep.families.base import load, of
from shapesweep.search_spaces.cadence import (
    at_steps,
    cooldown_points,
    cooldown_steps,
    cooldown_tokens,
    eval_steps,
    total_steps,
)
from shapesweep.search_spaces.configs import (
    TrainConfig,
    config_key,
)
from shapesweep.trainers import analysis, checkpoint, cooldown, machine
from shapesweep.trainers.compile_policy import decide, peak_flops
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
from shapesweep.trainers.loss_tail import LossTail
from shapesweep.trainers.memory import EVAL_CHUNK_TOKENS, check_fits, micro_batch, share_bytes
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure
from shapesweep.trainers.parallel import check_compilable, check_shardable
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


def warmup_steps(train: TrainConfig, total: int, units_per_step: int | None = None) -> int:
    """round(warmup_frac x total), or round(warmup_tokens / units_per_step): tokens (images
    for vision) per optimizer step, by default the LM's whole sequences of batch_tokens."""
    if train.warmup_tokens is None:
        return round(train.warmup_frac * total)
    units_per_step = units_per_step or train.batch_tokens // train.seq_len * train.seq_len
    return round(train.warmup_tokens / units_per_step)


def lr_multiplier(step: int, total: int, train: TrainConfig,
                  units_per_step: int | None = None) -> float:
    """Schedule factor for optimizer step `step` (0-based): linear warmup over W steps
    (`warmup_steps`), then decay to min_lr_frac. `power` (xformer): with t = step + 1,
    t/W while t < W, then max(min_lr_frac, (W/t)^decay_power), an inverse-power decay
    (p = 0.5 is the inverse square root). `wsd`: 1 until the last cooldown_frac of the
    steps, which cool down as `cooldown.factor` says."""
    warmup = warmup_steps(train, total, units_per_step)
    if train.decay == "power":
        t, w = step + 1, max(warmup, 1)
        return t / w if t < w else max(train.min_lr_frac, (w / t) ** train.decay_power)
    if step < warmup:
        return (step + 1) / warmup
    if train.decay == "wsd":
        cool = cooldown_steps(train, total)
        return 1.0 if step < total - cool else cooldown.factor(train, 1.0, step - (total - cool), cool)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    floor = train.min_lr_frac
    if train.decay == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if train.decay == "linear":
        return 1 - (1 - floor) * progress
    return 1.0


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


def autocast_dtype(train: TrainConfig, dev: torch.device) -> torch.dtype | None:
    """The forward's autocast dtype: `train.autocast`, whose `auto` is bf16 on CUDA only.
    Losses, norms and the router's softmax stay in fp32 under it (`_loss`, RMSNorm's opmath)."""
    if train.autocast == "auto":
        return torch.bfloat16 if dev.type == "cuda" else None
    return torch.bfloat16 if train.autocast == "bfloat16" else None


def adamw(groups: list[dict], train: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW over the muP groups, each at train.lr x its lr_scale; `fused` on CUDA (one
    kernel for all parameters), torch's default (foreach) implementation elsewhere."""
    return torch.optim.AdamW([{**g, "lr": train.lr * g.get("lr_scale", 1.0)} for g in groups],
                             lr=train.lr, betas=(train.beta1, train.beta2), fused=fused or None)


def _cuda_speedups() -> None:
    """TF32 for the float32 matmuls autocast leaves (bf16 does the rest)."""
    torch.set_float32_matmul_precision("high")


def _example_losses(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each held-out example's loss: a sequence's mean cross-entropy, an image's MSE (their
    mean is `_loss`'s reported loss: every example has as many tokens or pixels)."""
    if y.is_floating_point():
        return (out.float() - y).square().flatten(1).mean(1)
    rows = max(1, EVAL_CHUNK_TOKENS // y.shape[1])  # fp32 logits a few sequences at a time
    return torch.cat([F.cross_entropy(o.float().flatten(0, 1), t.flatten(), reduction="none")
                      .view(t.shape).mean(1) for o, t in zip(out.split(rows), y.split(rows),
                                                             strict=True)])


@torch.no_grad()
def evaluate(model, task, batch: int, device, autocast) -> dict[str, float]:
    """Validation loss (and ppl, or image metrics) on the task's fixed held-out set, and its
    standard error over the held-out sequences (images): std / sqrt(n) of their losses, so a
    comparison can tell an effect from the sampling noise of a finite evaluation set."""
    model.eval()
    sums, count, preds = torch.zeros(2, dtype=torch.float64, device=device), 0, []
    for x, y in zip(task.val_x.split(batch), task.val_y.split(batch), strict=True):
        with autocast():
            out = model(x.to(device))
        losses = _example_losses(out, y.to(device)).double()
        sums += torch.stack([losses.sum(), losses.square().sum()])  # on the device, read once below
        count += len(x)
        if y.is_floating_point():
            preds.append(out.float())
    model.train()
    total, squares = sums.tolist()
    mean = total / count
    spread = max(squares - count * mean * mean, 0.0) / (count - 1) if count > 1 else math.nan
    metrics = {"val_loss": mean, "val_loss_se": math.sqrt(spread / count)}
    if preds:
        metrics.update(task.metrics(torch.cat(preds).cpu()))
    else:
        metrics["val_ppl"] = math.exp(min(metrics["val_loss"], 700.0))
    return metrics


def _progress(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

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


def _attempt(spec: TrialSpec, reporter: Reporter | None, dev: torch.device, made: tuple,
             micro: int) -> TrainResult:
    """`run`'s training, on `made` (`make_task`'s) at `micro` sequences (images) a forward:
    the model and optimizer built (or resumed), then each step, each evaluation with its
    checkpoint and report, then the saved model and the result."""
    model_config, train = spec.model, spec.recipe
    task, per_step, units_per_step, data_hash = made
    rank, world = process_group()
    sharded = world > 1 and spec.parallel == "fsdp"
    cuda = dev.type == "cuda"
    analysed = analysis.wanted(model_config, train)
    steps = total_steps(train, units_per_step)
    evals = set(eval_steps(train, steps, units_per_step, spec.eval_at))
    rungs = at_steps(spec.eval_at, steps, units_per_step)  # a scheduler may pause a trial there
    cooled = cooldown_points(train, evals, rungs, steps)
    eval_batch = trainer_task(model_config).eval_batch(micro)
    checkpoint_dir, callback = spec.checkpoint_dir, reporter

    torch.manual_seed(train.seed)
    model = build_model(model_config)
    if analysed:
        analysis.check(model)
    groups = configure(model, model_config, train)
    model.to(dev)
    if sharded:
        groups = fully_shard_model(model, groups, per_step)
    params_measured = sum(p.numel() for p in model.parameters() if p.requires_grad)  # sharded: whole
    optimizer = adamw(groups, train, fused=cuda)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, steps, train, units_per_step))
    params = [p for g in groups for p in g["params"]]
    forward = data_parallel(model, per_step, dev) if world > 1 and not sharded else model
    decision = decide(model_config, train, dev.type, steps * units_per_step, _peak_flops(dev))
    compiling = not sharded and decision.compile
    stepper = _compiled(model, forward, train, decision.blocks_per_region) if compiling else forward
    dtype = autocast_dtype(train, dev)

    def autocast():
        return torch.autocast(dev.type, dtype=dtype) if dtype else contextlib.nullcontext()

    def evaluated() -> dict[str, float]:
        """The held-out metrics, with the compiled regions run eagerly (see `compiled`)."""
        with _eager(compiling):
            return evaluate(forward, task, eval_batch, dev, autocast)

    def optimizer_step(x, y) -> torch.Tensor:
        """One step's gradient, clipped and applied (the main run's and a cooldown branch's)."""
        loss = _backward(stepper, x, y, micro, dev, autocast, train.z_loss)
        if train.grad_clip > 0:  # no sync: a non-finite norm is caught with the loss
            torch.nn.utils.clip_grad_norm_(params, train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    identity = {"config_key": config_key(model_config), "family": model_config.family,
                "train": train.model_dump(mode="json"), "data_hash": data_hash}
    start, curve, prior_elapsed, train_time = 0, [], 0.0, 0.0
    state = from_rank0(checkpoint.load(checkpoint_dir, identity, reread={"train": _recipe_today}),
                       world)
    if state is not None:
        load_full_state(model, optimizer, state, sharded)
        scheduler.load_state_dict(state["scheduler"])
        checkpoint.set_rng_state(state["rng"])
        start, curve = state["step"], state["curve"]
        prior_elapsed, train_time = state["elapsed_s"], state["train_time_s"]
    tail = LossTail(steps, train.loss_tail_steps, state and state.get("loss_tail"))

    t0 = saved_at = time.perf_counter()
    reporting = 0.0  # time in `callback`: a sweep's trial waits there on the driver (trackers)
    losses, stopped = [], False  # this interval's per-step losses, on the device
    model.train()
    with _progress(spec.progress) as bar:
        bar_task = bar.add_task("", total=steps, completed=start) if bar else None
        t_interval = time.perf_counter()
        batches = shard_batches(task.train_batch, rank, world)
        brancher = cooldown.Brancher(
            train, steps, model, optimizer, scheduler.base_lrs, optimizer_step,
            lambda step: batches(step, per_step),
            evaluated,
            lambda step: lr_multiplier(step, steps, train, units_per_step))
        for step, x, y in prefetched(batches, range(start, steps), per_step, dev):
            lr_now = train.lr * lr_multiplier(step, steps, train, units_per_step)
            losses.append(optimizer_step(x, y))
            scheduler.step()
            done = step + 1
            if bar:
                bar.update(bar_task, completed=done)
            if done not in evals:
                continue
            losses = over_ranks(losses, world)
            train_loss = _interval_loss(losses, done, steps, train.lr)  # waits for the device
            tail.add(losses, done)
            train_time += time.perf_counter() - t_interval
            losses = []
            metrics = {"step": done, "tokens": done * units_per_step, "train_loss": train_loss,
                       **evaluated(), "lr": lr_now,
                       "elapsed_s": prior_elapsed + time.perf_counter() - t0 - reporting}
            if cooled:
                if done in cooled:
                    metrics.update(brancher.cooled(done, metrics))
                metrics["cooldown_tokens"] = cooldown_tokens(train, cooled, done, steps,
                                                             units_per_step)
            curve.append(metrics)
            due = checkpoint_dir is not None and agreed(
                done in rungs or time.perf_counter() - saved_at >= spec.checkpoint_every_s, world, dev)
            if due:
                weights, moments = full_state(model, optimizer, sharded)  # collective if sharded
                saved_at = time.perf_counter()
            if due and rank == 0:
                checkpoint.save(checkpoint_dir, weights, model_config, train, {
                    "identity": identity,
                    "optimizer": moments, "scheduler": scheduler.state_dict(),
                    "rng": checkpoint.rng_state(), "step": done, "curve": curve, "loss_tail": tail.values,
                    "elapsed_s": metrics["elapsed_s"], "train_time_s": train_time})
            if bar:
                bar.update(bar_task, description=f"loss {metrics['train_loss']:.4f} "
                                                 f"val {metrics['val_loss']:.4f}")
            if callback is not None:
                called = time.perf_counter()
                try:
                    callback(dict(metrics))
                except StopTrial:
                    stopped = True
                    break
                finally:
                    reporting += time.perf_counter() - called
            t_interval = time.perf_counter()
    if spec.save_dir is not None:
        weights = full_state(model, None, sharded)[0]
    if spec.save_dir is not None and rank == 0:
        checkpoint.save_model(spec.save_dir, weights, model_config, train)
    with _eager(compiling):
        layers = (analysis.analyse(model, *analysis.sequences(task.val_x, task.val_y, model),
                                   autocast) if analysed and not stopped else [])
    result = _result(curve, prior_elapsed + time.perf_counter() - t0 - reporting, train_time,
                     params_measured, data_hash, stopped, trainer_task(model_config).perplexity)
    result.layers, result.train_loss_tail = layers, tail.mean()
    result.autocast_dtype = str(dtype).removeprefix("torch.") if dtype else "none"
    for name, value in machine.describe(dev).items():
        setattr(result, name, value)
    if compiling:
        for name, value in stepper.report().items():
            setattr(result, name, value)
    return result


def _recipe_today(saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved recipe as this version dumps it: a key added since, at its
    default, leaves an interrupted trial resumable."""
    return TrainConfig(**saved).model_dump(mode="json")


def _compiled(model: torch.nn.Module, forward, train: TrainConfig, blocks_per_region: int):
    """The training step with `model`'s blocks and readout compiled in place, up to
    `blocks_per_region` alike blocks a region (`shapesweep.trainers.compiled`); `forward` is
    the model or its DDP wrapper."""
    from shapesweep.trainers.compiled import CompiledStep

    return CompiledStep(model, forward, train.compile_mode, blocks_per_region)


def _eager(compiling: bool):
    """Run compiled regions eagerly inside this context (evaluation, analysis)."""
    if not compiling:
        return contextlib.nullcontext()
    from shapesweep.trainers.compiled import eager

    return eager()


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
