"""How much memory training a candidate takes, and the micro-batch that fits: one model, asked
before torch allocates anything (planning never imports torch's allocator).

The peak of a training step, in bytes, is the sum of four terms (`Estimate`):

- states: fp32 weights, gradients and AdamW's two moments, 16 bytes per trained parameter
  (4 per frozen one), split over FSDP shards;
- weight copies: autocast's bf16 copy of every matmul weight, held from the forward until
  its backward (2 bytes per matmul parameter; none without autocast);
- activations: what one micro-batch's forward keeps for the backward, per token and per
  layer, from each block's structure (`_layer_bytes`): the attention's q/k/v and output,
  the norms' inputs and outputs, the FFN's inner widths (an hourglass block keeps its k
  sub-blocks', a ><former layer its own widths, a mixture of experts each routed copy);
  eager keeps every intermediate autograd saves, torch.compile (Inductor) recomputes the
  pointwise ones and keeps about half as much;
- logits: the vocabulary-wide tensors the loss holds at its peak (`logit_bytes`), the one
  term that depends on where the loss runs (`LOSS_IN_GRAPH`).

The held-out evaluation (`loop.evaluate`, no gradients) is a second peak beside the step's:
the states and one micro-batch's logits in the autocast dtype, upcast to fp32 for the loss
`EVAL_CHUNK_TOKENS` at a time (`evaluation`). Without the chunks, the 113M baseline's
evaluation at 16 x 2048 held 31 GiB of logits (bf16, their fp32 copy and log-softmax's
output), more than its training step (packed on an H200, docs/memory.md); `total` is the
larger of the two peaks.

On CPU the eager terms are checked against the peak of live tensor bytes torch's profiler
records (`profile_memory=True`: `measured_peak`), across families and micro-batches
(tests/test_memory.py, docs/memory.md); on CUDA, `shapesweep.trainers.fitting.compare`
sets the prediction beside `torch.cuda.max_memory_allocated` for any candidate.
"""

from __future__ import annotations

import gc
import os
from dataclasses import asdict, dataclass

from shapesweep.common import UserError
from shapesweep.families.base import of
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.cadence import token_budget
from shapesweep.search_spaces.configs import config_key
from shapesweep.trainers.compile_policy import decide
from shapesweep.trainers.recipe import TrainConfig

FP32, BF16 = 4, 2
ADAM_STATES = 16  # per trained parameter: fp32 weight, gradient, exp_avg and exp_avg_sq
# Where the loss runs. True: the model's readout+loss computes cross-entropy and z-loss from
# one logsumexp inside the compiled region (issue 36, `shapesweep.trainers.objective`), the
# path of this tree. False: the loss the loop took outside the graph before it, kept to set
# the model beside the GPU peaks of issue 37, which were measured on that path.
LOSS_IN_GRAPH = True
# The evaluation upcasts its logits to fp32 for the loss this many tokens (whole sequences,
# at least one) at a time: `loop._example_losses`.
EVAL_CHUNK_TOKENS = 4096
# The share of a device a trial plans to use: the rest is for the caching allocator's
# fragmentation, cuBLAS/cuDNN workspaces and the model's error (on the H200, within -0.1% to
# +8.5% of every measured step; at 0.85 with the older logits term a packed trial ran out of
# memory: docs/memory.md).
MARGIN = 0.80


@dataclass(frozen=True)
class Estimate:
    """The predicted peak of one training step, by term (bytes), at `micro_batch` sequences
    (images) per forward."""

    states: int
    weight_copies: int
    activations: int
    logits: int
    micro_batch: int
    evaluation: int = 0  # the held-out evaluation's logits beyond the states, no gradients

    @property
    def step(self) -> int:
        """The training step's peak."""
        return self.states + self.weight_copies + self.activations + self.logits

    @property
    def total(self) -> int:
        """The run's peak: its training step's or its evaluation's, whichever is larger."""
        return max(self.step, self.states + self.evaluation)

    def to_dict(self) -> dict[str, int]:
        return asdict(self) | {"total": self.total}


@dataclass(frozen=True)
class Precision:
    """How the step runs, as far as memory goes: bytes of the autocast dtype's activations
    (4 without autocast) and whether torch.compile runs the training forward."""

    act: int
    compiled: bool

    @classmethod
    def of(cls, train: TrainConfig, device_type: str, config=None) -> Precision:
        """The loop's choices: bf16 autocast under `auto` on CUDA only (`loop.autocast_dtype`),
        and whether the step compiles (`compile_policy.decide`: `compile: auto` weighs the
        trial's length, so it needs `config`; without it `auto` counts as eager, the larger)."""

        bf16 = train.autocast == "bfloat16" or (train.autocast == "auto" and device_type == "cuda")
        if train.compile == "auto" and config is not None and (train.steps or train.tokens):
            compiled = decide(config, train, device_type, token_budget(train, config.family)).compile
        else:
            compiled = train.compile is True
        return cls(BF16 if bf16 else FP32, compiled)


def _ffn_widths(s, compiled: bool) -> float:
    """Elements a (dense) FFN of `s` keeps per token: gated, its fused gate|up output, the
    activation and the product (compiled: the gate|up output and the product); relu, its
    output alone (both matmuls read it); gelu, its input and output."""
    d_h = int(s.d_h)
    if s.activation in ("swiglu", "geglu", "simple_gated"):
        return (3 if compiled else 4) * d_h
    return d_h if s.activation == "relu" else 2 * d_h


def _layer_bytes(s, stream: int, p: Precision) -> float:
    """Bytes one block keeps per token for the backward (trainers/lm.py's `Block`).

    The residual stream (`stream` wide) is fp32 whatever the autocast (the embedding and
    the weights are fp32), and each residual add makes a new one. Each RMSNorm keeps its
    output and, eager, its normalised input (fp32); under autocast the matmul after it keeps
    a bf16 copy. The attention keeps q|k|v, the rotated q and k (eager: also the rotation's
    half-swapped copies) and its output (eager: also its reshaped copy, the o input).
    """
    a, compiled = p.act, p.compiled
    attn_in, width = int(s.attn_in), int(s.width)
    q = int(s.n_heads) * int(s.head_dim)
    kv = int(s.n_kv_heads) * int(s.head_dim)

    def norm(d: int) -> float:  # a pre-norm's kept tensors beyond its (stream) input
        if compiled:
            return a * d  # the matmul's input; the rest is recomputed from the stream
        return 2 * FP32 * d + (a * d if a != FP32 else 0)

    if compiled:
        attention = a * (2 * q + 2 * kv + q)  # q, k rotated, v; output (q|k|v input recomputed)
    else:
        attention = a * (q + 2 * kv) + a * 2 * (q + kv) + a * 2 * q
    kept = FP32 * stream + norm(attn_in) + attention
    if s.k:  # hourglass: k sub-blocks, each a stream, a norm and a gated FFN
        return kept + s.k * (FP32 * stream + norm(width) + a * _ffn_widths(s, compiled))
    ffn = a * _ffn_widths(s, compiled)
    if int(s.n_experts) > 1:  # each token's k routed copies: its input, the expert, its output
        copies = int(s.n_active_experts)
        ffn = copies * (ffn + a * (width + int(s.ffn_out))) + FP32 * int(s.n_experts)
    return kept + FP32 * stream + norm(width) + ffn


def logit_bytes(vocab: int, p: Precision, z_loss: bool, in_graph: bool | None = None) -> float:
    """Bytes per token the loss holds at its peak, vocabulary-wide tensors only.

    In the graph (issue 36's readout+loss, one logsumexp for cross-entropy and z-loss):
    compiled, the logits once in the autocast dtype and one fp32 tensor as large (set from
    the H200's step peaks, docs/memory.md); eager, the same ops as outside it (measured on
    CPU). Outside (the loop's loss before issue 36): the model's logits (kept by the loop
    through the backward), their fp32 copy (kept too when z-loss's logsumexp saves it),
    log-softmax's output, and in the backward the gradients of log-softmax and of the fp32
    logits; z-loss adds logsumexp's gradient and, under autocast, keeps the fp32 copy."""
    in_graph = LOSS_IN_GRAPH if in_graph is None else in_graph
    if in_graph and p.compiled:
        return (p.act + FP32) * vocab
    if in_graph:  # eager: the logits, their fp32 copy and its gradient; without a z-loss,
        # torch's cross-entropy keeps log-softmax's output too (with one, the fused
        # `objective._CrossEntropyZLoss` keeps only the log-sum-exp)
        return (p.act + FP32 * (2 if z_loss else 3)) * vocab
    return (p.act + FP32 * (3 + z_loss * (1 + (p.act != FP32)))) * vocab


def estimate(config, train: TrainConfig, device_type: str, micro_batch: int | None = None,
             shards: int = 1) -> Estimate:
    """The predicted peak of training `config` under `train` on a `device_type` device, at
    `micro_batch` sequences per forward (default: the recipe's, else the whole step), its
    states split over `shards` FSDP ranks."""
    accounting = account(config, train.seq_len)
    trained, frozen = accounting.params_total, accounting.params_frozen
    p = Precision.of(train, device_type, config)
    states = (ADAM_STATES * trained + FP32 * frozen) // shards
    copies = BF16 * trained // shards if p.act != FP32 else 0
    per_step = _per_step(config, train)
    micro = min(micro_batch or _given(train) or per_step, per_step)
    if not of(config).task.reads_tokens:  # images: d_x in, d_out out, a residual MLP of d_z between
        per_example = FP32 * (config.d_x + config.d_out) + sum(
            8 * FP32 * w for w in accounting.widths)
        return Estimate(states, copies, int(micro * per_example), 0, micro)
    shapes = config.layer_shapes()
    stream = max(config.d_model, *(int(s.width) for s in shapes))
    per_token = sum(_layer_bytes(s, stream, p) for s in shapes) + 3 * FP32 * stream  # + final norm
    tokens = micro * train.seq_len
    logits = logit_bytes(config.vocab_size, p, train.z_loss > 0)
    return Estimate(states, copies, int(tokens * per_token), int(tokens * logits), micro,
                    evaluation_bytes(config.vocab_size, p, micro, train.seq_len))


def evaluation_bytes(vocab: int, p: Precision, micro: int, seq_len: int) -> int:
    """What `loop.evaluate` holds beyond the states: a micro-batch's logits in the autocast
    dtype, and for one chunk of them the fp32 copy (under autocast) and log-softmax's
    output. The activations are freed layer by layer without gradients."""
    chunk = min(micro, max(1, EVAL_CHUNK_TOKENS // seq_len)) * seq_len
    return int(vocab * (p.act * micro * seq_len + FP32 * (1 + (p.act != FP32)) * chunk))


def _per_step(config, train: TrainConfig) -> int:
    """Sequences (images) per optimizer step: the loop's `per_step` (whole sequences of
    batch_tokens; images up to batch_size, fewer when the data set is smaller)."""
    if of(config).task.reads_tokens:
        return max(1, train.batch_tokens // train.seq_len)
    return train.batch_size


def _given(train: TrainConfig) -> int | None:
    """The recipe's micro-batch when it names a number, else None (`auto` or unset)."""
    value = train.micro_batch_size
    return value if isinstance(value, int) else None


# ------------------------------------------------------------------ the micro-batch


def share_bytes(device, share: float | None) -> int | None:
    """`share` of a CUDA device, in bytes (a sweep trial's fraction of its GPU); None where no
    share applies (no share, or not CUDA): the run may use the whole device."""
    if share and str(device).startswith("cuda"):
        return int(min(share, 1.0) * device_bytes(device))
    return None


def micro_batch(config, train: TrainConfig, device, per_step: int, have: int | None = None,
                imposed: int | None = None) -> int:
    """The micro-batch the loop trains with: `imposed` (an out-of-memory retry's, a field of
    its trial spec) if given, else `chosen`'s on this device where the run may use `have`
    bytes (default: the whole device)."""
    if imposed is not None:
        return min(imposed, per_step)
    return chosen(config, train, getattr(device, "type", str(device)),
                  lambda: device_bytes(device) if have is None else have, per_step)


def chosen(config, train: TrainConfig, device_type: str, have, per_step: int | None = None) -> int:
    """The micro-batch for `train` on a `device_type` device where this process may use
    `have()` bytes. Under `auto`, and on CUDA when unset, the largest that fits
    (`fitting_micro_batch`); on CUDA a number is the most it may be (a GPU's memory is its
    hard limit, and the step's math is the same whatever the micro-batch); elsewhere a
    number is used as given, and unset is the whole step (as before `auto` existed)."""
    per_step = per_step or _per_step(config, train)
    given = _given(train)
    if device_type == "cuda" or train.micro_batch_size == "auto":
        fitting = fitting_micro_batch(config, train, device_type, have(), per_step)
        return min(fitting, given or per_step)
    return min(given or per_step, per_step)


def parse_size(text: str, flag: str) -> int:
    """`80GiB` or `80G` (binary), `141GB` (decimal), `512MiB`, or bytes: a size in bytes."""
    import re

    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)(b?)\s*", text.lower())
    if not found or float(found[1]) <= 0:
        raise UserError(f"cannot read {text!r} as a memory size (e.g. 80GiB, 141GB)", key=flag)
    number, unit, binary = float(found[1]), found[2], found[3] or not found[4]
    return int(number * (1024 if binary else 1000) ** " kmgt".index(unit or " "))


def fitting_micro_batch(config, train: TrainConfig, device_type: str, have: int,
                        per_step: int | None = None, shards: int = 1) -> int:
    """The largest micro-batch dividing the step (no smaller last one: under torch.compile
    that is a recompile) whose predicted peak is within MARGIN of `have` bytes; 1 when even
    that does not fit (`check_fits` refuses it)."""
    per_step = per_step or _per_step(config, train)
    for m in sorted((m for m in range(1, per_step + 1) if per_step % m == 0), reverse=True):
        if fits(estimate(config, train, device_type, m, shards).total, have):
            return m
    return 1


def device_bytes(device) -> int:
    """The device's memory: physical RAM for the CPU, the GPU's total for CUDA (a trial
    sharing the GPU may see less free; the total is what no trial can exceed). torch is
    imported for a GPU only: a sweep's driver never imports it."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info(torch.device(device))[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(config, train: TrainConfig, device, shards: int = 1, have: int | None = None,
               imposed: int | None = None) -> None:
    """Raise UserError when training `config` at the micro-batch the loop will use (its
    states split over `shards` FSDP ranks) is predicted to need more than the `have` bytes
    this run may use (default: the whole device; a trial's share: `share_bytes`)."""
    import torch

    device = torch.device(device)
    shared = have is not None
    have = device_bytes(device) if have is None else have
    per_step = _per_step(config, train)
    micro = micro_batch(config, train, device, per_step, have, imposed)
    need = estimate(config, train, device.type, micro, shards).total
    if not fits(need, have):
        params = account(config, train.seq_len).params_total
        smallest = estimate(config, train, device.type, 1, shards).total
        hint = ("; a smaller train.micro_batch_size may fit (auto picks one)"
                if fits(smallest, have) and micro > 1 else "")
        raise UserError(f"{config.family} candidate {config_key(config)} ({params:,} parameters) "
                        f"needs about {size(need)} to train at micro-batch {micro} (fp32 "
                        f"weights, gradients, AdamW states and activations); {device.type} "
                        f"{'gives this trial' if shared else 'has'} {size(have)}, "
                        f"{MARGIN:.0%} of it to plan on{hint}", key="model")


def fits(need: int, have: int) -> bool:
    """Whether a predicted peak of `need` bytes fits `have`, within MARGIN."""
    return need <= MARGIN * have


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"


def size(n: float) -> str:
    """Bytes for a person: GiB, or MiB below one GiB."""
    return f"{gib(n)} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


# ------------------------------------------------------------------ measured peaks


def measured_peak(run) -> tuple[int, object]:
    """(peak bytes of live CPU tensors while `run()` ran, its result): the running sum of the
    allocations and frees torch's profiler records (`profile_memory=True`), from zero at the
    start. Tensors alone: no allocator slack, no Python objects. Garbage of earlier work is
    collected first: a tensor it frees inside the window would count below zero."""
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    changes = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]")
    level = peak = 0
    for _, change in changes:
        level += change
        peak = max(peak, level)
    return peak, result
