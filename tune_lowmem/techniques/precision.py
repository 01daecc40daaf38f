"""Low precision: pure half storage as the paper trains it, or mixed precision with fp32 masters.

- fp16 / bf16: weights, gradients, optimizer state and activations all in half; batch-norm and
  layer-norm parameters (and BN running statistics) stay fp32; fp16 uses dynamic loss scaling.
  No fp32 master copy, as in the paper.
- amp-fp16 / amp-bf16: parameters and optimizer state in fp32, the forward pass under
  `torch.autocast`; amp-fp16 uses dynamic loss scaling too.

`TrialConfig.precision_update` picks how pure bf16 writes each weight update
(`techniques.rounding`): nearest (plain bf16); stochastic (unbiased, so small updates are not
lost; no persistent extra memory); kahan (what rounding loses is carried to the next update in
a bf16 compensation buffer per half weight: +2 bytes per half weight of optimizer state, which
the profiler counts). Both hold bf16 weights and gradients in fp32 while the step runs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import torch
from torch import nn

from ..finite import all_finite
from ..plugins import TECHNIQUES
from ..torch_private import multiply_
from ..validation import choice, require
from . import settings
from .base import StepRunner

PRECISIONS = ("fp32", "fp16", "bf16", "amp-fp16", "amp-bf16")
# How a pure half step writes its update into the half weights: round to nearest, or
# stochastically (unbiased; no extra state), or Kahan-compensated (+1 bf16 state buffer per half
# weight); the last two bf16 only, with fp32 copies while the step runs.
PRECISION_UPDATES = ("nearest", "stochastic", "kahan")
HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
NORM_TYPES = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.LayerNorm,
    nn.GroupNorm,
)


def storage_dtype(precision: str) -> torch.dtype:
    """The dtype of parameters, gradients and optimizer state (norm layers excepted)."""
    return HALF_DTYPES.get(precision, torch.float32)


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype activations are computed and stored in."""
    return HALF_DTYPES[precision.removeprefix("amp-")] if precision != "fp32" else torch.float32


def uses_loss_scaling(precision: str) -> bool:
    return precision in ("fp16", "amp-fp16")


def cast_model(model: nn.Module, precision: str) -> nn.Module:
    """Cast storage for a pure half mode; normalisation layers stay fp32. In place; returns model."""
    dtype = storage_dtype(precision)
    if dtype == torch.float32:
        return model
    model.to(dtype)
    for module in model.modules():
        if isinstance(module, NORM_TYPES):
            module.float()
    return model


def autocast(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """`torch.autocast` for the amp modes; nothing for the pure modes (the storage is the dtype)."""
    if precision.startswith("amp-"):
        return torch.autocast(device_type=device_type, dtype=compute_dtype(precision))
    return contextlib.nullcontext()


def cast_input(tensor: torch.Tensor, precision: str) -> torch.Tensor:
    """Floating inputs enter a pure-half model in its storage dtype."""
    if tensor.is_floating_point():
        return tensor.to(storage_dtype(precision))
    return tensor


class DynamicLossScaler:
    """Dynamic loss scaling that works on half gradients (torch's GradScaler refuses them).

    The loss is multiplied by `scale` before backward; if any gradient is inf/NaN the step is
    skipped and the scale halved, otherwise gradients are divided by the scale, and after
    `growth_interval` clean steps in a row the scale doubles.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        min_scale: float = 2.0**-14,
    ):
        self.scale = init_scale
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.good_steps = 0
        self.skipped_steps = 0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    def unscale_(self, parameters: Iterable[nn.Parameter], finite: bool | None = None) -> bool:
        """Unscale gradients in place; False (and the scale lowered) if any overflowed.
        `finite`: whether they all are, when the caller has read it already."""
        grads = [p.grad for p in parameters if p.grad is not None]
        if not (all_finite(grads) if finite is None else finite):
            self.scale = max(self.scale * self.backoff_factor, self.min_scale)
            self.good_steps = 0
            self.skipped_steps += 1
            return False
        multiply_(grads, 1.0 / self.scale)  # one multi-tensor kernel, not one per gradient
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0
        return True

    def state_dict(self) -> dict:
        return {
            "scale": self.scale,
            "good_steps": self.good_steps,
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        self.scale = state["scale"]
        self.good_steps = state["good_steps"]
        self.skipped_steps = state["skipped_steps"]


class Precision(StepRunner):
    """The `precision` field for one trial: model casting, forward context, backward, unscale.

    The default `StepRunner`, bound to every trial whose ``step_runner`` names it (fp32 too): the
    training loop runs every loss through its `forward_context` and `backward` and takes a step
    only when `unscale_` allows it. A trial another step runner runs trains fp32, unless that
    runner derives from this class (and so keeps its formats).
    """

    NAME = "precision"
    SETTINGS = settings.PRECISION
    # a task's params -> the values autocast reaches (a model part that computes in its storage
    # dtype is out of its reach); {}: every value of every param
    TASK_NEEDS: ClassVar = {"AUTOCAST_REACHES": {}}

    def __init__(self, config, task):
        super().__init__(config, task)
        self.name = config.precision
        self.device_type = task.device.type
        self.scaler = DynamicLossScaler() if uses_loss_scaling(self.name) else None
        self.rounding = None  # the stream of stochastic rounding's random bits, when it is on
        if config.precision_update == "stochastic":
            self.rounding = torch.Generator(device=self.device_type).manual_seed(config.seed)

    @classmethod
    def validate(cls, config, task) -> None:
        choice(config.precision, PRECISIONS, "precision")
        choice(config.precision_update, PRECISION_UPDATES, "precision_update")
        runner = TECHNIQUES.get(config.step_runner, "step_runner")
        require(
            issubclass(runner, Precision) or config.precision == "fp32",
            "precision",
            f"{config.precision!r} is not allowed with step_runner {config.step_runner}; "
            "allowed: fp32 (the other formats need precision's own step)",
        )
        require(
            config.precision_update == "nearest" or config.precision == "bf16",
            "precision_update",
            f"{config.precision_update!r} is not allowed with precision {config.precision}; "
            "allowed: nearest (stochastic and kahan need precision bf16)",
        )
        if config.precision.startswith("amp-"):
            doing = f"precision {config.precision} (autocast)"
            cls.require_reached(config, task, "AUTOCAST_REACHES", doing)

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        # the update's rounding: the dry run steps, so it holds Kahan's buffers and fp32 copies
        return {"precision": config.precision, "precision_update": config.precision_update}

    def apply(self, model: nn.Module) -> nn.Module:
        """Cast the storage; a pure half model also gets its floating inputs in its dtype."""
        cast_model(model, self.name)
        if storage_dtype(self.name) != torch.float32:
            model.register_forward_pre_hook(self._cast_inputs)
        return model

    def _cast_inputs(self, module: nn.Module, args: tuple) -> tuple:
        return tuple(cast_input(a, self.name) if torch.is_tensor(a) else a for a in args)

    def forward_context(self) -> contextlib.AbstractContextManager:
        return autocast(self.name, self.device_type)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale_loss(loss) if self.scaler else loss).backward()

    def unscale_(self, parameters: Iterator[nn.Parameter], finite: bool | None = None) -> bool:
        """True when the step may be taken (always, without a scaler, unless a gradient is not
        finite). `finite`: whether every gradient is, when the caller has read it already."""
        if self.scaler:
            return self.scaler.unscale_(parameters, finite)
        if finite is None:
            return all_finite([p.grad for p in parameters if p.grad is not None])
        return finite

    def step(self, optimizer: torch.optim.Optimizer, parameters: Iterable[nn.Parameter]) -> None:
        """The optimizer's step, its update rounded into half weights as `update` says."""
        update = self.config.precision_update
        if update == "nearest":
            optimizer.step()
            return
        from .rounding import kahan_step, stochastic_step

        if update == "kahan":
            kahan_step(optimizer, list(parameters))
        else:
            stochastic_step(optimizer, list(parameters), self.rounding)

    @property
    def skips_nonfinite_steps(self) -> bool:
        return self.scaler is not None

    def cannot_go_on(self) -> str | None:
        if self.scaler is None or self.loss_scale > self.scaler.min_scale:
            return None
        return f"fp16 loss scale collapsed to {self.loss_scale} (NaN or overflow)"

    @property
    def skipped_steps(self) -> int:
        return self.scaler.skipped_steps if self.scaler else 0

    @property
    def loss_scale(self) -> float:
        return self.scaler.scale if self.scaler else math.nan

    def state_dict(self) -> dict:
        state = self.scaler.state_dict() if self.scaler else {}
        return state if self.rounding is None else {**state, "rounding": self.rounding.get_state()}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler:
            self.scaler.load_state_dict(state)
        if self.rounding is not None and "rounding" in state:
            self.rounding.set_state(state["rounding"])
