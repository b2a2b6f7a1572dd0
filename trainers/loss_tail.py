"""The xformer paper's reported loss: the training loss averaged over a run's last steps.

The ><former paper reports "the training loss ..., averaged over the final 1,000 steps (with a
10-step increment)"; it never repeats data, so this is held-out loss in expectation (here the
training windows are drawn at random from the training split, so that holds only while a run
sees a small part of it). `LossTail` keeps the sampled steps' losses, the steps
`steps, steps - 10, ...` within the last `window` (capped at the run), as the loop reads them
at each evaluation; they go into the loop's checkpoint so a resumed run counts every one.
"""

from __future__ import annotations

import torch

EVERY = 10  # steps between two sampled losses (xformer's "10-step increment")


class LossTail:
    """The sampled training losses of the last `window` steps of a run of `steps` steps."""

    def __init__(self, steps: int, window: int, values: list[float] | None = None):
        self.steps, self.span = steps, min(window, steps)
        self.values: list[float] = list(values or [])

    def sampled(self, done: int) -> bool:
        """Whether step `done` (1-based) is one of the tail's samples."""
        return done > self.steps - self.span and (self.steps - done) % EVERY == 0

    def add(self, losses: list[torch.Tensor], last: int) -> None:
        """Keep the sampled ones of an interval's per-step (objective, reported) losses, the
        last of them at step `last` (read from the device: the loop has just waited on it)."""
        first = last - len(losses) + 1
        picked = [pair[1] for done, pair in enumerate(losses, first) if self.sampled(done)]
        if picked:
            self.values += torch.stack(picked).double().tolist()

    def mean(self) -> float | None:
        """The mean sampled loss once every sample is in (None for a run stopped before its end
        or resumed from a checkpoint that did not keep them)."""
        if len(self.values) != (self.span - 1) // EVERY + 1:
            return None
        return sum(self.values) / len(self.values)
