"""The only module that reaches into torch's underscore names, each because no public path exists.

- `FakeTensorMode`: tensors with shapes and dtypes but no data, which the memory prediction runs
  a training step on.
- `multiply_`: one multi-tensor kernel (`torch._foreach_mul_`) over many tensors, which the fp16
  gradient unscale needs. The public alternatives do not fit: `torch.amp.GradScaler` refuses
  fp16 gradients, and `torch.nn.utils.clip_grads_with_norm_` scales by max_norm / (norm + 1e-6)
  clamped to 1, which is not an exact division by the loss scale.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["FakeTensorMode", "multiply_"]


def multiply_(tensors: list[torch.Tensor], factor: float) -> None:
    """tensor *= factor for every tensor, in as few kernels as their devices and dtypes allow
    (on the CPU it is the same per-tensor `mul_`; results are identical either way)."""
    if tensors:
        torch._foreach_mul_(tensors, factor)
