"""torch.compile of one trial's training step, region by region, and an honest account of it.

Regional compilation (torchtitan's, and torch's "regional compilation" recipe): each block of
the model is compiled in place (`Module.compile`), and so is the readout with its loss
(`model.objective`, `shapesweep.trainers.objective`); the embedding and the glue between
blocks stay eager. Blocks of one shape run the same code under the same guards, so dynamo
traces and Inductor compiles one block per distinct shape, not every copy: a 12-layer
hourglass of k 8 costs one block's compile, a ><former one per distinct layer width. Whole-
model compilation traced every block into one graph (issue 36: 87 s more than eager for that
hourglass on 2 CPU cores, against 24.5 s for a 2-layer model). Between the two,
`train.compile_blocks_per_region` compiles up to that many consecutive alike blocks as one
region (`Region`): each compiled call a step costs dynamo's guards and AOTAutograd's wrappers,
so fewer, longer regions run faster and compile longer (docs/benchmarks.md).

Evaluation, cooldown branches' evaluations and the end-of-trial analysis run the same modules
eagerly (`eager()`): under `no_grad` each region would be another graph per shape, a compile
that costs more than it saves on <1% of a trial's FLOPs.

A warm worker (a Ray actor that trains trial after trial) must not carry one trial's graphs
into the next: dynamo caches graphs on code objects (`Block.forward`, the same for every
shape), so each new shape is a recompile of that code, and past
`torch._dynamo.config.recompile_limit` of them dynamo would run it eagerly for the rest of
the process. Each trial therefore starts from `torch._dynamo.reset()`, which drops the
in-memory caches only: Inductor's on-disk cache (`compile_cache`) still serves a shape seen
before. The limit is raised to what one trial can need (two graphs per region: the last
micro-batch of a step may be smaller), and hitting it raises instead of falling back in
silence (`fail_on_recompile_limit_hit`).

What is reported, as differences over the trial (`torch._dynamo.utils.counters` and
`compilation_time_metrics`), so anything compiled earlier in the process does not count:
- `compiled`: dynamo compiled at least one graph;
- `graph_breaks`: the breaks it met while tracing (under DDP they include DDP's own forward
  wrapper, which dynamo leaves out of the graph by design);
- `recompiles`: graphs compiled after the first micro-batch's forward: a guard failed (a new
  input shape, dtype or grad mode) and a region was traced again. A last micro-batch
  smaller than the others is one per region, in the first step;
- `compile_s`: seconds spent compiling (dynamo's trace and Inductor's forward compile, plus
  the backward graphs AOTAutograd compiles at their first use);
- `blocks_per_region`: the most alike blocks one compiled region held.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, cast

import torch
from torch._dynamo.utils import compilation_time_metrics, counters

from shapesweep.trainers.compile_policy import layer_signatures, runs
from shapesweep.trainers.data import cache_dir
from shapesweep.trainers.lm import LM, LMBlock, Stage

Mode = Literal["default", "reduce-overhead"]
# dynamo's timers of the forward compile (trace + Inductor) and of each lazily compiled backward
_COMPILE_TIMERS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")


def compile_cache() -> str:
    """Point Inductor's cache (Triton's follows it) at one folder under `cache_dir()` shared by
    every trial of every sweep on this machine, so a repeated shape reuses compiled kernels
    instead of compiling again. An explicit TORCHINDUCTOR_CACHE_DIR wins."""

    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))


def regions(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks compiled one by one: each entry of the model's `blocks`."""
    return list(getattr(model, "blocks", []))


class Region(Stage):
    """Consecutive blocks of one shape run as one compiled region (`blocks_per_region` > 1).

    Held by the model outside its module tree (`model.stages`, a plain list), so parameters,
    state dicts and checkpoints are the blocks' as before. Regions of the same length and
    shape share one graph (their parameters are its inputs), as single blocks do."""

    def __init__(self, blocks: list[LMBlock]):
        super().__init__()
        self.members = torch.nn.ModuleList(blocks)
        self.width = blocks[0].width

    def forward(self, stream: torch.Tensor) -> torch.Tensor:
        for block in self.members:
            stream = block(stream)
        return stream


class _Readout(Protocol):
    """A model's readout with its loss, which `compile_by_block` compiles in place: (outputs of
    the last block, targets, z_loss) -> (objective, reported loss)."""

    objective: Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


def compile_by_block(model: torch.nn.Module, blocks_per_region: int = 1, **options) -> int:
    """Compile each of `model`'s blocks in place (`torch.compile` `options`), and its readout
    with the loss (`model.objective`), under the recompile limit the module docstring states.
    The limit is set here, not by the loop alone, so every caller compiles every distinct
    block: at dynamo's default (8) a ><former of more distinct layer widths ran the rest
    eagerly, in silence (bench_compile's regional figure for one, before).

    `blocks_per_region` > 1, on a model that runs `stages` (the LM): consecutive blocks of one
    shape are compiled together, up to that many (`runs`): fewer compiled calls a step (each
    costs dynamo's guards and AOTAutograd's wrappers) and fusion across their boundaries, for
    a compile that grows with the region's length (docs/benchmarks.md). Returns the most
    blocks a region holds (1 for a model without `stages`, whatever was asked)."""
    blocks, longest = regions(model), 1
    config = torch._dynamo.config
    config.fail_on_recompile_limit_hit = True
    config.recompile_limit = max(8, 2 * len(blocks) + 2)
    if blocks_per_region > 1 and isinstance(model, LM):  # the model that runs `stages`
        chunks = runs(layer_signatures(model.config), blocks_per_region)
        stages: list[tuple[int, Stage]] = [(chunk.start, Region([model.blocks[i] for i in chunk]))
                                           for chunk in chunks]
        model.stages = stages
        blocks = [region for _, region in stages]
        longest = max(len(chunk) for chunk in chunks)
    for block in blocks:
        block.compile(**options)
    readout = cast(_Readout, model)  # every family's model has `objective` (LM, VisionMLP)
    readout.objective = torch.compile(readout.objective, **options)
    return longest


def eager():
    """Run compiled regions eagerly inside this context (evaluation, analysis)."""
    return torch.compiler.set_stance("force_eager")


@dataclass(frozen=True)
class _Counts:
    graphs: int
    breaks: int
    seconds: float

    @classmethod
    def now(cls) -> _Counts:
        return cls(counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()),
                   sum(sum(compilation_time_metrics.get(t, ())) for t in _COMPILE_TIMERS))


class CompiledStep:
    """`forward(x, targets, z_loss)` of one trial with `model`'s regions compiled in place.

    `forward` is `model` or its DDP wrapper. `mode` is torch.compile's: `reduce-overhead`
    captures each region's kernels in a CUDA graph (launch-bound small shapes on a GPU). Each
    call (a micro-batch) then starts a new step of the CUDA-graph trees: the loop has read what
    it keeps of the previous one (its losses are copies), and without the mark the trees see
    the regions' graphs as one step with "pending, uninvoked backwards" and leave the fast path.
    """

    def __init__(self, model: torch.nn.Module, forward, mode: Mode = "default",
                 blocks_per_region: int = 1):
        compile_cache()
        torch._dynamo.reset()  # this trial's graphs only: see the module docstring
        self.blocks_per_region = compile_by_block(model, blocks_per_region, dynamic=False,
                                                  mode=None if mode == "default" else mode)
        self.forward = forward
        self._graphs = mode == "reduce-overhead"
        self._start = _Counts.now()
        self._after_first: _Counts | None = None

    def __call__(self, x: torch.Tensor, targets: torch.Tensor, z_loss: float):
        if self._graphs:  # the last micro-batch's backward is done: its graphs' outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        out = self.forward(x, targets, z_loss)
        if self._after_first is None:
            self._after_first = _Counts.now()
        return out

    def report(self) -> dict[str, bool | int | float]:
        """{compiled, graph_breaks, recompiles, compile_s, blocks_per_region} of this trial so
        far."""
        end, first = _Counts.now(), self._after_first or self._start
        return {"compiled": end.graphs > self._start.graphs,
                "graph_breaks": end.breaks - self._start.breaks,
                "recompiles": end.graphs - first.graphs,
                "compile_s": round(end.seconds - self._start.seconds, 3),
                "blocks_per_region": self.blocks_per_region}
