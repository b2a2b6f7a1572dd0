"""What the loop does differently in a data-parallel group of N > 1 processes (Ray Train's
workers, or any torch.distributed group): the model under DDP or sharded with FSDP2 as
torchtitan shards it, each rank's slice of every step's batch, the losses averaged over the
ranks, rank 0's decisions and checkpoint taken by all, and whole state dicts in the
one-process format whichever way the model was split. In a group of one each is the
one-process identity.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from shapesweep.trainers.models import blocks_of
from shapesweep.trainers.moe import MoEFFN
from shapesweep.trainers.parallel import check_split


def process_group() -> tuple[int, int]:
    """(rank, world size) of this process's data-parallel group; (0, 1) when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def data_parallel(model: torch.nn.Module, per_step: int, dev) -> torch.nn.Module:
    """`model` under DDP: each rank trains its slice of every step's batch and the gradients
    are averaged, so the step is the one-process step."""
    from torch.nn.parallel import DistributedDataParallel


    check_split(per_step, process_group()[1])
    wrapped = DistributedDataParallel(
        model, device_ids=[dev.index] if dev.type == "cuda" else None, broadcast_buffers=False,
        # routed experts a step's tokens never reach get no gradient
        find_unused_parameters=any(isinstance(m, MoEFFN) for m in model.modules()))
    return wrapped


def fully_shard_model(model: torch.nn.Module, groups: list[dict], per_step: int) -> list[dict]:
    """Shard `model` in place with FSDP2 as torchtitan does: each block its own unit (its
    parameters gathered only while it runs; the last one stays gathered for the backward that
    follows), then the root, which holds the embedding, final norm and head, so a tied
    embedding and readout are one parameter in one unit. Sharding replaces the parameters
    with DTensors, so `groups` (the optimizer's) come back holding the new ones, by name.
    Gradients are averaged over the ranks, as DDP's are."""
    from torch.distributed.fsdp import fully_shard

    check_split(per_step, process_group()[1])
    names = {p: name for name, p in model.named_parameters()}
    blocks = list(blocks_of(model))
    for i, block in enumerate(blocks):
        fully_shard(block, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model)
    sharded = dict(model.named_parameters())
    return [g | {"params": [sharded[names[p]] for p in g["params"]]} for g in groups]


def full_state(model: torch.nn.Module, optimizer, sharded: bool) -> tuple[dict, dict | None]:
    """The model's and (given one) the optimizer's whole state dicts, in the one-process
    format (optimizer state by parameter index), so a checkpoint reads the same whatever
    wrote it. Sharded: gathered to CPU on rank 0 (the others get empty dicts); a collective,
    so every rank calls it."""
    if not sharded:
        return model.state_dict(), optimizer and optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    if optimizer is None:
        return weights, None
    by_name = get_optimizer_state_dict(model, optimizer, options=options)
    return weights, by_name and _renamed(by_name, _parameter_names(model, optimizer), to_names=False)


def load_full_state(model: torch.nn.Module, optimizer, state: dict, sharded: bool) -> None:
    """Load a checkpoint's whole state dicts (`full_state`'s) into the model and optimizer;
    sharded: each rank keeps its shard of them."""
    if not sharded:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, state["model"], options=options)
    by_name = _renamed(state["optimizer"], _parameter_names(model, optimizer), to_names=True)
    set_optimizer_state_dict(model, optimizer, by_name, options=options)


def _parameter_names(model: torch.nn.Module, optimizer) -> list[str]:
    """The optimizer's parameters' names, in the order its state dict numbers them."""
    names = {p: name for name, p in model.named_parameters()}
    return [names[p] for g in optimizer.param_groups for p in g["params"]]


def _renamed(state: dict, names: list[str], to_names: bool) -> dict:
    """An optimizer state dict keyed by parameter index (torch's own format) as one keyed by
    parameter name (torch.distributed.checkpoint's), or back."""
    key = dict(enumerate(names)) if to_names else {name: i for i, name in enumerate(names)}
    return {"state": {key[k]: v for k, v in state["state"].items()},
            "param_groups": [g | {"params": [key[k] for k in g["params"]]}
                             for g in state["param_groups"]]}


def shard_batches(train_batch: Callable, rank: int, world: int) -> Callable:
    """`train_batch` giving this rank its contiguous slice of each (seed, step) batch."""
    if world == 1:
        return train_batch

    def batch(step: int, n: int):
        return tuple(t.tensor_split(world)[rank] for t in train_batch(step, n))

    return batch


def over_ranks(losses: list[torch.Tensor], world: int) -> list[torch.Tensor]:
    """The interval's per-step losses averaged over the ranks (one collective per evaluation)."""
    if world == 1:
        return losses
    stacked = torch.stack(losses)
    dist.all_reduce(stacked)
    return list(stacked / world)


def agreed(decision: bool, world: int, device: torch.device) -> bool:
    """Rank 0's `decision`, on every rank: each rank's clock says when to checkpoint, and
    saving a sharded model is collective, so all must take the same one."""
    if world == 1:
        return decision
    flag = torch.tensor([float(decision)], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def from_rank0(state: dict | None, world: int) -> dict | None:
    """Rank 0's checkpoint state on every rank: each rank has its own checkpoint folder
    (a Ray Train worker's), and rank 0 alone writes into its own, so after an out-of-memory
    retry only rank 0's holds the step the run resumes from; the ranks must resume alike."""
    if world == 1:
        return state
    box = [state]
    dist.broadcast_object_list(box, src=0)
    return box[0]
