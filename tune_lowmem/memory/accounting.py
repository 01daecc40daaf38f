"""How the paper counts model and optimizer memory, shared by the prediction and the measurement.

Every tensor is counted as stored: numel x element size, in the dtype it is held in (half for the
pure fp16 and bf16 modes, norm layers fp32; fp32 for fp32 and the amp modes). A weight that a
technique holds compressed (a packed sparse layer) counts the bytes the technique names for it
(`Technique.weight_bytes`: its values and index, as held or in a named layout such as the paper's
CSR); its gradient and optimizer state are shaped like its values, so they count as stored too.
"""

from __future__ import annotations

import torch
from torch import nn

from ..plugins import techniques


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def compressed_weights(model: nn.Module, layout: str | None = None) -> dict[str, int]:
    """The weights the techniques hold compressed, by parameter name, with their bytes as held
    (None) or counted in `layout`."""
    weights: dict[str, int] = {}
    for technique in techniques():
        weights.update(technique.weight_bytes(model, layout))
    return weights


def model_bytes(model: nn.Module, layout: str | None = None) -> int:
    """The parameters: a compressed weight as its technique counts it (`compressed_weights`),
    any other as stored."""
    compressed = compressed_weights(model, layout)
    return sum(
        compressed[name] if name in compressed else tensor_bytes(param)
        for name, param in model.named_parameters()
    )


def gradient_bytes(model: nn.Module) -> int:
    """The gradient buffer: one gradient shaped like each parameter."""
    return sum(map(tensor_bytes, model.parameters()))


def held_gradient_bytes(model: nn.Module) -> int:
    """The gradient buffer as a step leaves it: none where a fused step applied and dropped
    every gradient in the backward pass."""
    held = any(p.grad is not None for p in model.parameters())
    return gradient_bytes(model) if held else 0


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The optimizer state a real optimizer holds now for `model`'s parameters, as stored (8-bit
    state's codes and per-block scales included)."""
    return sum(
        tensor_bytes(tensor)
        for param in model.parameters()
        for tensor in optimizer.state.get(param, {}).values()
        if torch.is_tensor(tensor)
    )
