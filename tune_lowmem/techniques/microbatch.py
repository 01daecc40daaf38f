"""Microbatching: true (sequential microbatches, gradients accumulated) or simulated.

True microbatching is done by the training loop over the task's `microbatches` (for tensor
batches, `data.batch.split_rows`); the update equals one step over the whole minibatch except for batch-norm
statistics, which are per microbatch. Simulated microbatching keeps the whole minibatch in memory
and only reproduces that statistical effect: `apply_simulated` makes every batch norm normalise
microbatch-sized groups of its input (Composer's "ghost batch norm"), so the two can be compared,
as in the paper's Table 2.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from ..validation import choice, require
from . import settings
from .base import Technique


class GroupBatchNorm2d(nn.BatchNorm2d):
    """Batch norm whose training statistics come from groups of `group_size` examples.

    Running statistics are updated once per group, as they are under true microbatching.
    Subclassing BatchNorm2d keeps parameter and buffer names, so state dicts are unchanged.
    """

    group_size: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or x.shape[0] <= self.group_size:
            return super().forward(x)
        return torch.cat(
            [super(GroupBatchNorm2d, self).forward(g) for g in x.split(self.group_size)]
        )


def apply_simulated(model: nn.Module, group_size: int) -> nn.Module:
    """Make every BatchNorm2d of `model` a GroupBatchNorm2d of `group_size`; in place."""
    for module in model.modules():
        if type(module) is nn.BatchNorm2d:
            module.__class__ = GroupBatchNorm2d
            module.group_size = group_size
    return model


class Microbatching(Technique):
    """The `microbatch` section. True microbatching sets the size on the trial's task
    (`Task.microbatch_size`), which cuts its own batches (it knows what a batch holds)."""

    NAME = "microbatch"
    SETTINGS = settings.MICROBATCH
    # the modes the task's batches allow (simulated: its batch norms' statistics per group),
    # what microbatch.size counts (examples, or a translation task's tokens), and the schedule
    # field of the minibatch's size that it must divide (None: no such rule, as for a budget)
    TASK_NEEDS: ClassVar = {
        "MICROBATCH_MODES": ("true",),
        "MICROBATCH_UNIT": "examples",
        "MICROBATCH_OF": None,
        # a task's params -> the values simulated microbatching's group batch norm reaches
        "SIMULATED_REACHES": {},
    }

    def __init__(self, config, task):
        super().__init__(config, task)
        if config.microbatch.mode == "true":
            task.microbatch_size = config.microbatch.size

    @classmethod
    def enabled(cls, config) -> bool:
        return config.microbatch.size is not None

    @classmethod
    def validate(cls, config, task) -> None:
        modes = cls.task_needs(task, "MICROBATCH_MODES")
        if config.microbatch.mode not in modes:
            choice(config.microbatch.mode, modes, "microbatch.mode")
        field, size = cls.task_needs(task, "MICROBATCH_OF"), config.microbatch.size
        batch = None if field is None else getattr(config.schedule, field)
        require(
            batch is None or size is None or batch % size == 0,
            "microbatch.size",
            f"{size} is not allowed; a divisor of schedule.{field} {batch} is required",
        )
        if config.microbatch.mode == "simulated" and size is not None:
            doing = "simulated microbatching (group batch norm)"
            cls.require_reached(config, task, "SIMULATED_REACHES", doing)

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        return {
            "microbatch.size": config.microbatch.size,
            "microbatch.mode": config.microbatch.mode,
        }

    def apply(self, model: nn.Module) -> nn.Module:
        if self.config.microbatch.mode == "simulated":
            apply_simulated(model, self.config.microbatch.size)
        return model
