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

The momentum buffers exist from the start (zeros: the first step's ``0 * momentum + grad`` is
torch's ``clone(grad)``), so every step holds the same; they live in `state` under torch.optim.SGD's
key (``state[param]["momentum_buffer"]``), which may be a torch optimizer's own `state`: its
checkpoints and whatever masks its state (sparsity) then see them.
`state_dtype=torch.bfloat16` keeps the momentum buffers in bf16 (half the state memory), updated in
fp32 and rounded back each step: explicitly lossy. The model must not be stepped by anyone else,
and dynamic loss scaling (fp16) does not fit: it must see every gradient before any update.

`FusedStep` is the technique (`TrialConfig.fused_step`, `TrialConfig.momentum_dtype`) that trains a
trial this way in place of the task's torch.optim.SGD, or, for a task whose optimizer is
fairseq's Adam, fuses that optimizer's own update (`fused_adam.FusedAdam`, ``exact`` only).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import nn

from ..optim import FairseqAdam
from ..validation import choice, require
from . import settings
from .base import Technique
from .fused_adam import FusedAdam
from .precision import storage_dtype, uses_loss_scaling

KEY = "momentum_buffer"  # torch.optim.SGD's name for it


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
        state: dict | None = None,
    ):
        if nesterov and momentum <= 0:
            raise ValueError("nesterov: True is not allowed without momentum; allowed: False")
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.weight_decay, self.state_dtype = weight_decay, state_dtype
        self.state = defaultdict(dict) if state is None else state
        self.microbatches = 1
        self._seen: dict[nn.Parameter, int] = {}
        if momentum > 0:
            for p in self.params:
                self.state[p].setdefault(KEY, torch.zeros_like(p, dtype=state_dtype or p.dtype))
        for param in self.params:
            param.register_post_accumulate_grad_hook(self._hook)

    def begin_step(self, microbatches: int = 1, lr: float | None = None) -> None:
        """Set the microbatches of the coming steps and the learning rate (before a backward)."""
        self.microbatches = microbatches
        self.lr = self.lr if lr is None else lr
        self._seen = dict.fromkeys(self.params, 0)

    def buffers(self) -> list[torch.Tensor]:
        return [self.state[p][KEY] for p in self.params if KEY in self.state.get(p, {})]

    def state_bytes(self) -> int:
        return sum(b.nbytes for b in self.buffers())

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
            buffer = self.state[param][KEY]
            if seen == 1:  # the step's first gradient: decay the buffer, add the weight decay
                buffer.mul_(self.momentum)
                if self.weight_decay:
                    buffer.add_(param, alpha=self.weight_decay)
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
            buffer = self.state[param][KEY]
            if buffer.dtype == grad.dtype:
                buffer.mul_(self.momentum).add_(grad)
            else:  # lossy: updated in fp32, rounded to the state dtype
                buffer.copy_(buffer.float().mul_(self.momentum).add_(grad))
            grad = grad.add(buffer, alpha=self.momentum) if self.nesterov else buffer
        param.add_(grad, alpha=-self.lr)


FUSED_STEPS = ("none", "exact", "heavy-ball")
MOMENTUM_DTYPES = {"param": None, "bf16": torch.bfloat16}


class FusedStep(Technique):
    """The `fused_step` and `momentum_dtype` fields: the task's SGD run as `FusedSGD`, or its
    fairseq Adam as `FusedAdam`.

    - ``exact``: the task's own update (Nesterov kept); with Nesterov and several
      microbatches the gradients still accumulate (see `FusedSGD`), so it saves memory only
      without microbatching; the same for Adam always (see `FusedAdam`).
    - ``heavy-ball``: LOSSY, the task's momentum without Nesterov (not the paper's recipe), so
      that microbatch gradients go straight into the momentum buffer: no gradient buffer at all.
    - ``momentum_dtype: bf16``: LOSSY, momentum kept in bf16 (only where the parameters are fp32).
    """

    NAME = "fused_step"
    SETTINGS = settings.FUSED_STEP
    EXACT: ClassVar = {"fused_step": ("none", "exact")}  # heavy-ball is lossy

    def __init__(self, config, task):
        super().__init__(config, task)
        self.optimizer: torch.optim.Optimizer | None = None
        self.fused: FusedSGD | None = None

    @classmethod
    def settings(cls, config) -> dict[str, str]:
        return {"fused_step": config.fused_step, "momentum_dtype": config.momentum_dtype}

    @classmethod
    def enabled(cls, config) -> bool:
        return config.fused_step != "none"

    @classmethod
    def validate(cls, config, task) -> None:
        fused = choice(config.fused_step, FUSED_STEPS, "fused_step")
        dtype = choice(config.momentum_dtype, tuple(MOMENTUM_DTYPES), "momentum_dtype")
        if dtype != "param":
            require(
                fused != "none",
                "momentum_dtype",
                f"{dtype!r} is not allowed with fused_step none; allowed: param",
            )
            require(
                storage_dtype(config.precision) == torch.float32,
                "momentum_dtype",
                f"{dtype!r} is not allowed with precision {config.precision} (its momentum is "
                "already half); allowed: param",
            )
        if fused == "none":
            return
        refusal = f"{fused!r} is not allowed"
        optimizer = getattr(task, "OPTIMIZER", None)
        adam = optimizer is not None and issubclass(optimizer, FairseqAdam)
        require(
            adam or (optimizer is not None and issubclass(optimizer, torch.optim.SGD)),
            "fused_step",
            f"{refusal} for task {config.task} (its optimizer is "
            f"{getattr(optimizer, '__name__', 'not declared')}, the fused step is SGD's and "
            "fairseq Adam's); allowed: none",
        )
        require(
            not adam or fused == "exact",
            "fused_step",
            f"{refusal} for task {config.task} (its optimizer is Adam); allowed: none, exact",
        )
        require(
            not adam or dtype == "param",
            "momentum_dtype",
            f"{dtype!r} is not allowed for task {config.task} (its optimizer is Adam: see "
            "adam_state); allowed: param",
        )
        require(
            not uses_loss_scaling(config.precision),
            "fused_step",
            f"{refusal} with precision {config.precision} (dynamic loss scaling must see every "
            "gradient before any update); allowed: none",
        )
        require(
            config.precision_update == "nearest",
            "fused_step",
            f"{refusal} with precision_update {config.precision_update}; allowed: none",
        )

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        return cls.settings(config)  # which tensors the backward pass holds, and when

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Take over the optimizer's updates: its state holds the momentum, its step finds no
        gradient left to apply."""
        if isinstance(optimizer, FairseqAdam):
            self.optimizer, self.fused = optimizer, FusedAdam(optimizer)
            return
        require(
            isinstance(optimizer, torch.optim.SGD) and len(optimizer.param_groups) == 1,
            "fused_step",
            f"{self.config.fused_step!r} is not allowed with {type(optimizer).__name__} "
            "(one torch.optim.SGD parameter group is required); allowed: none",
        )
        group = optimizer.param_groups[0]
        self.optimizer = optimizer
        self.fused = FusedSGD(
            group["params"],
            lr=group["lr"],
            momentum=group["momentum"],
            nesterov=group["nesterov"] and self.config.fused_step == "exact",
            weight_decay=group["weight_decay"],
            state_dtype=MOMENTUM_DTYPES[self.config.momentum_dtype],
            state=optimizer.state,
        )

    def begin_step(self, microbatches: int) -> None:
        if isinstance(self.fused, FusedAdam):  # reads its groups' learning rates itself
            self.fused.begin_step(microbatches)
            return
        self.fused.begin_step(microbatches, self.optimizer.param_groups[0]["lr"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """After the optimizer's own: its loading casts the buffers to the parameters' dtype and
        replaces its state object."""
        if isinstance(self.fused, FusedAdam):
            self.fused.reload()
            return
        self.fused.state = self.optimizer.state
        dtype = MOMENTUM_DTYPES[self.config.momentum_dtype]
        for param in self.fused.params if self.fused.momentum > 0 else ():
            entry = self.optimizer.state[param]
            entry[KEY] = entry.get(KEY, torch.zeros_like(param)).to(dtype or param.dtype)
