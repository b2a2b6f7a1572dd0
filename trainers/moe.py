"""Mixture-of-experts FFN: token-choice top-k routing over gated experts (xformer's 3B/1B MoE).

A bias-free router (width -> n_experts) scores each token; the token goes to its top
`n_active_experts` experts, each a `GatedFFN` of width d_h, and their outputs are summed,
weighted by the router's softmax probabilities (not renormalised over the chosen k, as
in Switch and OLMoE, so the LM loss trains the router even at k = 1).

Load balancing (Switch / GShard): aux = n_experts * sum_e f_e * P_e, with f_e the
fraction of the N*k token-to-expert assignments that went to expert e and P_e the mean
router probability of e. It is 1 when routing is uniform and grows as it collapses.
`LM.aux_loss()` averages it over layers and multiplies by the config's `router_aux_loss`
(default 0.01); the training loop adds that to the objective.

Dispatch (torchtitan's): the N*k token-to-expert assignments are sorted by expert, the
tokens gathered in that order, and each projection runs as one grouped matmul over the
experts' stacked weights, group e being the rows routed to expert e (`ends`: cumulative
counts). Every shape in the graph is static (N*k rows whatever the routing) and no count
becomes a Python number in it, so a block compiles with `fullgraph=True, dynamic=False`, an expert no
token reached included: it does no FLOPs and gets a zero gradient (AdamW then applies its
momentum and weight decay). No token is dropped and no FLOP is spent on padding: the
measured FLOPs equal the accounting's active FLOPs.

The grouped matmul is a custom op (`shapesweep::grouped_mm`), opaque to the compiler, with
a fixed output shape: `torch._grouped_mm` where its kernel serves (a Hopper GPU or newer,
bf16, 16-byte aligned strides), else one matmul per expert on its rows (CPU, fp32, odd
widths, older GPUs), whose bounds are read inside the op, on the host: no sync on a CPU, one
per grouped matmul on a GPU.

Each expert stays an ordinary `GatedFFN` (muP, init, state_dict and export see the same
parameters as a dense FFN's); the forward stacks their weights, a copy the size of the
layer's expert weights (what autocast's bf16 casts of them cost anyway). The grouped
projections are parameter-free modules named `gate_up` and `down` like a `GatedFFN`'s, so
the representation analysis reads the routed tokens' inner activations at `down`.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.flop_counter import register_flop_formula

from shapesweep.trainers.ffn import ACTIVATIONS, GatedFFN


@functools.cache
def _kernel_on(device: torch.device) -> bool:
    """Whether this torch has `torch._grouped_mm` (2.8+) and the GPU is a Hopper or newer,
    where every version that has it runs its kernel."""
    return hasattr(torch, "_grouped_mm") and torch.cuda.get_device_capability(device) >= (9, 0)


def _grouped_kernel_serves(*tensors: torch.Tensor) -> bool:
    """Whether `torch._grouped_mm`'s CUDA kernel takes these operands: bf16 on CUDA, each
    16-byte aligned with one of its last two dims contiguous and the other's stride a
    multiple of 16 bytes."""
    def aligned(t: torch.Tensor) -> bool:
        rows, cols = t.stride()[-2:]
        step = 16 // t.element_size()
        return t.data_ptr() % 16 == 0 and ((cols == 1 and rows % step == 0)
                                            or (rows == 1 and cols % step == 0))
    return all(t.is_cuda and t.dtype == torch.bfloat16 and aligned(t) for t in tensors) \
        and _kernel_on(tensors[0].device)


def _bounds(ends: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of each group's rows from the cumulative row counts."""
    stops = ends.tolist()
    return list(zip([0, *stops[:-1]], stops, strict=True))


@torch.library.custom_op("shapesweep::grouped_mm", mutates_args=())
def grouped_mm(x: torch.Tensor, w: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """x [M, K] (rows sorted by group) times w [G, K, N]: row r of group g is x[r] @ w[g];
    `ends` [G] int32 holds the groups' cumulative row counts. -> [M, N]."""
    if _grouped_kernel_serves(x, w):
        return torch._grouped_mm(x, w, offs=ends)
    out = x.new_empty(x.shape[0], w.shape[-1])
    for g, (start, end) in enumerate(_bounds(ends)):
        torch.mm(x[start:end], w[g], out=out[start:end])
    return out


@torch.library.custom_op("shapesweep::grouped_mm_weight_grad", mutates_args=())
def grouped_mm_weight_grad(x: torch.Tensor, dy: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """The gradient of `grouped_mm`'s w: group g's x rows transposed times its dy rows
    -> [G, K, N], zero for a group with no rows."""
    if _grouped_kernel_serves(x.t(), dy):
        return torch._grouped_mm(x.t(), dy, offs=ends)
    out = x.new_empty(len(ends), x.shape[1], dy.shape[1])
    for g, (start, end) in enumerate(_bounds(ends)):
        torch.mm(x[start:end].t(), dy[start:end], out=out[g])
    return out


@grouped_mm.register_fake
def _(x, w, ends):
    return x.new_empty(x.shape[0], w.shape[-1])


@grouped_mm_weight_grad.register_fake
def _(x, dy, ends):
    return x.new_empty(ends.shape[0], x.shape[1], dy.shape[1])


def _save(ctx, inputs, output):
    x, w, ends = inputs
    ctx.save_for_backward(x, w, ends)


def _backward(ctx, dy):
    x, w, ends = ctx.saved_tensors
    dx = grouped_mm(dy, w.transpose(-2, -1), ends) if ctx.needs_input_grad[0] else None
    dw = grouped_mm_weight_grad(x, dy, ends) if ctx.needs_input_grad[1] else None
    return dx, dw, None


grouped_mm.register_autograd(_backward, setup_context=_save)


@register_flop_formula([torch.ops.shapesweep.grouped_mm, torch.ops.shapesweep.grouped_mm_weight_grad])
def _grouped_mm_flops(a_shape, b_shape, ends_shape, *args, out_shape=None, **kwargs) -> int:
    """2 M K N: every row is multiplied once, by its own group's matrix (no padding)."""
    m, k = a_shape
    return 2 * m * k * b_shape[-1]


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a Linear would compute in here: autocast's when it is on (it does not see
    a custom op), else x's."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


class GroupedLinear(nn.Module):
    """One projection of every expert as a grouped matmul: row r through the Linear of
    expert `expert[r]` (weights [E, out, in], biases [E, out] or None). Holds no parameters."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                ends: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        y = grouped_mm(x, weight.to(x.dtype).transpose(-2, -1), ends)
        return y if bias is None else y + bias[expert].to(x.dtype)  # gathered in fp32: its gradient sums in fp32


class MoEFFN(nn.Module):
    """n_experts gated FFNs width -> d_h -> d_out, each token through its top n_active."""

    def __init__(self, width: int, d_h: int, d_out: int, n_experts: int, n_active: int,
                 activation: str, bias: bool):
        super().__init__()
        self.d_out, self.n_active = d_out, n_active
        self.router = nn.Linear(width, n_experts, bias=False)
        self.experts = nn.ModuleList(GatedFFN(width, d_h, d_out, activation, bias)
                                     for _ in range(n_experts))
        self.gate_up, self.down = GroupedLinear(), GroupedLinear()
        self.act = ACTIVATIONS[activation]  # the experts' own
        self.aux_loss: torch.Tensor | None = None  # load-balancing loss of the last forward
        self.load: torch.Tensor | None = None  # tokens each expert received in the last forward

    def _stacked(self, name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The experts' `name` Linear weights [E, out, in] and biases [E, out] (or None)."""
        linears = [getattr(expert, name) for expert in self.experts]
        bias = torch.stack([lin.bias for lin in linears]) if linears[0].bias is not None else None
        return torch.stack([lin.weight for lin in linears]), bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probs = self.router(tokens).float().softmax(-1)  # [N, E]
        weight, chosen = probs.topk(self.n_active, dim=-1)  # [N, k]
        assigned = chosen.flatten()
        order = assigned.argsort(stable=True)  # assignments grouped by expert
        load = torch.zeros(len(self.experts), dtype=torch.long, device=x.device).scatter_add_(
            0, assigned, torch.ones_like(assigned))
        ends = load.cumsum(0).to(torch.int32)
        token, expert = order // self.n_active, assigned[order]
        routed = tokens.index_select(0, token).to(_compute_dtype(x))  # [N*k, width]
        gate, up = self.gate_up(routed, *self._stacked("gate_up"), ends, expert).chunk(2, dim=-1)
        y = self.down(self.act(gate) * up, *self._stacked("down"), ends, expert)
        y = y * weight.flatten()[order][:, None]
        out = tokens.new_zeros(len(tokens), self.d_out).index_add_(0, token, y.to(tokens.dtype))
        share = load.float() / chosen.numel()
        self.aux_loss = len(self.experts) * (share * probs.mean(0)).sum()
        self.load = load.detach()
        return out.reshape(*x.shape[:-1], self.d_out)


def make_moe(s) -> MoEFFN:
    """The mixture of experts a `LayerShape` with n_experts > 1 describes."""
    return MoEFFN(int(s.width), int(s.d_h), int(s.ffn_out), int(s.n_experts),
                  int(s.n_active_experts), s.activation, s.bias)
