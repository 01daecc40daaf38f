"""The one headroom rule between a trial's predicted memory and its share of a GPU.

Ray's fractional GPUs are a scheduling hint, not a limit: nothing stops a trial from taking the
whole card. So the share is sized and enforced by the same rule:

- the share `gpu: auto` asks for holds the CUDA context (`CUDA_CONTEXT_MB`, outside the caching
  allocator) plus the predicted memory with `ALLOCATOR_MARGIN` on top (the allocator's rounding,
  workspaces and fragmentation the prediction bounds rather than models), rounded up to 1% of
  the card;
- a trial given a share below one card limits its caching allocator to that share less the
  context (`torch.cuda.set_per_process_memory_fraction`), so a trial that outgrows its share
  fails with its own out-of-memory error while the others on the card go on.

Every share of a trial's request thus leaves its allocator at least predicted * (1 + margin).
"""

from __future__ import annotations

import math

import torch

from ..store import CUDA_PEAK_COLUMNS
from .report import MB

ALLOCATOR_MARGIN = 0.25  # of the predicted memory: what the allocator may add over it
CUDA_CONTEXT_MB = 600.0  # the CUDA context and kernels of one process, outside the allocator


def gpu_share(predicted_total_mb: float, gpu_memory_mb: float) -> float:
    """The share of a card of `gpu_memory_mb` that a trial predicted to need this much asks for."""
    needed = predicted_total_mb * (1 + ALLOCATOR_MARGIN) + CUDA_CONTEXT_MB
    return min(1.0, math.ceil(100 * needed / gpu_memory_mb) / 100)


def memory_fraction(share: float, device_memory_mb: float) -> float | None:
    """The fraction of the device's memory its allocator may hold under `share`; None when the
    trial has whole cards (nothing to hold it to) or no GPU at all."""
    if share <= 0 or share >= 1:
        return None
    return max(0.0, share - CUDA_CONTEXT_MB / device_memory_mb)


def hold_to_share(share: float, device: torch.device) -> float | None:
    """Limit this process's caching allocator on `device` to `share`; the fraction set, if any."""
    if device.type != "cuda":
        return None
    total_mb = torch.cuda.get_device_properties(device).total_memory / MB
    fraction = memory_fraction(share, total_mb)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


def peak_memory_mb(device: torch.device) -> dict[str, float | None]:
    """The caching allocator's peaks on `device` since its last reset: what the trial reached
    (`max_allocated`: live tensors; `max_reserved`: what the allocator took from the card)."""
    if device.type != "cuda":
        return dict.fromkeys(CUDA_PEAK_COLUMNS)
    allocated, reserved = CUDA_PEAK_COLUMNS
    return {
        allocated: torch.cuda.max_memory_allocated(device) / MB,
        reserved: torch.cuda.max_memory_reserved(device) / MB,
    }
