"""The CUDA caching allocator's view of a training step, from the shapes the profiler knows.

The prediction (`predict`) counts tensor storage, compressed weights as held (a packed sparse
layer's values and index buffers). A CUDA step holds more: 512-byte rounding of every block, the
optimizer's multi-tensor temporaries, the BLAS workspaces, and the CUDA context outside the
allocator. What is modelled and what is bounded:

modelled (exact for the held tensors, by PyTorch's CUDA caching allocator's documented rules):
- `allocated_size`: every request is rounded up to a multiple of 512 bytes (at least 512);
- `segment_size`: a request the cache cannot serve takes a new segment from the card: requests of
  up to 1 MiB a 2 MiB segment (the small pool), requests under 10 MiB a 20 MiB one, larger ones
  their size rounded up to 2 MiB (`reserved_lower_bound` packs the held tensors into segments);
- the held tensors as the device stores them, as the dry run's stepped trainer holds them:
  parameters, buffers (a packed layer's indices among them), the gradients the step leaves (none
  where a fused step applied and dropped them) and the optimizer's state as its step made it
  (fp32 Adam moments of fp16 weights, 8-bit moments with their per-block scales), each block
  rounded;
- the optimizer step's multi-tensor temporaries: `foreach` SGD with weight decay and Adam(W)
  make one gradient-sized copy (a new list from `_foreach_add` / `_foreach_sqrt`), which lives
  while the activations are already freed, so the step's peak is the larger of the two;
- the BLAS workspaces (`blas_workspace_bytes`): torch allocates a cuBLAS workspace through the
  caching allocator once per cuBLAS handle and stream, and a handle belongs to a thread; a step
  runs its forward on its own thread and its backward on autograd's device thread, so it holds
  two (`BLAS_THREADS`). cuBLASLt, torch's path for a forward matrix product with a bias, takes a
  workspace of its own per handle and stream up to torch 2.11 and shares cuBLAS's from 2.12 on
  (`cublaslt_workspace_bytes`; as torch's handle pool and its change history read: the backward's
  products go through cuBLAS, so one is counted, a recomputed forward's within the margin).
  `probe_blas_workspaces` counts what torch really allocates on a card, which the GPU check and
  a GPU test compare with this.

bounded by `UNMODELLED_MARGIN` of the tensors (not modelled): cuDNN's per-call workspaces
(chosen by its heuristics at run time), the 512-byte rounding of the activations (the dry run
knows their total, not their count), the allocator's fragmentation beyond the packing bound.

reported separately, outside the allocator: the CUDA context (`CUDA_CONTEXT_MB`, a bound).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ..config import TrialConfig
from . import accounting
from .report import MB

CUDA_CONTEXT_MB = 600.0  # the CUDA context and kernels of one process, outside the allocator
MIN_BLOCK = 512  # every allocation is a multiple of this
SMALL_REQUEST = 1 << 20  # up to this, requests come from 2 MiB segments of the small pool
SMALL_SEGMENT = 2 << 20
MEDIUM_REQUEST = 10 << 20  # under this, a large-pool request takes a 20 MiB segment
MEDIUM_SEGMENT = 20 << 20
LARGE_ROUNDING = 2 << 20  # larger requests take a segment of their size rounded up to 2 MiB
UNMODELLED_MARGIN = 0.05  # of the predicted tensors: cuDNN workspaces, activation rounding


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


BLAS_THREADS = 2  # the step's own thread (forward) and autograd's device thread (backward)
LT_WORKSPACE_KIB = 1024  # cuBLASLt's default workspace (CUBLASLT_WORKSPACE_SIZE, in KiB)
UNIFIED_FROM = (2, 12)  # the torch release from which cuBLASLt shares cuBLAS's workspaces


def cublas_workspace_bytes(capability: tuple[int, int]) -> int:
    """torch's cuBLAS workspace per handle and stream on a card of this compute capability:
    CUBLAS_WORKSPACE_CONFIG's ``:SIZE_KIB:COUNT`` pairs summed when set, else its default,
    :4096:8 (32 MiB) from Hopper on, :4096:2:16:8 before."""
    pairs = re.findall(r":(\d+):(\d+)", os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""))
    if pairs:
        return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return 4096 * 1024 * 8 if capability[0] >= 9 else 4096 * 1024 * 2 + 16 * 1024 * 8


def lt_workspace_unified(version: str = torch.__version__) -> bool:
    """Whether cuBLASLt shares cuBLAS's workspaces (TORCH_CUBLASLT_UNIFIED_WORKSPACE when set,
    else torch's default: shared from `UNIFIED_FROM` on)."""
    setting = os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE")
    if setting is not None:
        return setting.strip().lower() in ("1", "true", "y", "yes", "on")
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return release >= UNIFIED_FROM


def cublaslt_workspace_bytes() -> int:
    """The workspace cuBLASLt takes per handle and stream beside cuBLAS's: none when shared, else
    CUBLASLT_WORKSPACE_SIZE KiB (1 MiB by default)."""
    if lt_workspace_unified():
        return 0
    size = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    return (int(size) if size.isdigit() else LT_WORKSPACE_KIB) * 1024


def blas_workspaces(capability: tuple[int, int]) -> list[int]:
    """The BLAS workspaces a training step holds, in bytes each: cuBLAS's, one per thread that
    multiplies matrices on the step's stream (`BLAS_THREADS`), and cuBLASLt's own, if any, of the
    forward's thread."""
    lt = cublaslt_workspace_bytes()
    return [cublas_workspace_bytes(capability)] * BLAS_THREADS + ([lt] if lt else [])


def blas_workspace_bytes(capability: tuple[int, int]) -> int:
    """The bytes the allocator hands out for `blas_workspaces`."""
    return sum(map(allocated_size, blas_workspaces(capability)))


def probe_blas_workspaces(device: torch.device) -> int:
    """Bytes torch's allocator hands BLAS workspaces for one step's matrix products on a fresh
    stream (workspaces are kept per handle and stream, so a new stream takes new ones): a linear
    layer with a bias forward and backward, every tensor of it freed again (CUDA only)."""
    stream = torch.cuda.Stream(device)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    with torch.cuda.stream(stream):
        x = torch.randn(64, 64, device=device, requires_grad=True)
        layer = nn.Linear(64, 64, device=device)
        layer(x).sum().backward()
        del x, layer
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device) - before


def foreach_temporary_copies(optimizer: torch.optim.Optimizer) -> int:
    """Gradient-sized temporaries of the optimizer's multi-tensor step, as torch.optim makes them."""
    decay = any(group.get("weight_decay", 0) for group in optimizer.param_groups)
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if decay else 0
    if isinstance(optimizer, torch.optim.AdamW):
        return 1
    if isinstance(optimizer, torch.optim.Adam):
        return 2 if decay else 1
    return 1  # another optimizer: one copy assumed, the rest within the margin


@dataclass(frozen=True)
class CudaPrediction:
    """A step's peak on a CUDA device, in bytes, by part (see the module docstring)."""

    held_bytes: int  # parameters, buffers, gradients, optimizer state: blocks rounded
    activation_bytes: int  # the dry run's activation peak
    temporary_bytes: int  # the optimizer step's multi-tensor temporaries (after the activations)
    workspace_bytes: int  # the BLAS workspaces (cuBLAS's, cuBLASLt's)
    margin_bytes: int  # the bound on what is not modelled
    reserved_bytes: int  # the fewest bytes of segments that hold the held tensors and the peak
    context_bytes: int  # the CUDA context: outside the allocator

    @property
    def allocated_bytes(self) -> int:
        """The expected `torch.cuda.max_memory_allocated` of a step."""
        peak = max(self.activation_bytes, self.temporary_bytes)
        return self.held_bytes + peak + self.workspace_bytes

    def to_mb(self) -> dict[str, float]:
        names = ("held", "activation", "temporary", "workspace", "margin", "reserved", "context")
        parts = {f"cuda_{n}_mb": getattr(self, f"{n}_bytes") / MB for n in names}
        return {**parts, "cuda_allocated_mb": self.allocated_bytes / MB}


def cuda_prediction(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    activation_bytes: int,
    capability: tuple[int, int],
) -> CudaPrediction:
    """The allocator's view of a step of `model` (real or fake tensors) with the dry run's
    activation peak: what `model` and `optimizer` hold after a step (parameters, buffers, the
    gradients that exist, the optimizer's state tensors) as the device holds them."""
    gradients = [accounting.tensor_bytes(p) for p in model.parameters() if p.requires_grad]
    held = [
        *map(accounting.tensor_bytes, model.parameters()),
        *map(accounting.tensor_bytes, model.buffers()),
        *(accounting.tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None),
        *map(accounting.tensor_bytes, accounting.state_tensors(optimizer)),
    ]
    held_bytes = sum(allocated_size(size) for size in held)
    temporary_bytes = foreach_temporary_copies(optimizer) * sum(map(allocated_size, gradients))
    workspaces = blas_workspaces(capability)
    peak = max(activation_bytes, temporary_bytes)
    return CudaPrediction(
        held_bytes=held_bytes,
        activation_bytes=activation_bytes,
        temporary_bytes=temporary_bytes,
        workspace_bytes=sum(map(allocated_size, workspaces)),
        margin_bytes=math.ceil(UNMODELLED_MARGIN * (held_bytes + peak)),
        reserved_bytes=reserved_lower_bound([*held, peak, *workspaces]),
        context_bytes=int(CUDA_CONTEXT_MB * MB),
    )


def predict_cuda(config: TrialConfig, capability: tuple[int, int] = (9, 0)) -> CudaPrediction:
    """`cuda_prediction` of a config, from the profiler's cached dry run (no GPU needed)."""
    from .predict import dry_run, occasional_work, shape_key

    run = dry_run(shape_key(config))
    activation = run.activation(occasional_work(config))[0]
    return cuda_prediction(run.model, run.optimizer, activation, capability)
