"""What a family's models learn from: a language model's token sequences or images. A family
declares its task (`FamilySpec.task`); everything outside the trainer reads what it needs from
it (how a step's batch is counted, which recipe keys it never reads, whether its examples are
token sequences), so no part of shapesweep asks "is this a language model?" of a family.

The torch side (the data, the evaluation batch, the metrics) is `trainer`, named as
"module:attribute" and imported only when a model trains (`shapesweep.trainers.tasks`), so
planning never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Task:
    """One kind of training task, as its families share it."""

    name: str  # what a message calls it
    # Its examples are token sequences: a vocabulary, seq_len, embeddings, attention layers
    # (`layer_shapes()`), validation perplexity; else they are vectors (images).
    reads_tokens: bool
    batch_key: Literal["batch_tokens", "batch_size"]  # the recipe's field counting a step's batch
    unread_train_keys: tuple[str, ...]  # recipe keys no model of this task reads
    trainer: str  # "module:attribute": its data, evaluation batch and metrics (torch)


LANGUAGE = Task(name="language model", reads_tokens=True, batch_key="batch_tokens",
                unread_train_keys=("batch_size", "noise_std"),  # images per step, denoising
                trainer="shapesweep.trainers.tasks:LANGUAGE")
IMAGES = Task(name="image task (hourglass-mlp's denoising, super-resolution, classes)",
              reads_tokens=False, batch_key="batch_size", unread_train_keys=(),
              trainer="shapesweep.trainers.tasks:IMAGES")
