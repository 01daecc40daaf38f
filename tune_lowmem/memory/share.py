"""The one headroom rule between a trial's predicted memory and its share of a GPU.

Ray's fractional GPUs are a scheduling hint, not a limit: nothing stops a trial from taking the
whole card. So the share is sized and enforced by the same rule:

- the share `gpu: auto` asks for holds the CUDA context (`CUDA_CONTEXT_MB`, outside the caching
  allocator) plus the larger of the predicted run's peak (steps, evaluation, inputs) and the
  allocator's view of the step
  (`cuda.predict_cuda`), with `ALLOCATOR_MARGIN` on top (what neither models: cuDNN workspaces,
  fragmentation), rounded up to 1% of the card;
- a trial given a share below one card limits its caching allocator to that share less the
  context (`torch.cuda.set_per_process_memory_fraction`), so a trial that outgrows its share
  fails with its own out-of-memory error while the others on the card go on.

Every share of a trial's request thus leaves its allocator at least predicted * (1 + margin).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from ..config import TrialConfig
from ..outcome import CUDA_PEAKS
from .cuda import CUDA_CONTEXT_MB, predict_cuda
from .predict import predict
from .report import MB

ALLOCATOR_MARGIN = 0.25  # of the predicted memory: what the allocator may add over it


class Request(Protocol):
    """What a trial asks for (a search space's resources): a fixed share, or "auto" sized by
    `gpu_share` from the predicted memory."""

    gpu: float | str

    def gpu_share(self, predicted_total_mb: float, cuda_allocated_mb: float = 0.0) -> float: ...


def gpu_share(
    predicted_total_mb: float, gpu_memory_mb: float, cuda_allocated_mb: float = 0.0
) -> float:
    """The share of a card of `gpu_memory_mb` that a trial predicted to need this much asks for;
    `cuda_allocated_mb`: the allocator's view of its step (`cuda.predict_cuda`), when known, which
    the allocator's part covers too (with the same margin)."""
    allocator = max(predicted_total_mb, cuda_allocated_mb) * (1 + ALLOCATOR_MARGIN)
    return min(1.0, math.ceil(100 * (allocator + CUDA_CONTEXT_MB) / gpu_memory_mb) / 100)


def trial_share(resources: Request, config: TrialConfig) -> float:
    """The share a trial of `config` asks Ray for and is then held to: one computation for both
    (the driver's request in `search.driver.trial_resources`, the trial's limit in the trainable)."""
    if resources.gpu != "auto":
        return float(resources.gpu)
    allocated_mb = predict_cuda(config).allocated_bytes / MB  # the largest workspace: any card
    return resources.gpu_share(predict(config).run_peak_bytes / MB, allocated_mb)  # evaluation too


def memory_fraction(share: float, device_memory_mb: float) -> float | None:
    """The fraction of the device's memory its allocator may hold under `share`; None when the
    trial has whole cards (nothing to hold it to) or no GPU at all."""
    if share <= 0 or share >= 1:
        return None
    return max(0.0, share - CUDA_CONTEXT_MB / device_memory_mb)


def cuda_index(device: torch.device) -> int:
    """The index of a CUDA `device`: its own, else the current device's. torch.cuda's functions
    that take a device refuse one without an index (``torch.device("cuda")``) where they need a
    definite card, as `set_per_process_memory_fraction` does (a ValueError)."""
    return torch.cuda.current_device() if device.index is None else device.index


def hold_to_share(share: float, device: torch.device) -> float | None:
    """Limit this process's caching allocator on `device` to `share`; the fraction set, if any."""
    if device.type != "cuda":
        return None
    index = cuda_index(device)
    total_mb = torch.cuda.get_device_properties(index).total_memory / MB
    fraction = memory_fraction(share, total_mb)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, index)
    return fraction


def peak_memory_mb(device: torch.device) -> dict[str, float | None]:
    """The caching allocator's peaks on `device` since its last reset: what the trial reached
    (`max_allocated`: live tensors; `max_reserved`: what the allocator took from the card),
    under their columns (`outcome.CUDA_PEAKS`)."""
    if device.type != "cuda":
        return dict.fromkeys(CUDA_PEAKS)
    allocated, reserved = CUDA_PEAKS
    index = cuda_index(device)
    return {
        allocated: torch.cuda.max_memory_allocated(index) / MB,
        reserved: torch.cuda.max_memory_reserved(index) / MB,
    }
