"""torch.compile of one trial's training forward, and an honest account of what it did.

A warm worker (a Ray actor that trains trial after trial) must not carry one trial's graphs
into the next: dynamo caches compiled graphs on the model's code objects (`LM.forward`, the
same for every shape), so each new shape is a recompile of the same function, and after
`torch._dynamo.config.recompile_limit` of them (8) dynamo silently runs that function eagerly
for the rest of the process. Each trial therefore starts from `torch._dynamo.reset()`, which
drops the in-memory caches only: Inductor's on-disk cache (`compile_cache`) still serves a
shape seen before without compiling it again. Within a trial, hitting the limit raises
(`fail_on_recompile_limit_hit`) instead of falling back to eager in silence.

What is reported, from `torch._dynamo.utils.counters` (differences over the trial, so
anything compiled earlier in the process does not count):
- `compiled`: dynamo compiled at least one graph (`counters["stats"]["unique_graphs"]`);
- `graph_breaks`: the breaks it met while tracing (`counters["graph_break"]`). Under DDP
  they include DDP's own forward wrapper, which dynamo leaves out of the graph by design;
- `recompiles`: graphs compiled after the forward's first call: a guard failed (a new
  input shape, dtype or grad mode) and the function was traced again. A last micro-batch
  smaller than the others is one, in the first step.

Evaluation calls the model eagerly (the loop's choice): under `no_grad` its forward would be
a second graph per shape, a compile that costs more than it saves on <1% of a trial's FLOPs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch._dynamo.utils import counters


def compile_cache() -> str:
    """Point Inductor's cache (Triton's follows it) at one folder under `cache_dir()` shared by
    every trial of every sweep on this machine, so a repeated shape reuses compiled kernels
    instead of compiling again. An explicit TORCHINDUCTOR_CACHE_DIR wins."""
    from shapesweep.trainers.data import cache_dir

    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))


@dataclass(frozen=True)
class _Counts:
    graphs: int
    breaks: int

    @classmethod
    def now(cls) -> _Counts:
        return cls(counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()))


class CompiledForward:
    """`module` under torch.compile for one trial's training steps, counting what dynamo did."""

    def __init__(self, module: torch.nn.Module):
        compile_cache()
        torch._dynamo.reset()  # this trial's graphs only: see the module docstring
        # A mixture of experts' per-expert token counts (`load.tolist()`) become symbolic
        # sizes in the graph instead of breaking it. Process-wide: a trial owns its process.
        torch._dynamo.config.capture_scalar_outputs = True
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        self.module = torch.compile(module)
        if hasattr(module, "aux_loss"):  # `_backward` reads it (a mixture of experts)
            self.aux_loss = module.aux_loss
        self._start = _Counts.now()
        self._after_first: _Counts | None = None

    def __call__(self, *args):
        out = self.module(*args)
        if self._after_first is None:
            self._after_first = _Counts.now()
        return out

    def report(self) -> dict[str, bool | int]:
        """{compiled, graph_breaks, recompiles} of this trial so far."""
        end, first = _Counts.now(), self._after_first or self._start
        return {"compiled": end.graphs > self._start.graphs,
                "graph_breaks": end.breaks - self._start.breaks,
                "recompiles": end.graphs - first.graphs}
