"""A CUDA trial's run peak as its caching allocator will count it, predicted on any machine.

The searched run peak of a trial that runs on CUDA (`predict.predict` with a `CudaTarget`) is
the most bytes `torch.cuda.max_memory_allocated` will report over the trial. It is the dry run's
(the trial's own code on fake tensors, `predict.dry_run`, on this machine's GPU where there is
one, else on the CPU standing for it) with:

- every storage as the caching allocator hands it out: requests rounded up to 512 bytes
  (`allocated_size`; c10's caching allocator: ``kMinBlockSize = 512``, "all sizes are rounded
  to at least 512 bytes"), the difference reported apart as the rounding;
- the BLAS workspaces (`cuda_libraries.BlasRule`): cuBLAS's and cuBLASLt's per handle and stream
  for the roles whose products ran, kept from their first product on, or one per call where the
  torch release allocates them per call; probed on the card where this process has one
  (`cuda_libraries.probe_blas`), else by torch's rule for the trial's release, architecture
  (`CudaTarget.capability`) and settings (its CUBLAS_WORKSPACE_CONFIG);
- cuDNN's workspace at each convolution: probed on the card (`cuda_libraries.probe_cudnn`),
  else bounded by the trial's limit (its CUDNN_CONV_WSCAP_DBG), else unknown (the run
  peak then leaves it out and says so: `CudaPrediction.cudnn_bytes` is None).

Where the dry run stands on the CPU for a CUDA trial it takes the optimizer's multi-tensor step
as torch would choose it on CUDA (`torch_private.default_foreach`), counts no heap objects and no
CPU operator's workspace; its autocast follows the CPU's casting lists, not CUDA's (the amp
modes' activations may differ: the trial's own prediction, on its card, uses CUDA's).

Beside the run peak, outside the allocator's count: the CUDA context (`calibration`), and what
the allocator reserves from the card for that peak (`reserved_bytes`), which a share must hold
(`share`). Both come from `cuda_calibration.json`, which the device check writes from its
measurements on a card (benchmarks/gpu_check.py, part `context`); its figures say whether they
were measured, and where.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import TrialConfig
from ..outcome import MB, PREDICTED_CUDA_PARTS
from ..train import trial_environment
from .cuda_libraries import CUDNN, BlasRule, MiB, Release, probe_blas, probe_cudnn, release

# c10's caching allocator (c10/cuda/CUDACachingAllocator.cpp; c10/core/CachingDeviceAllocator.h
# from torch 2.8): every request rounded up to kMinBlockSize; requests up to kSmallSize come from
# kSmallBuffer segments, those under kMinLargeAlloc from kLargeBuffer ones, larger ones from a
# segment of their size rounded up to kRoundLarge
MIN_BLOCK = 512
SMALL_REQUEST = 1 << 20
SMALL_SEGMENT = 2 << 20
MEDIUM_REQUEST = 10 << 20
MEDIUM_SEGMENT = 20 << 20
LARGE_ROUNDING = 2 << 20
# the architecture a CUDA trial is predicted for when neither the caller nor this machine names
# one: Hopper's, whose cuBLAS workspace (32 MiB) is the largest any release gives
DEFAULT_CAPABILITY = (9, 0)
TORCH_RELEASE = release()  # this process's torch, which a sweep's trials share
CALIBRATION_FILE = Path(__file__).with_name("cuda_calibration.json")


def allocated_size(nbytes: int) -> int:
    """Bytes the allocator hands out for a request of `nbytes` (what `memory_allocated` counts)."""
    return 0 if nbytes <= 0 else MIN_BLOCK * math.ceil(nbytes / MIN_BLOCK)


def segment_size(nbytes: int) -> int:
    """Bytes of the segment a request takes from the card when no cached block can serve it."""
    size = allocated_size(nbytes)
    if size <= SMALL_REQUEST:
        return SMALL_SEGMENT
    if size < MEDIUM_REQUEST:
        return MEDIUM_SEGMENT
    return LARGE_ROUNDING * math.ceil(size / LARGE_ROUNDING)


def reserved_lower_bound(sizes: Iterable[int]) -> int:
    """The fewest bytes of segments that can hold blocks of these request sizes at once: small
    blocks packed into 2 MiB segments, medium ones into 20 MiB ones, large ones each their own."""
    small = medium = large = 0
    for nbytes in sizes:
        size = allocated_size(nbytes)
        if size == 0:
            continue
        if size <= SMALL_REQUEST:
            small += size
        elif size < MEDIUM_REQUEST:
            medium += size
        else:
            large += segment_size(size)
    packed = lambda total, segment: segment * math.ceil(total / segment)
    return packed(small, SMALL_SEGMENT) + packed(medium, MEDIUM_SEGMENT) + large


@functools.cache
def calibration() -> dict:
    """The figures a card's measurements give (`cuda_calibration.json`): ``context_mb``, the
    CUDA context and the kernels a trial loads, outside the allocator; ``reserved_per_allocated``,
    the most the allocator reserved per byte it held at its peak; ``source``, where they were
    measured (or that they are not yet)."""
    return json.loads(CALIBRATION_FILE.read_text())


@dataclass(frozen=True)
class CudaTarget:
    """The CUDA device a trial will run on, as its prediction needs it."""

    capability: tuple[int, int]  # compute capability (9, 0): its cuBLAS default
    version: Release = TORCH_RELEASE  # the trial's torch release: which rule it follows
    cublas: str | None = None  # the trial's CUBLAS_WORKSPACE_CONFIG (None: torch's default)
    cudnn_limit_mb: int | None = None  # the trial's cap on a convolution's workspace
    on_card: bool = False  # this process has the card: workspaces are probed on it

    def blas(self) -> BlasRule:
        """The BLAS workspaces' rule: probed on the card, else torch's for the release."""
        if self.on_card:
            probe = probe_blas(torch.device("cuda"))
            return BlasRule(
                cublas_bytes=probe.cublas_kept or probe.cublas_per_call,
                cublas_kept=probe.cublas_kept > 0,
                lt_bytes=probe.lt_kept,
                lt_sets_up_cublas=self.version < (2, 15),
            )
        return BlasRule.of(self.capability, self.version, self.cublas)

    def cudnn(self, calls: Iterable[tuple]) -> dict[tuple, int] | None:
        """Each convolution's workspace: probed on the card, else the limit; None: unknown."""
        calls = list(calls)
        if self.on_card:
            return probe_cudnn(calls, torch.device("cuda"))
        if self.cudnn_limit_mb is None:
            return None if calls else {}
        return dict.fromkeys(calls, self.cudnn_limit_mb * MiB)


def trial_target(
    config: TrialConfig, gpu: bool | None = None, capability: tuple[int, int] | None = None
) -> CudaTarget | None:
    """The CUDA device a trial of `config` runs on, or None for the CPU: device cuda, or auto
    where it gets a GPU (`gpu`: its resources ask for one; None: this machine has one). Its
    architecture: `capability`, else this machine's GPU, else `DEFAULT_CAPABILITY`; its
    workspace settings: the environment its techniques give it (`train.trial_environment`)
    over this process's, which the trial inherits."""
    here = torch.cuda.is_available()
    if config.device == "cpu" or (config.device == "auto" and not (here if gpu is None else gpu)):
        return None
    on_card = here and capability in (None, torch.cuda.get_device_capability())
    if capability is None:
        capability = torch.cuda.get_device_capability() if here else DEFAULT_CAPABILITY
    environment = {**os.environ, **trial_environment(config)}  # as the trial's process has it
    limit = environment.get("CUDNN_CONV_WSCAP_DBG", "")
    return CudaTarget(
        capability=tuple(capability),
        cublas=environment.get("CUBLAS_WORKSPACE_CONFIG"),
        cudnn_limit_mb=int(limit) if limit.isdigit() else None,
        on_card=on_card,
    )


@dataclass(frozen=True)
class CudaPrediction:
    """A CUDA trial's run peak as its allocator counts it, by part, in bytes (module docstring)."""

    run_peak_bytes: int  # the expected max_memory_allocated over the trial
    rounding_bytes: int  # of it: the allocator's 512-byte blocks beyond the tensors' bytes
    blas_bytes: int  # of it: BLAS workspaces, kept ones and the call's at the peak
    cudnn_bytes: int | None  # of it: cuDNN's at the peak; None: unknown here (left out)
    context_bytes: int  # beside it, outside the allocator: the CUDA context
    reserved_bytes: int  # what the allocator reserves from the card for that peak

    def parts(self) -> dict[str, int | None]:
        """Its parts by name, in bytes, as the store keeps them (`outcome.PREDICTED_CUDA_PARTS`)."""
        return {part: getattr(self, f"{part}_bytes") for part in PREDICTED_CUDA_PARTS}

    def to_mb(self) -> dict[str, float | None]:
        """Its parts in MB, named as `profile --json` prints them."""
        return {
            f"predicted_cuda_{part}_mb": None if nbytes is None else nbytes / MB
            for part, nbytes in self.parts().items()
        }


@dataclass(frozen=True)
class Moment:
    """One moment that may be the run's peak, beyond the held tensors: its most bytes alive
    without workspace, and for each noted call the most alive at its events."""

    peak: int
    at_calls: dict[tuple, int]

    def with_workspace(self, workspace: dict[tuple, int]) -> tuple[int, tuple | None]:
        """The moment's peak with each call's workspace, and the call at it (None: no call)."""
        best, at = self.peak, None
        for call, alive in self.at_calls.items():
            if alive + workspace.get(call, 0) > best:
                best, at = alive + workspace.get(call, 0), call
        return best, at


@dataclass(frozen=True)
class CudaRun:
    """What a dry run for a CUDA trial leaves for its allocator's view: for each moment (a step,
    the occasional work, an evaluation) its bytes beyond the held tensors, in blocks and exact,
    and the calls that take a library's workspace (`cuda_libraries.cuda_call`)."""

    held: tuple[int, int]  # weights, buffers, optimizer state: (in blocks, exact)
    moments: dict[str, tuple[Moment, Moment]]  # name -> (in blocks, exact)
    roles: frozenset[tuple[str, str]]  # (library, role) of every noted call


def cuda_prediction(run: CudaRun, target: CudaTarget) -> CudaPrediction:
    """The run's peak on `target` from a CUDA dry run's moments (module docstring)."""
    blas = target.blas()
    calls = {call for name in run.moments for call in run.moments[name][0].at_calls}
    cudnn = target.cudnn(c for c in calls if c[0] == CUDNN)
    workspace = {c: blas.per_call(c) for c in calls if c[0] != CUDNN} | (cudnn or {})
    kept = sum(map(allocated_size, blas.held(run.roles)))
    peaks = {}
    for name, (blocks, exact) in run.moments.items():
        peak, at = blocks.with_workspace(workspace)
        exact_peak, _ = exact.with_workspace(workspace)
        peaks[name] = (run.held[0] + peak, run.held[1] + exact_peak, at)
    peak, exact, at = max(peaks.values(), key=lambda p: p[0])
    at_call = 0 if at is None else workspace.get(at, 0)
    figures = calibration()
    run_peak = peak + kept
    return CudaPrediction(
        run_peak_bytes=run_peak,
        rounding_bytes=peak - exact,
        blas_bytes=kept + (at_call if at is not None and at[0] != CUDNN else 0),
        cudnn_bytes=None
        if cudnn is None
        else (at_call if at is not None and at[0] == CUDNN else 0),
        context_bytes=round(figures["context_mb"] * MB),
        reserved_bytes=math.ceil(run_peak * figures["reserved_per_allocated"]),
    )
