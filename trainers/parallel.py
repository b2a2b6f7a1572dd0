"""What data-parallel training asks of a run, checked before any worker starts.

Torch-free, so the sweep driver refuses a space that cannot be trained this way before the
sweep begins, and `train --workers` before Ray starts; the loop asks again on each rank.
"""

from __future__ import annotations

from shapesweep.common import UserError
from shapesweep.families.base import of
from shapesweep.trainers.recipe import TrainConfig


def check_shardable(model_config) -> None:
    """Refuse to shard a mixture of experts: FSDP2 reduces only the gradients a rank has, and
    a rank whose tokens skip an expert has none for it, so the ranks' collectives would differ."""
    shapes = model_config.layer_shapes() if of(model_config).task.reads_tokens else []
    if any(int(s.n_experts) > 1 for s in shapes):
        raise UserError("fsdp cannot shard a mixture of experts (a worker's tokens may skip an "
                        "expert); use --parallel ddp", key="--parallel")


def check_compilable(train: TrainConfig, flag: str = "--parallel") -> None:
    """Refuse `compile: true` for an FSDP2-sharded model: FSDP2's hooks would be traced into
    the blocks compiled in place (`shapesweep.trainers.compiled`). `auto` runs such a model
    eagerly."""
    if train.compile is True:
        raise UserError("fsdp cannot run a recipe with compile: true (a sharded model's hooks "
                        "stay out of torch.compile's graph); use --parallel ddp, or compile: "
                        "false", key=flag)


def check_split(per_step: int, world: int, flag: str = "--workers-per-trial") -> None:
    """Each rank trains an equal slice of every step's batch, so the step is the one-process
    step: refuse a batch that does not split evenly over the ranks."""
    if per_step % world:
        raise UserError(f"a step's batch of {per_step} does not split evenly over {world} "
                        "workers", key=flag)


def sequences_per_step(train: TrainConfig) -> int:
    """An LM's optimizer step: whole sequences of batch_tokens (at least one)."""
    return max(1, train.batch_tokens // train.seq_len)
