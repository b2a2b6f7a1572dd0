"""One trial, whole: the model config, the recipe and the trainer's options, in one frozen
object built once (by `shapesweep train` from its flags, by the sweep from its options and a
trial's candidate document) and handed to every path that trains: one process, a Ray Tune
trial, each Ray Train worker of a data-parallel trial, a benchmark.

`shapesweep.trainers.fitting.train(spec, reporter)` trains it (with the out-of-memory retry);
`shapesweep.trainers.loop.run(spec, reporter)` is one attempt. What changes between attempts
or between workers is a field of a replaced spec (`dataclasses.replace`): the micro-batch an
out-of-memory retry imposes, each worker's device and checkpoint folder; never state beside
the spec.

The recipe (`TrainConfig`) is the trial's identity (a checkpoint is resumed only under the
same recipe); the options are how and where it runs, so a retry at a smaller micro-batch
still resumes its checkpoint. `compile` stays in the recipe, where spaces and candidate files
set it. `TrainConfig` is the trainer's (`shapesweep.trainers.recipe`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypedDict

from pydantic import BaseModel

from shapesweep.trainers.recipe import TrainConfig

Parallel = Literal["ddp", "fsdp"]
Reporter = Callable[[dict[str, Any]], None]  # hears each evaluation's metrics; may raise StopTrial


@dataclass(frozen=True)
class TrialSpec:
    """What one training run is: `model` (a family's config) trained under `recipe`, and how.

    device: cpu, cuda, cuda:1; None: cuda if available.
    data, tokenizer: the data (`shapesweep.trainers.data`, `vision_data`); None: built in.
    parallel: in a process group of N > 1, "ddp" replicates the model on every rank, "fsdp"
        shards its parameters, gradients and optimizer state.
    memory_share: the fraction of a CUDA device this process may use (a sweep trial's GPUs).
    micro_batch: sequences (images) per forward whatever the recipe says (an out-of-memory
        retry's); None: the recipe's, or what fits (`memory.chosen`).
    checkpoint_dir: checkpoint into it, and resume from it if it holds one.
    checkpoint_every_s: an evaluation saves a checkpoint once this many seconds have passed
        since the last one (0: every evaluation).
    save_dir: where to write the trained model (`checkpoint.save_model`).
    eval_at: token counts to evaluate at besides the recipe's cadence (a scheduler's rungs).
    progress: draw a progress bar on stderr.
    """

    model: BaseModel
    recipe: TrainConfig
    device: str | None = None
    data: str | None = None
    tokenizer: str | None = None
    parallel: Parallel = "ddp"
    memory_share: float | None = None
    micro_batch: int | None = None
    checkpoint_dir: str | None = None
    checkpoint_every_s: float = 0.0
    save_dir: str | None = None
    eval_at: tuple[float, ...] = ()
    progress: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_at", tuple(self.eval_at))  # a list given: still frozen

    def at_micro_batch(self, micro_batch: int) -> TrialSpec:
        """This trial at `micro_batch` sequences (images) per forward (an OOM retry's)."""
        return replace(self, micro_batch=micro_batch)

    def on(self, device: str, checkpoint_dir: str | None) -> TrialSpec:
        """This trial on one process of its own (a Ray Tune trial, a Ray Train worker): the
        device it was given and the checkpoint folder it uses."""
        return replace(self, device=device, checkpoint_dir=checkpoint_dir)


@dataclass(frozen=True)
class TrainerOptions:
    """A sweep's trainer options, the same for each of its trials (`sweep.driver.trainable.run_trial`):
    the spec's fields that come from the sweep's flags, not from a trial's candidate document."""

    parallel: Parallel = "ddp"
    eval_at: tuple[float, ...] = ()
    checkpoint_every_s: float = 0.0

    def trial(self, model: BaseModel, recipe: TrainConfig, data: str | None = None,
              device: str | None = None, memory_share: float | None = None) -> TrialSpec:
        """The spec of one of the sweep's trials (its checkpoint folder: the process's own)."""
        return TrialSpec(model, recipe, device=device, data=data, parallel=self.parallel,
                         memory_share=memory_share, checkpoint_every_s=self.checkpoint_every_s,
                         eval_at=tuple(self.eval_at))


class Options(TypedDict, total=False):
    """`TrialSpec`'s fields beside the model and the recipe, as keywords (`loop.train`)."""

    device: str | None
    data: str | None
    tokenizer: str | None
    parallel: Parallel
    memory_share: float | None
    micro_batch: int | None
    checkpoint_dir: str | None
    checkpoint_every_s: float
    save_dir: str | None
    eval_at: tuple[float, ...]
    progress: bool
