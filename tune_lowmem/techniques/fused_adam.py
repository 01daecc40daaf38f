"""fairseq's Adam applied inside the backward pass, so the gradient buffers are never all alive
at once (the Adam counterpart of `fused_step.FusedSGD`).

`FusedAdam` registers a post-accumulate-grad hook on every parameter of an `optim.FairseqAdam`:
as soon as a parameter's gradient of the step's last microbatch is complete, the hook runs that
optimizer's own per-parameter update (`FairseqAdam.update`, in whatever form `adam_state` keeps
the moments) and drops the gradient. The results equal the unfused optimizer's (the same
operations in the same order).

Only one microbatch saves memory. Adam is not linear in the gradient (its second moment squares
it, and the step divides by its root), so microbatch gradients cannot be added into its moments
one by one as heavy-ball SGD adds them into its momentum: with several microbatches the
gradients accumulate in `.grad` as usual and the update runs in the last microbatch's backward,
exact but holding every gradient buffer as the unfused step does.

The state is created up front (every step holds the same); the step counts are kept on the host
too, so that the update never reads a device scalar (nor a fake one in the profiler's dry run).
The model must not be stepped by anyone else, and dynamic loss scaling (fp16) does not fit.
"""

from __future__ import annotations

import torch
from torch import nn

from ..optim import FairseqAdam


class FusedAdam:
    """`optimizer`'s update run per parameter in the backward pass; see the module docstring."""

    def __init__(self, optimizer: FairseqAdam):
        self.optimizer = optimizer
        self.groups = self._groups()
        self.microbatches = 1
        self.seen: dict[nn.Parameter, int] = {}
        for param in self.groups:
            if not optimizer.state.get(param):
                optimizer.init_state(param)
            param.register_post_accumulate_grad_hook(self._hook)
        self.steps = dict.fromkeys(self.groups, 0)

    def _groups(self) -> dict[nn.Parameter, dict]:
        """Each parameter's group (the optimizer's loading replaces the group dicts)."""
        return {
            param: group
            for group in self.optimizer.param_groups
            for param in group["params"]
            if param.requires_grad
        }

    def begin_step(self, microbatches: int = 1) -> None:
        """Set the microbatches of the coming step (before its first backward)."""
        self.microbatches = microbatches
        self.seen = dict.fromkeys(self.groups, 0)

    def reload(self) -> None:
        """After the optimizer's loading: its new groups, and the step counts from its state."""
        self.groups = self._groups()
        self.steps = {p: int(self.optimizer.state[p]["step"]) for p in self.groups}

    @torch.no_grad()
    def _hook(self, param: nn.Parameter) -> None:
        seen = self.seen[param] = self.seen.get(param, 0) + 1
        if seen < self.microbatches:
            return  # the update needs the summed gradient: let it accumulate
        self.seen[param] = 0
        grad, param.grad = param.grad, None
        self.steps[param] += 1
        self.optimizer.update(param, grad, self.groups[param], self.steps[param])
