"""Gradient checkpointing: recompute activations in the backward pass instead of storing them.

Each model exposes `set_grad_checkpointing(strategy)` (as timm's models do) and its forward
reads it, so a checkpointed model has the same parameters and results as the plain one. The
strategies and what each stores are documented by the models
(`WideResNet.segments`; the transformer checkpoints each layer for "residual-1").
"""

from __future__ import annotations

from torch import nn


def apply(model: nn.Module, strategy: str) -> nn.Module:
    """Set the checkpointing strategy of a model that supports it; in place."""
    setter = getattr(model, "set_grad_checkpointing", None)
    if setter is None:
        raise ValueError(f"checkpoint: {type(model).__name__} does not support gradient checkpointing")
    setter(strategy)
    return model
