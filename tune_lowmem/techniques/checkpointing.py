"""Gradient checkpointing: recompute activations in the backward pass instead of storing them.

A model that has its own strategies exposes `set_grad_checkpointing(strategy)` (as timm's
models do) and its forward reads it, so a checkpointed model keeps its parameter names and
results; the WideResNet's residual-1/2/2* are the paper's and stay exactly as it defines them.

Any other model gets the generic rule, which needs only that the model is built from sequential
stages:
- a *stage* is an `nn.Sequential` with at least two children that all have children of their own
  (blocks, not single layers), found from the top and not looked into further;
- ``blocks-1`` checkpoints every block of every stage as its own segment, ``blocks-2`` every run
  of two consecutive blocks (a last odd block alone); what lies outside the stages (stems,
  heads, pooling) is stored as usual.
For torchvision's ResNet-18 the stages are layer1..layer4 (two BasicBlocks each), for
MobileNetV3 `features` (its 13 blocks), for the ViT `encoder.layers` (its encoder blocks). A
stage's class is swapped for `CheckpointedSequential` in place, so parameter names and the
state dict do not change. Recomputation leaves batch-norm statistics as a plain step leaves them
(`models.segments.run_checkpointed`).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
from torch import nn

from ..models import strategies
from ..models.segments import run_checkpointed
from . import settings
from .base import EVERY, Technique


class CheckpointedSequential(nn.Sequential):
    """An `nn.Sequential` whose blocks run in checkpointed groups of `group_size` in training."""

    group_size: int

    def forward(self, x: Any) -> Any:
        if not (self.training and torch.is_grad_enabled()):
            return super().forward(x)
        blocks = list(self)
        for start in range(0, len(blocks), self.group_size):
            group = blocks[start : start + self.group_size]
            x = run_checkpointed(functools.partial(_run_blocks, group), group, x)
        return x


def _run_blocks(blocks: list[nn.Module], x: Any) -> Any:
    for block in blocks:
        x = block(x)
    return x


def stages(model: nn.Module) -> list[nn.Sequential]:
    """The model's sequential stages, outermost first (see the module docstring)."""
    found: list[nn.Sequential] = []

    def visit(module: nn.Module) -> None:
        children = list(module.children())
        if (
            isinstance(module, nn.Sequential)
            and len(children) >= 2
            and all(any(True for _ in c.children()) for c in children)
        ):
            found.append(module)
            return
        for child in children:
            visit(child)

    visit(model)
    return found


def set_generic_checkpointing(model: nn.Module, strategy: str) -> nn.Module:
    """Apply ``none``, ``blocks-1`` or ``blocks-2`` to any model made of sequential stages."""
    strategies.check(strategy, strategies.GENERIC_STRATEGIES)
    found = stages(model)
    if strategy != "none" and not found:
        raise ValueError(f"checkpoint: {type(model).__name__} has no sequential stage of blocks")
    for stage in found:
        if strategy == "none":
            stage.__class__ = nn.Sequential
        else:
            stage.__class__ = CheckpointedSequential
            stage.group_size = int(strategy.removeprefix("blocks-"))
    return model


def apply(model: nn.Module, strategy: str) -> nn.Module:
    """Set a model's checkpointing strategy, its own if it has them, else the generic rule."""
    setter = getattr(model, "set_grad_checkpointing", None)
    if setter is not None:
        setter(strategy)
        return model
    return set_generic_checkpointing(model, strategy)


class Checkpointing(Technique):
    """The `checkpoint` field: a strategy the task's model supports."""

    NAME = "checkpoint"
    SETTINGS = settings.CHECKPOINT
    EXACT: ClassVar = {"checkpoint": EVERY}  # recomputation repeats the same operations
    # the strategies the task's model supports (its own, or models.strategies.GENERIC_STRATEGIES)
    TASK_NEEDS: ClassVar = {"CHECKPOINT_STRATEGIES": ("none",)}

    @classmethod
    def enabled(cls, config) -> bool:
        return config.checkpoint != "none"

    @classmethod
    def validate(cls, config, task) -> None:
        strategies.check(config.checkpoint, cls.task_needs(task, "CHECKPOINT_STRATEGIES"))

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        return {"checkpoint": config.checkpoint}

    def apply(self, model: nn.Module) -> nn.Module:
        return apply(model, self.config.checkpoint)
