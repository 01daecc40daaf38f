"""SGD applied inside the backward pass, so the gradient buffers are never all alive at once.

`FusedSGD` registers a post-accumulate-grad hook on every parameter
(`Tensor.register_post_accumulate_grad_hook`): as soon as a parameter's gradient of the step's
last microbatch is complete, the hook applies torch.optim.SGD's update to that parameter
(dampening 0) and drops the gradient, while the backward pass goes on through the layers below.
What is exact, and what it keeps:

- one microbatch: momentum, Nesterov and weight decay exactly as torch.optim.SGD (the same
  operations in the same order); a parameter's gradient lives only until its own update.
- several microbatches, momentum without Nesterov: each microbatch's gradient is added straight
  into the momentum buffer (the first one after buffer * momentum + weight_decay * param), and the
  parameter moves by the buffer after the last one: the update of SGD on the summed gradient up
  to floating-point summation order, and no gradient buffer at all.
- several microbatches with Nesterov, or without momentum: the update needs the summed gradient
  beside the buffer, so gradients accumulate in `.grad` as usual and the update is fused into the
  last microbatch's backward (exact; it saves only the time the gradients all coexist after it).

`state_dtype=torch.bfloat16` keeps the momentum buffers in bf16 (half the state memory), updated in
fp32 and rounded back each step: explicitly lossy. The model must not be stepped by anyone else,
and dynamic loss scaling (fp16) does not fit: it must see every gradient before any update.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


class FusedSGD:
    """SGD whose update runs per parameter in the backward pass; see the module docstring."""

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        state_dtype: torch.dtype | None = None,
    ):
        if nesterov and momentum <= 0:
            raise ValueError("nesterov: True is not allowed without momentum; allowed: False")
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.weight_decay, self.state_dtype = weight_decay, state_dtype
        self.buffers: dict[nn.Parameter, torch.Tensor] = {}
        self.microbatches = 1
        self._seen: dict[nn.Parameter, int] = {}
        self._handles = [p.register_post_accumulate_grad_hook(self._hook) for p in self.params]

    def begin_step(self, microbatches: int = 1, lr: float | None = None) -> None:
        """Set the microbatches of the coming steps and the learning rate (before a backward)."""
        self.microbatches = microbatches
        self.lr = self.lr if lr is None else lr
        self._seen = dict.fromkeys(self.params, 0)

    def remove(self) -> None:
        """Detach the hooks (the model trains with an ordinary optimizer again)."""
        for handle in self._handles:
            handle.remove()

    def state_bytes(self) -> int:
        return sum(b.nbytes for b in self.buffers.values())

    @property
    def into_buffer(self) -> bool:
        """Whether microbatch gradients accumulate straight into the momentum buffer."""
        return self.momentum > 0 and not self.nesterov and self.microbatches > 1

    @torch.no_grad()
    def _hook(self, param: nn.Parameter) -> None:
        seen = self._seen[param] = self._seen.get(param, 0) + 1
        last = seen == self.microbatches
        if last:
            self._seen[param] = 0  # the next backward starts the next step
        if self.into_buffer:
            buffer = self._buffer(param, first=seen == 1)
            buffer.add_(param.grad)
            param.grad = None
            if last:
                param.add_(buffer, alpha=-self.lr)
            return
        if not last:
            return  # the update needs the summed gradient: let it accumulate
        grad = param.grad
        param.grad = None
        if self.weight_decay:
            grad = grad.add(param, alpha=self.weight_decay)
        if self.momentum > 0:
            buffer = self.buffers.get(param)
            if buffer is None:
                buffer = self.buffers[param] = (
                    grad.detach().clone().to(self.state_dtype or grad.dtype)
                )
            elif self.state_dtype is None:
                buffer.mul_(self.momentum).add_(grad)
            else:  # lossy: updated in fp32, rounded to the state dtype
                buffer.copy_(buffer.float().mul_(self.momentum).add_(grad))
            grad = grad.add(buffer, alpha=self.momentum) if self.nesterov else buffer
        param.add_(grad, alpha=-self.lr)

    def _buffer(self, param: nn.Parameter, first: bool) -> torch.Tensor:
        """The momentum buffer ready to take gradients: at a step's first microbatch, multiplied by
        the momentum and given the weight decay term (zero before the first step)."""
        buffer = self.buffers.get(param)
        if buffer is None:
            buffer = self.buffers[param] = torch.zeros_like(
                param, dtype=self.state_dtype or param.dtype
            )
        if first:
            buffer.mul_(self.momentum)
            if self.weight_decay:
                buffer.add_(param, alpha=self.weight_decay)
        return buffer
