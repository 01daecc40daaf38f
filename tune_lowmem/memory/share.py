"""The one rule between a CUDA trial's predicted run peak and its share of a GPU.

Ray's fractional GPUs are a scheduling hint, not a limit: nothing stops a trial from taking the
whole card. So the share is sized and enforced from the same figures (`cuda.CudaPrediction`):

- the share `gpu: auto` asks for holds what the trial's caching allocator reserves for its
  predicted run peak (`reserved_bytes`: the peak times the most the allocator was measured to
  reserve per byte it held, `cuda.calibration`) and the CUDA context beside it (measured on a
  card, likewise), rounded up to 1% of the card;
- a trial given a share below one card limits its caching allocator to that share less the
  context (`torch.cuda.set_per_process_memory_fraction`), so a trial that outgrows its share
  fails with its own out-of-memory error while the others on the card go on; a convolution
  whose cuDNN workspace the limit cannot give takes the next algorithm cuDNN proposes
  (aten/src/ATen/native/cudnn/Conv_v8.cpp's `try_configs`), so a workspace the driver could not
  predict slows a trial rather than failing it.

The prediction the share is sized from is the driver's (`trial_target` without the card: the
architecture the resources name, torch's rules for its workspaces), made again the same way in
the trial: the share Ray gave is the one the trial is held to.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

import torch

from ..config import TrialConfig
from ..outcome import CUDA_PEAKS
from .cuda import CudaPrediction, calibration, trial_target
from .report import MB


class Request(Protocol):
    """What a trial asks for (a search space's resources): a fixed share, or "auto" sized by
    `gpu_share` from the predicted memory on the GPUs it names."""

    gpu: float | str
    capability: tuple[int, int] | None

    def gpu_share(self, reserved_mb: float, context_mb: float) -> float: ...


def gpu_share(reserved_mb: float, context_mb: float, gpu_memory_mb: float) -> float:
    """The share of a card of `gpu_memory_mb` that holds an allocator reserving `reserved_mb`
    beside a CUDA context of `context_mb`, in whole percents, at most the card."""
    return min(1.0, math.ceil(100 * (reserved_mb + context_mb) / gpu_memory_mb) / 100)


def driver_prediction(resources: Request, config: TrialConfig) -> CudaPrediction:
    """A trial's CUDA prediction as the driver makes it: on the architecture the resources name,
    torch's rules for the workspaces (nothing probed, so the trial makes the same)."""
    from .predict import predict

    target = trial_target(config, gpu=True, capability=resources.capability)
    return predict(config, target=dataclasses.replace(target, on_card=False)).cuda


def trial_share(resources: Request, config: TrialConfig) -> float:
    """The share a trial of `config` asks Ray for and is then held to: one computation for both
    (the driver's request in `search.driver.trial_resources`, the trial's limit in the trainable)."""
    if resources.gpu != "auto":
        return float(resources.gpu)
    predicted = driver_prediction(resources, config)
    return resources.gpu_share(predicted.reserved_bytes / MB, predicted.context_bytes / MB)


def memory_fraction(share: float, device_memory_mb: float) -> float | None:
    """The fraction of the device's memory its allocator may hold under `share`: the share less
    the CUDA context (`cuda.calibration`); None when the trial has whole cards (nothing to hold
    it to) or no GPU at all."""
    if share <= 0 or share >= 1:
        return None
    return max(0.0, share - calibration()["context_mb"] / device_memory_mb)


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
