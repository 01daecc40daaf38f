"""The built-in techniques' fields of `TrialConfig`, each technique's `SETTINGS` (its class lists
the same tuple), declared apart from their torch code so that the config and the store read them
without importing torch. `older_stores={}`: a field every store has had."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..validation import checked, choice, nonnegative_int, optional_positive_int
from .setting import Setting

MICROBATCH_MODES = ("true", "simulated")


@dataclass(frozen=True)
class MicrobatchConfig:
    """Microbatching: split each minibatch, one optimizer step per minibatch."""

    size: int | None = None  # examples or tokens per microbatch (the task's unit); None: off
    mode: str = (
        "true"  # true: sequential, gradients accumulated; simulated: BN over groups of the batch
    )

    def validate(self, prefix: str) -> None:
        optional_positive_int(self.size, f"{prefix}.size")
        choice(self.mode, MICROBATCH_MODES, f"{prefix}.mode")


# torch's CUBLAS_WORKSPACE_CONFIG: one or more ``:SIZE_KiB:COUNT`` pairs (torch's regex
# ``:([0-9]+):([0-9]+)``, aten/src/ATen/cuda/CublasHandlePool.cpp), as a whole value
CUBLAS_WORKSPACE_FORM = re.compile(r"(?::\d+:\d+)+")


@dataclass(frozen=True)
class CudaWorkspaceConfig:
    """The workspaces CUDA's libraries take beside a CUDA trial's tensors, set in the trial's
    process before CUDA starts (`techniques.cuda_workspace`); on the CPU they do nothing."""

    # cuBLAS's workspace per handle and stream, as CUBLAS_WORKSPACE_CONFIG: ``:SIZE_KiB:COUNT``
    # pairs, summed (":4096:8" is 32 MiB, ":16:8" 128 KiB, ":0:0" none); None: torch's default
    # (32 MiB on Hopper, 8 MiB + 128 KiB on most cards: `memory.cuda_libraries`)
    cublas: str | None = None
    # the most MiB a convolution's cuDNN workspace may take (cuDNN's CUDNN_CONV_WSCAP_DBG; 0:
    # none, algorithms that need none); None: cuDNN's heuristics choose, up to what is free
    cudnn_limit_mb: int | None = None

    def validate(self, prefix: str) -> None:
        if self.cublas is not None:
            form = isinstance(self.cublas, str) and CUBLAS_WORKSPACE_FORM.fullmatch(self.cublas)
            checked(
                self.cublas,
                bool(form),
                f"{prefix}.cublas",
                "CUBLAS_WORKSPACE_CONFIG's form, one or more :SIZE_KiB:COUNT pairs (e.g. "
                ":4096:8 or :16:8)",
            )
        if self.cudnn_limit_mb is not None:
            nonnegative_int(self.cudnn_limit_mb, f"{prefix}.cudnn_limit_mb")


# gradient checkpointing strategy; the task lists its strategies
CHECKPOINT = (Setting("checkpoint", str, "none", older_stores={}),)
MICROBATCH = (Setting("microbatch", MicrobatchConfig, older_stores={}),)
PRECISION = (
    # fp16/bf16: all storage in half, norms fp32; amp-*: fp32 masters
    Setting("precision", str, "fp32", older_stores={}),
    # bf16 only: stochastic rounds each weight update (unbiased; no extra state), kahan
    # carries what rounding lost to the next update (+2 bytes of state per half weight); both
    # hold the half weights and gradients in fp32 while the step runs; nearest as plain bf16
    Setting("precision_update", str, "nearest"),
)
# Adam tasks: param (the parameter's dtype); bf16 (lossy, fp32 weights only); int8 (lossy:
# 8-bit blockwise-quantized moments, after bitsandbytes)
ADAM_STATE = (Setting("adam_state", str, "param"),)
CUDA_WORKSPACE = (Setting("cuda_workspace", CudaWorkspaceConfig),)
FUSED_STEP = (
    # none; exact (the task's SGD applied per parameter in the backward pass); heavy-ball
    # (lossy: momentum without Nesterov, so microbatch gradients go straight into the
    # momentum buffer and no gradient buffer exists)
    Setting("fused_step", str, "none"),
    Setting("momentum_dtype", str, "param"),  # param: the parameter's; bf16 (lossy; fp32)
)
