"""The layer types a model's weight matrices live in: what a task names as the weights dynamic
sparsity may prune (`tasks.base.conv_and_linear_weights`).

Types are matched exactly, not by `isinstance`: a subclass such as MultiheadAttention's out_proj
may be read by its weight alone. A class that takes the place of one of them in a model (a
technique's packed form, which holds other tensors under `weight`) names the type it stands for
in its class attribute `STANDS_FOR`.
"""

from __future__ import annotations

from torch import nn

WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def weight_layer(module: nn.Module) -> bool:
    """Whether `module` is one of `WEIGHT_LAYERS`, or stands for one."""
    kind = type(module)
    return kind in WEIGHT_LAYERS or getattr(kind, "STANDS_FOR", None) in WEIGHT_LAYERS
