"""The training objective, computed where the model makes its output, so it compiles with it.

Every model's `forward(x, targets, z_loss)` returns (objective to minimise, reported loss)
through these functions; `forward(x)` alone returns the output (logits, images).

Why here and not in the loop: under torch.compile the readout and its loss are one region
(`shapesweep.trainers.compiled`), so Inductor fuses the upcast of the logits into the
log-sum-exp and the backward's softmax. The micro-batch's logits are then held once, in the
autocast dtype (bf16 on CUDA), and never as an fp32 copy; a loss outside the graph
materialised [tokens x vocab] in fp32 for the cross-entropy and again for the z-loss
(30% of the 113M baseline's step on an H200, issue 36).

Cross-entropy and z-loss share one log-sum-exp: with lse_i = logsumexp(logits_i),
CE = mean(lse_i - logit_i[y_i]) and z-loss = mean(lse_i^2) (PaLM, OLMo-2), and one backward
pass, softmax_i x (1 + 2 z lse_i) / N less 1/N at each target (`_CrossEntropyZLoss`, as
Liger's and PaLM's fused kernels do): eager, that is as many passes over [tokens x vocab] as
torch's cross-entropy alone; compiled, Inductor fuses them. Without a z-loss the
cross-entropy is torch's own, so a recipe without one trains exactly as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def lm_loss(logits: torch.Tensor, targets: torch.Tensor,
            z_loss: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(CE + z_loss x mean lse^2, CE) in fp32 of logits [..., vocab] against integer targets."""
    logits, targets = logits.float().flatten(0, -2), targets.flatten()
    if not z_loss:
        ce = F.cross_entropy(logits, targets)
        return ce, ce
    ce, z = _CrossEntropyZLoss.apply(logits, targets)
    return ce + z_loss * z, ce


class _CrossEntropyZLoss(torch.autograd.Function):
    """(mean CE, mean lse^2) of fp32 logits [N, V] from one log-sum-exp, and their gradient
    in one pass: d/dx_ij = softmax_ij (g_ce + 2 g_z lse_i) / N - g_ce [j = y_i] / N."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor):
        lse = torch.logsumexp(logits, -1)
        ce = (lse - logits.gather(1, targets[:, None]).squeeze(1)).mean()
        ctx.save_for_backward(logits, targets, lse)
        return ce, lse.square().mean()

    @staticmethod
    def backward(ctx, grad_ce: torch.Tensor, grad_z: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        n = logits.shape[0]
        scale = (grad_ce + 2 * grad_z * lse) / n
        grad = (logits - lse[:, None]).exp_().mul_(scale[:, None])
        grad.scatter_add_(1, targets[:, None], (-grad_ce / n).expand(n, 1))
        return grad, None


def mse_loss(out: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(MSE, MSE) in fp32: the vision tasks' objective is the loss they report."""
    mse = F.mse_loss(out.float(), targets)
    return mse, mse
