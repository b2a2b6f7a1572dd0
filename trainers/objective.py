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
CE = mean(lse_i - logit_i[y_i]) and z-loss = mean(lse_i^2) (PaLM, OLMo-2). Without a
z-loss the cross-entropy is torch's own, so a recipe without one trains exactly as before.
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
    lse = torch.logsumexp(logits, -1)
    ce = (lse - logits.gather(1, targets[:, None]).squeeze(1)).mean()
    return ce + z_loss * lse.square().mean(), ce


def mse_loss(out: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(MSE, MSE) in fp32: the vision tasks' objective is the loss they report."""
    mse = F.mse_loss(out.float(), targets)
    return mse, mse
