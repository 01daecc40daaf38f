"""How the paper counts model and optimizer memory, shared by the prediction and the measurement.

A dense parameter takes numel x element size. A sparse weight takes its nonzero values plus CSR
index storage (`techniques.packed.sparse_storage_bytes`: column indices in uint16 for rows of
up to 65,536 columns, else int32, and int32 row pointers); its gradient and each optimizer-state
buffer share the weight's pattern and take the nonzero values only (8-bit state: a byte per
nonzero and a scale per block of the nonzeros). Everything is counted in
the dtype it is stored in: half for the pure fp16 and bf16 modes (norm layers fp32), fp32 for
fp32 and the amp modes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..techniques.blockwise import SCALES, blocks
from ..techniques.packed import dense_shape, sparse_storage_bytes


def value_bytes(tensor: torch.Tensor, nonzeros: int | None) -> int:
    """A buffer shaped like a parameter: all its elements, or the `nonzeros` of a sparse one."""
    return (tensor.numel() if nonzeros is None else nonzeros) * tensor.element_size()


def model_bytes(model: nn.Module, nonzeros: Mapping[str, int], layout: str = "csr") -> int:
    """The parameters; `nonzeros` maps each sparse weight's name to its nonzero count, stored in
    `layout` (`sparse_storage_bytes`)."""
    total = 0
    for name, param in model.named_parameters():
        if name in nonzeros:
            size = param.element_size()
            shape = dense_shape(model, name)
            total += sparse_storage_bytes(nonzeros[name], shape, size, layout)
        else:
            total += value_bytes(param, None)
    return total


def gradient_bytes(model: nn.Module, nonzeros: Mapping[str, int]) -> int:
    """The gradient buffer: one value buffer per parameter."""
    return sum(value_bytes(p, nonzeros.get(name)) for name, p in model.named_parameters())


def held_gradient_bytes(model: nn.Module, nonzeros: Mapping[str, int]) -> int:
    """The gradient buffer as a step leaves it: none where a fused step applied and dropped
    every gradient in the backward pass (`techniques.fused_step`)."""
    held = any(p.grad is not None for p in model.parameters())
    return gradient_bytes(model, nonzeros) if held else 0


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


def state_copies(optimizer: torch.optim.Optimizer) -> int:
    """Buffers shaped like each parameter that the optimizer keeps: SGD with momentum 1, Adam 2."""
    if isinstance(optimizer, torch.optim.SGD):
        return int(any(group["momentum"] for group in optimizer.param_groups))
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 2 + int(any(group["amsgrad"] for group in optimizer.param_groups))
    raise NotImplementedError(f"the profiler does not know the state of {type(optimizer).__name__}")


def state_bytes(
    model: nn.Module, optimizer: torch.optim.Optimizer, nonzeros: Mapping[str, int]
) -> int:
    """The optimizer state a real optimizer holds now: buffers shaped like their parameter count
    as value buffers (nonzeros only for a sparse weight), the per-block scales of 8-bit state
    (`techniques.blockwise`) as the blocks of its nonzeros, anything else (Adam's step) as
    stored."""
    total = 0
    for name, param in model.named_parameters():
        count = nonzeros.get(name)
        for key, tensor in optimizer.state.get(param, {}).items():
            if not torch.is_tensor(tensor):
                continue
            if tensor.shape == param.shape:
                total += value_bytes(tensor, count)
            elif count is not None and key.endswith(SCALES):
                total += blocks(count) * tensor.element_size()
            else:
                total += value_bytes(tensor, None)
    return total
