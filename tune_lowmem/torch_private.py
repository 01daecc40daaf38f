"""The only module that reaches into torch's underscore names, each because no public path exists.

- `FakeTensorMode`: tensors with shapes and dtypes but no data, which the memory prediction runs
  a training step on.
- `multiply_`: one multi-tensor kernel (`torch._foreach_mul_`) over many tensors, which the fp16
  gradient unscale needs. The public alternatives do not fit: `torch.amp.GradScaler` refuses
  fp16 gradients, and `torch.nn.utils.clip_grads_with_norm_` scales by max_norm / (norm + 1e-6)
  clamped to 1, which is not an exact division by the loss scale.
- `default_foreach`: whether torch's optimizers, left to choose, step with multi-tensor kernels
  (`torch.optim.optimizer._default_to_fused_or_foreach`). The memory prediction steps fake
  weights, which torch never chooses them for, so it asks on the real ones and says so (or, for
  a CUDA trial predicted without a GPU, applies the same rule to the device it will run on).
- `clear_blas_workspaces`: frees the BLAS workspaces torch keeps per handle and stream
  (`torch._C._cuda_clearCublasWorkspaces`), so probing them on a trial's card leaves none there.
- `engine_called`: whether an operator was called by autograd's engine itself (a backward pass
  runs: `torch._C._current_graph_task_id`; its Python entry, `torch.autograd.graph.
  _engine_run_backward`); the storage tracker models how the engine sums gradients.
- `in_backward`: whether a backward pass runs on this thread (`torch._C._current_graph_task_id`),
  which the time prediction's dry run notes of each call (the engine's work around it), and the
  CUDA memory prediction (a CUDA trial's backward runs on autograd's device thread, whose cuBLAS
  handle, and so whose workspace, is not the forward's).
- `decomposes`: whether an operator named in a profiler trace is CompositeImplicitAutograd (it
  runs as other operators); the allocator measurement tells a kernel's own temporaries from the
  outputs of the operators a composite one runs. torch exposes dispatch keys only in `torch._C`.
"""

from __future__ import annotations

import functools
import os
import types

import torch
import torch.autograd.graph
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = [
    "FakeTensorMode",
    "clear_blas_workspaces",
    "decomposes",
    "default_foreach",
    "engine_called",
    "in_backward",
    "multiply_",
]


def multiply_(tensors: list[torch.Tensor], factor: float) -> None:
    """tensor *= factor for every tensor, in as few kernels as their devices and dtypes allow
    (on the CPU it is the same per-tensor `mul_`; results are identical either way)."""
    if tensors:
        torch._foreach_mul_(tensors, factor)


def default_foreach(parameters: list[torch.Tensor], device_type: str | None = None) -> bool:
    """Whether an optimizer built with foreach=None steps `parameters` with multi-tensor kernels
    (on CUDA: yes; on the CPU: no); `device_type`: as it would were they on that device (the
    rule of `_default_to_fused_or_foreach`: every tensor of a plain type, on a device with
    multi-tensor kernels), for a CUDA trial predicted on a machine without a GPU."""
    from torch.optim.optimizer import _default_to_fused_or_foreach, _foreach_supported_types
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    if device_type is None:
        return _default_to_fused_or_foreach(parameters, differentiable=False)[1]
    supported = device_type in _get_foreach_kernels_supported_devices()
    return supported and all(type(p) in _foreach_supported_types for p in parameters)


def clear_blas_workspaces() -> None:
    """Free the cuBLAS and cuBLASLt workspaces torch keeps per handle and stream
    (`torch._C._cuda_clearCublasWorkspaces`, what torch's own tests call between cases): a probe
    of them leaves none behind, and the trial's first products take their own again."""
    torch._C._cuda_clearCublasWorkspaces()


_ENGINE_ENTRY = torch.autograd.graph._engine_run_backward.__code__
_TORCH_FILES = os.path.dirname(torch.__file__) + os.sep


def in_backward() -> bool:
    """Whether a backward pass (autograd's engine, or code it calls) runs on this thread."""
    return torch._C._current_graph_task_id() != -1


def engine_called(frame: types.FrameType | None) -> bool:
    """Whether the operator dispatched from `frame` (the Python frame that dispatched it) was
    called by autograd's engine itself: a backward pass runs on this thread and the nearest frame
    outside torch's own files is the engine's entry, or there is none (a device's engine thread);
    not by Python code in the pass, such as a custom Function's backward or a hook."""
    if not in_backward():
        return False
    while frame is not None:
        if frame.f_code is _ENGINE_ENTRY:
            return True
        if not frame.f_code.co_filename.startswith(_TORCH_FILES):
            return False
        frame = frame.f_back
    return True


@functools.cache
def decomposes(name: str) -> bool:
    """Whether the operator `name` ("aten::isfinite", as a profiler trace names it; its first
    overload) is CompositeImplicitAutograd: it runs as other operators."""
    namespace, _, op = name.partition("::")
    try:
        overload = getattr(getattr(torch.ops, namespace), op).overloads()[0]
    except (AttributeError, IndexError, RuntimeError):
        return False
    full = name if overload == "default" else f"{name}.{overload}"
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd")
    except RuntimeError:
        return False
