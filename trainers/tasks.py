"""The torch side of each `shapesweep.families.task.Task`: its data, its evaluation batch and
its metrics, as the training loop asks for them (`shapesweep.trainers.loop`).

`made(config, recipe, data, tokenizer)` loads (and checks) the data a family's config trains
on and returns `Made`: the batch source, the items per optimizer step, the tokens (images) per
step and the data hash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch
from pydantic import BaseModel

from shapesweep.common import UserError
from shapesweep.trainers import data as lm_data
from shapesweep.trainers import vision_data
from shapesweep.trainers.parallel import sequences_per_step
from shapesweep.trainers.recipe import TrainConfig

EVAL_IMAGES_PER_BATCH = 1024


class Batches(Protocol):
    """What the loop reads of a task's data: fixed held-out examples, a batch per step."""

    val_x: torch.Tensor
    val_y: torch.Tensor

    def train_batch(self, step: int, n: int) -> tuple[torch.Tensor, torch.Tensor]: ...


class Made(NamedTuple):
    """A task's data for one trial."""

    task: Batches
    per_step: int  # sequences (images) per optimizer step
    units_per_step: int  # tokens (images) per optimizer step
    data_hash: str


def _language(config: BaseModel, train: TrainConfig, data: str | None,
              tokenizer: str | None) -> Made:
    tokens = lm_data.load_lm_data(data, tokenizer)
    lm_data.check_fits(tokens, config.vocab_size, train.seq_len)  # type: ignore[attr-defined]
    n_seq = sequences_per_step(train)
    task = lm_data.LMTask(tokens, train.seq_len, train.seed, train.eval_tokens)
    return Made(task, n_seq, n_seq * train.seq_len, tokens.data_hash)


def _images(config: BaseModel, train: TrainConfig, data: str | None,
            tokenizer: str | None) -> Made:
    images = vision_data.load_images(data)
    kind: str = config.task  # type: ignore[attr-defined]
    task = vision_data.VisionTask(images, kind, train.noise_std, train.seed, train.eval_tokens)
    for key, need in (("d_x", task.d_x), ("d_out", task.d_out)):
        got = getattr(config, key)
        if need != got:
            raise UserError(f"the {kind} task on this data needs {key}={need}, the config has "
                            f"{key}={got}", file=images.source, key=key)
    n_images = min(train.batch_size, len(images.train))
    return Made(task, n_images, n_images, images.data_hash)


@dataclass(frozen=True)
class TrainerTask:
    """How the loop trains and evaluates one kind of task."""

    load: Callable[[BaseModel, TrainConfig, str | None, str | None], Made]
    eval_images: int | None  # examples per evaluation forward; None: the micro-batch
    perplexity: bool  # the result carries val_ppl (exp of the validation loss)

    def made(self, config: BaseModel, train: TrainConfig, data: str | None,
             tokenizer: str | None) -> Made:
        return self.load(config, train, data, tokenizer)

    def eval_batch(self, micro: int) -> int:
        return self.eval_images or micro


LANGUAGE = TrainerTask(load=_language, eval_images=None, perplexity=True)
IMAGES = TrainerTask(load=_images, eval_images=EVAL_IMAGES_PER_BATCH, perplexity=False)
