"""Whether gradients are finite, read with at most one device-to-host sync for all of them: the
training loop's divergence check and loss scaling both ask it."""

from __future__ import annotations

import torch


def finite_flag(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """Whether no element is inf or NaN, as one bool on the tensors' device (no host sync);
    None for no tensors."""
    if not tensors:
        return None
    return torch.stack([torch.isfinite(t).all() for t in tensors]).all()


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """`finite_flag` read on the host: one device-to-host sync for all the tensors."""
    flag = finite_flag(tensors)
    return True if flag is None else bool(flag)
