"""fairseq's Adam, the optimizer of the paper's DynamicConv Transformer recipe.

It differs from torch's AdamW only where eps goes: fairseq divides by sqrt(v) + eps and puts the
bias corrections into the step size, lr * sqrt(1 - b2^t) / (1 - b1^t); torch divides by
sqrt(v / (1 - b2^t)) + eps. For gradients near eps (rare words' embedding rows, early steps,
when 1 - b2^t is small) the two steps differ by up to half the learning rate, so the project uses
fairseq's rule (tests/test_fairseq_parity.py checks it against fairseq's own optimizer).
Weight decay is decoupled (p -= lr * wd * p) as in both. The moment buffers have the
parameter's dtype, as torch's AdamW keeps them (fp16 trials keep every buffer in half).
"""

from __future__ import annotations

import math

import torch


class FairseqAdam(torch.optim.AdamW):
    """torch.optim.AdamW's interface, state names (step, exp_avg, exp_avg_sq) and defaults, with
    fairseq's update (amsgrad, maximize and the fused/foreach kernels are not offered)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(
                        param, memory_format=torch.preserve_format
                    )
                state["step"] += 1
                step = float(state["step"])
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(param.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
                if decay:
                    param.add_(param, alpha=-decay * lr)
                param.addcdiv_(exp_avg, exp_avg_sq.sqrt().add_(eps), value=-step_size)
        return loss
