"""fairseq's Adam, the optimizer of the paper's DynamicConv Transformer recipe.

It differs from torch's AdamW only where eps goes: fairseq divides by sqrt(v) + eps and puts the
bias corrections into the step size, lr * sqrt(1 - b2^t) / (1 - b1^t); torch divides by
sqrt(v / (1 - b2^t)) + eps. For gradients near eps (rare words' embedding rows, early steps,
when 1 - b2^t is small) the two steps differ by up to half the learning rate, so the project uses
fairseq's rule (tests/test_fairseq_parity.py checks it against fairseq's own optimizer).
Weight decay is decoupled (p -= lr * wd * p) as in both. The moment buffers have the
parameter's dtype, as torch's AdamW keeps them, except an fp16 parameter's, which are fp32 as
fairseq's Adam keeps them: fp16 holds neither eps (1e-8) nor the second moment of a gradient
under about 1e-2, so half moments divide by zero at the first step and every weight becomes inf
or NaN. Unless `moments` says otherwise (`techniques.adam_state`: bf16 or 8-bit moments, lossy).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import torch

# (parameter, gradient, first moment, second moment) -> None: the update, in place
Rule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
# Elements a step updates at once: its temporaries (the second moment's root, an fp16 gradient's
# fp32 conversions inside the mixed-dtype in-place operators) are a chunk's, never a whole
# parameter's (18 MB each for the DC-Transformer's fp16 embeddings).
CHUNK = 1 << 18


def chunks(*tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """Aligned flat views of at most `CHUNK` elements of same-shaped tensors, so that an in-place
    elementwise update of each chunk is the update of the whole, bit for bit; the tensors whole
    when one of them is not contiguous (no flat view of it)."""
    if not all(t.is_contiguous() for t in tensors):
        yield tensors
        return
    flat = [t.view(-1) for t in tensors]
    for start in range(0, tensors[0].numel(), CHUNK):
        yield tuple(t[start : start + CHUNK] for t in flat)


class Moments:
    """How Adam keeps its two moments: here in the parameter's dtype, as torch does (exact), fp32
    for an fp16 parameter (see the module docstring; the update then computes in fp32 through
    type promotion and rounds the weight to nearest). A subclass keeps them in another form and
    hands `apply` the fp32 values to update."""

    def create(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        dtype = torch.float32 if param.dtype == torch.float16 else param.dtype
        return {
            key: torch.zeros_like(param, dtype=dtype, memory_format=torch.preserve_format)
            for key in ("exp_avg", "exp_avg_sq")
        }

    def apply(self, param: torch.Tensor, grad: torch.Tensor, state: dict, rule: Rule) -> None:
        """Run `rule` on the parameter, its gradient and its moments, chunk by chunk (`chunks`),
        and keep the result."""
        for pieces in chunks(param, grad, state["exp_avg"], state["exp_avg_sq"]):
            rule(*pieces)


class FairseqAdam(torch.optim.AdamW):
    """torch.optim.AdamW's interface, state names (step, exp_avg, exp_avg_sq) and defaults, with
    fairseq's update (amsgrad, maximize and the fused/foreach kernels are not offered).
    `moments`: how the two moments are stored (`Moments`)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        moments: Moments | None = None,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.moments = moments or Moments()

    def init_state(self, param: torch.Tensor) -> None:
        """The state of a parameter that has not stepped yet."""
        self.state[param].update(step=torch.tensor(0.0), **self.moments.create(param))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self.update(param, param.grad, group)
        return loss

    @torch.no_grad()
    def update(
        self, param: torch.Tensor, grad: torch.Tensor, group: dict, step: int | None = None
    ) -> None:
        """One parameter's step with `grad`. `step`: its count after this step, when the caller
        keeps it on the host (reading the state's tensor waits for the device, and is not
        possible on the profiler's fake tensors)."""
        beta1, beta2 = group["betas"]
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        state = self.state[param]
        if not state:
            self.init_state(param)
        state["step"] += 1
        step = float(state["step"]) if step is None else step
        step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)

        def rule(param, grad, exp_avg, exp_avg_sq) -> None:
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            if decay:
                param.add_(param, alpha=-decay * lr)
            param.addcdiv_(exp_avg, exp_avg_sq.sqrt().add_(eps), value=-step_size)

        self.moments.apply(param, grad, state, rule)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's loading casts every state tensor to its parameter's dtype; moments kept in
        another form (bf16, 8-bit codes and their fp32 scales) get back the dtype they were
        saved in."""
        super().load_state_dict(state_dict)
        saved = itertools.chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = itertools.chain.from_iterable(g["params"] for g in self.param_groups)
        for index, param in zip(saved, params):
            for key, value in state_dict["state"].get(index, {}).items():
                loaded = self.state[param].get(key)
                if torch.is_tensor(value) and key != "step" and loaded.dtype != value.dtype:
                    self.state[param][key] = value.to(param.device, copy=True)
