"""The workspaces CUDA's libraries take from torch's caching allocator in a training step, by
torch release and GPU architecture, each size with its source or probed on the card where the
trial runs. No tensor holds them, so no dry run sees them; the calls that take them are noted
in the dry run (`cuda_call`) and their bytes added here.

cuBLAS (matrix products: `mm`, `bmm`, `addmm` without a vector bias, ...), read in torch's
aten/src/ATen/cuda/CublasHandlePool.cpp across releases:
- the size: `CUBLAS_WORKSPACE_CONFIG`'s ``:SIZE_KiB:COUNT`` pairs summed when it is set
  (`parseChosenWorkspaceSize`, whose regex ``:([0-9]+):([0-9]+)`` torch has kept since
  pytorch#83461), else the default ``:4096:2:16:8`` (8 MiB + 128 KiB), 32 MiB on compute
  capability 9.x (pytorch#89027, re-landed as #91564 in January 2023: torch 2.0), and on 10.x
  and 12.x from torch 2.12 (pytorch#175344, merged 19 February 2026, as 2.11's branch was cut:
  read as 2.12's; 11.x joins them in the 2.15 line);
- how long it lives: one per cuBLAS handle and stream, allocated at a thread's first product on
  a stream and kept for the process's life (`cublas_handle_stream_to_workspace`, since #83461),
  through torch 2.14 (the installed 2.14.1's libtorch_cuda.so has no TORCH_CUBLAS_WORKSPACE_CACHE);
  from 2.15 one per call, freed as it returns, unless TORCH_CUBLAS_WORKSPACE_CACHE=1 keeps them
  (torch 2.15's "CUDA Environment Variables" page and its CublasHandlePool.cpp:
  `getCurrentCUDABlasHandleWithWorkspace`);
- a handle belongs to a thread: a step's forward runs on the trial's thread and its backward on
  autograd's device thread, so the workspaces are per role (`FORWARD`, `BACKWARD`) of the calls.

cuBLASLt (torch's path for a product with a vector bias, `addmm` with a 1-D `self`):
- its own workspace of CUBLASLT_WORKSPACE_SIZE KiB, 1024 by default (pytorch#73439, 2022;
  #120925 raised it to 4 MiB on large Ampere cards and 32 MiB from Hopper on in March 2024 and
  was backed out a week later by #121393; #145130 of January 2025 says the Lt size "previously
  smaller than cuBLAS's ... due to downstream OOMs, see also #120925"), per handle and stream
  from #156495 (June 2025);
- shared with cuBLAS's (none of its own) where torch unifies them: TORCH_CUBLASLT_UNIFIED_WORKSPACE
  set true, and by default from torch 2.12 (#168175, #175879: merged 2 March 2026, after 2.11's
  cut) through 2.14; from 2.15 only while workspaces are cached (`unified_cublas_and_lt_workspaces`
  is false without TORCH_CUBLAS_WORKSPACE_CACHE);
- through 2.14 getting the Lt handle sets the cuBLAS handle up (its workspace included), so a
  role with Lt products holds a cuBLAS workspace too.

cuDNN (convolutions): a workspace per call, chosen by cuDNN's heuristics for the call's shapes
among the plans whose workspace the caching allocator can still give (aten/src/ATen/native/
cudnn/Conv_v8.cpp: `run_conv_plan` allocates `plan.getWorkspaceSize()` for the call;
`try_configs` moves to the next plan on an out-of-memory error), capped by cuDNN's
CUDNN_CONV_WSCAP_DBG (MiB) where the trial sets it (torch's "CUDA Environment Variables" page:
"used to set the workspace configuration for cuDNN per allocation"). It depends on the card, the
cuDNN release and the heuristics, none of which a source gives: on the card it is probed, each
distinct call once (`probe_cudnn`); elsewhere it is bounded by the trial's limit, or unknown.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..torch_private import clear_blas_workspaces, in_backward
from .calls import call_key, real

MiB = 1 << 20
FORWARD, BACKWARD = "forward", "backward"  # the thread a call runs on, and so its handle
CUBLAS, CUBLASLT, CUDNN = "cublas", "cublaslt", "cudnn"
BLAS_PRODUCTS = frozenset(
    {
        torch.ops.aten.mm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.baddbmm.default,
        torch.ops.aten.addbmm.default,
        torch.ops.aten.mv.default,
        torch.ops.aten.addmv.default,
    }
)
CONVOLUTIONS = frozenset(
    {torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default}
)
CUBLAS_SETTING = re.compile(r"(?::\d+:\d+)+")  # torch's ``:SIZE:COUNT`` pairs, as a whole value
DEFAULT_CUBLAS = 4096 * 1024 * 2 + 16 * 1024 * 8  # :4096:2:16:8
LARGE_CUBLAS = 4096 * 1024 * 8  # :4096:8, 32 MiB
DEFAULT_LT_KIB = 1024
Release = tuple[int, int]


def release(version: str = torch.__version__) -> Release:
    """(major, minor) of a torch version string ("2.14.1+cu130" -> (2, 14))."""
    major, minor = re.findall(r"\d+", version)[:2]
    return int(major), int(minor)


def cublas_setting_bytes(setting: str) -> int:
    """The bytes a CUBLAS_WORKSPACE_CONFIG value asks for: its pairs' SIZE KiB x COUNT summed."""
    return sum(
        int(size) * 1024 * int(count) for size, count in re.findall(r":(\d+):(\d+)", setting)
    )


def cublas_workspace_bytes(
    capability: tuple[int, int], version: Release, setting: str | None = None
) -> int:
    """cuBLAS's workspace on a card of `capability` under torch `version`: `setting` (a
    CUBLAS_WORKSPACE_CONFIG value) when given, else torch's default there (module docstring)."""
    if setting:
        return cublas_setting_bytes(setting)
    large = capability[0] == 9 or (capability[0] in (10, 12) and version >= (2, 12))
    large |= capability[0] == 11 and version >= (2, 15)
    return LARGE_CUBLAS if large else DEFAULT_CUBLAS


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    value = environ.get(name)
    return None if value is None else value.strip().lower() in ("1", "true", "y", "yes", "on")


@dataclass(frozen=True)
class BlasRule:
    """How a torch release keeps the BLAS workspaces (module docstring)."""

    cublas_bytes: int  # a cuBLAS workspace
    cublas_kept: bool  # per handle and stream for the process's life; else one per call
    lt_bytes: int  # cuBLASLt's own per handle and stream; 0 where it shares cuBLAS's
    lt_sets_up_cublas: bool  # a role with Lt products holds a cuBLAS workspace too

    @classmethod
    def of(
        cls,
        capability: tuple[int, int],
        version: Release,
        setting: str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> BlasRule:
        """The rule torch `version` follows on a card of `capability` with `setting` as
        CUBLAS_WORKSPACE_CONFIG and `environ`'s other variables torch reads."""
        kept = version < (2, 15) or bool(_flag(environ, "TORCH_CUBLAS_WORKSPACE_CACHE"))
        unified = _flag(environ, "TORCH_CUBLASLT_UNIFIED_WORKSPACE")
        if unified is None:
            unified = (2, 12) <= version < (2, 15) or (version >= (2, 15) and kept)
        unified &= kept
        size = environ.get("CUBLASLT_WORKSPACE_SIZE", "")
        lt = (int(size) if size.isdigit() else DEFAULT_LT_KIB) * 1024
        return cls(
            cublas_bytes=cublas_workspace_bytes(capability, version, setting),
            cublas_kept=kept,
            lt_bytes=0 if unified else lt,
            lt_sets_up_cublas=version < (2, 15),
        )

    def held(self, roles: Iterable[tuple[str, str]]) -> list[int]:
        """The workspaces kept for the process's life once calls of these (library, role) pairs
        have run: a cuBLAS one per role with products (when kept), cuBLASLt's own per role with
        Lt products."""
        roles = set(roles)
        held = []
        for role in (FORWARD, BACKWARD):
            cublas = (CUBLAS, role) in roles
            lt = (CUBLASLT, role) in roles
            if self.cublas_kept and (cublas or (lt and self.lt_sets_up_cublas)):
                held.append(self.cublas_bytes)
            if lt and self.lt_bytes:
                held.append(self.lt_bytes)
        return held

    def per_call(self, call: tuple) -> int:
        """A BLAS call's workspace that lives only while it runs: cuBLAS's where it is not kept."""
        return self.cublas_bytes if call[0] == CUBLAS and not self.cublas_kept else 0


def cuda_call(func, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple | None:
    """The note a CUDA trial's dry run keeps of a call that takes a library's workspace: (library,
    role) for a matrix product, (CUDNN, role, the call as `calls.call_key` describes it: its
    operator and each argument's sizes, strides, dtype and device) for a convolution; None for
    any other call."""
    role = BACKWARD if in_backward() else FORWARD
    if func in BLAS_PRODUCTS:
        bias = args[0] if func is torch.ops.aten.addmm.default else None
        vector_bias = isinstance(bias, torch.Tensor) and bias.dim() == 1
        lt = vector_bias and kwargs.get("beta", 1) == 1
        return (CUBLASLT if lt else CUBLAS, role)
    if func in CONVOLUTIONS:
        return (CUDNN, role, *call_key(func, args, kwargs))
    return None


_cudnn_known: dict[tuple, int] = {}  # a convolution's note -> its workspace on this card


def probe_cudnn(calls: Iterable[tuple], device: torch.device) -> dict[tuple, int]:
    """Each convolution's workspace on this process's card: the call run once on zero tensors of
    its layout, the most bytes the allocator held during it beyond what it held after (its
    outputs freed too); cached per note for the process. cuDNN chooses by the call's layout,
    the card, the cuDNN release and CUDNN_CONV_WSCAP_DBG, all of which the trial's own card and
    process have, so it is probed where the trial runs."""
    for call in set(calls) - set(_cudnn_known):
        _, _, func, args, kwargs = call
        real_args, real_kwargs = real(args), dict(real(kwargs))  # on the card: its device type
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.no_grad():
            out = func(*real_args, **real_kwargs)
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        outputs = torch.cuda.memory_allocated(device) - before
        del out, real_args, real_kwargs
        _cudnn_known[call] = max(0, peak - before - outputs)
    return {call: _cudnn_known[call] for call in calls}


@dataclass(frozen=True)
class BlasProbe:
    """What torch allocates for BLAS workspaces on this process's card, by kind (bytes)."""

    cublas_kept: int  # kept after a product on a fresh stream (0 where each call has its own)
    cublas_per_call: int  # held during a product beyond its output, freed after it
    lt_kept: int  # kept beyond cuBLAS's after a product with a vector bias (cuBLASLt's own)


@functools.cache
def probe_blas(device: torch.device) -> BlasProbe:
    """The BLAS workspaces of a fresh stream on this thread (workspaces are kept per handle and
    stream, so a new stream takes new ones): a product, then one with a vector bias, each
    output freed; then every kept workspace freed (`torch_private.clear_blas_workspaces`), so the
    probe leaves the trial's card as it found it. Once per process; CUDA only."""
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        a, b = torch.zeros(64, 64, device=device), torch.zeros(64, 64, device=device)
        bias = torch.zeros(64, device=device)
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = torch.mm(a, b)
        output = out.untyped_storage().nbytes()
        del out
        torch.cuda.synchronize(device)
        during = torch.cuda.max_memory_allocated(device) - base - output
        kept = torch.cuda.memory_allocated(device) - base
        out = torch.addmm(bias, a, b)
        del out
        torch.cuda.synchronize(device)
        lt = torch.cuda.memory_allocated(device) - base - kept
        del a, b, bias
    clear_blas_workspaces()
    return BlasProbe(kept, max(0, during - kept), lt)
