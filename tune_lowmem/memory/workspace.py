"""Operators' internal buffers (workspace) on the CPU, predicted by running the operator once.

A convolution on the CPU (oneDNN) reorders its weights, inputs and gradients into blocked layouts
and frees the reorders before it returns; batch norm's backward keeps per-channel scratch; a
matrix product in half precision converts its operands; an elementwise operator whose operands
differ in dtype (an fp16 gradient added into an fp32 Adam moment) converts the odd one into a
buffer of the common dtype first. These are bytes the allocator must find although no tensor
holds them after the call, so the dispatch-level tracker never sees them. They depend on the
kernel chosen for the call's sizes, strides, dtypes and threads, not on values. So for each
distinct such call in a dry run (`signature`), the call is run once for real on the CPU, on zero
tensors of the same sizes, strides and dtypes (`calls.real`), under torch.profiler's memory reports (its public
Chrome-trace export): its workspace is the most bytes live during the call beyond those live
when it returned (its inputs and outputs). A dry run adds each call's workspace to the bytes
alive at that call (`StorageTracker.peak`).

Calls are cached by signature and thread count; every call not yet known is probed in one
profiler session. A call the CPU refuses on the fake tensors' dtypes is counted as having none:
under autocast, batch norm's backward gets its saved statistics in bf16 from the fake kernel
where the real one keeps them in fp32 (a few bytes a channel). A GPU's workspace (cuBLAS, cuDNN)
is not the CPU's and is not probed here.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .calls import call_key, real

PROBED = frozenset(  # always
    {
        torch.ops.aten.convolution.default,
        torch.ops.aten.convolution_backward.default,
        torch.ops.aten.native_batch_norm_backward.default,
    }
)
PRODUCTS = frozenset(  # with an operand in half precision
    {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}
)
HALF = (torch.float16, torch.bfloat16)
_RANGE = "tune_lowmem.workspace_probe "
_known: dict[tuple, int] = {}  # signature -> workspace bytes
# kineto, the tracer under torch.profiler, logs to stderr at every session's start and stop
# (``USDT: ... profiler_start``) and, on a machine without a GPU, its failed device query
# (``gpuGetDeviceCount failed with code 35``): at every probe and measurement. It reads its
# least severity to print from KINETO_LOG_LEVEL once, when the process first profiles
# (libkineto_init in kineto's init.cpp: ``SET_LOG_SEVERITY_LEVEL(atoi(...))``); a level above
# every severity it has (VERBOSE 0 to USDT 5 in torch 2.14's) prints nothing. A level the user
# set is kept.
KINETO_QUIET = "99"


def signature(func, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple | None:
    """What decides the workspace of a call that has some on the CPU (a `PROBED` operator, a
    `PRODUCTS` one in half precision, a pointwise one whose operands of more than one element
    differ in dtype): the operator and its arguments as `calls.call_key` describes them, and the
    thread count; None for any other call, or one on another device."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not _has_workspace(func, tensors) or any(t.device.type != "cpu" for t in tensors):
        return None
    return (*call_key(func, args, kwargs), torch.get_num_threads())


def _has_workspace(func, tensors: list[torch.Tensor]) -> bool:
    if func in PROBED:
        return True
    if func in PRODUCTS:
        return any(t.dtype in HALF for t in tensors)
    if torch.Tag.pointwise in func.tags:
        return len({t.dtype for t in tensors if t.numel() > 1}) > 1
    return False


def workspace_bytes(signatures: Iterable[tuple]) -> dict[tuple, int]:
    """Each signature's workspace in bytes, probing those not yet known (see the module
    docstring)."""
    wanted = set(signatures)
    unknown = [s for s in wanted if s not in _known]
    if unknown:
        _known.update(_probe(unknown))
    return {s: _known[s] for s in wanted}


def memory_reports(activities: list[ProfilerActivity], **options: Any) -> profile:
    """A profiler session that records the allocators' reports on `activities` (`options`:
    `torch.profiler.profile`'s others, e.g. a schedule), printing nothing of its own
    (`KINETO_QUIET`): every profile the project takes is one of these."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
    return profile(activities=activities, profile_memory=True, **options)


def _probe(signatures: list[tuple]) -> dict[tuple, int]:
    """Run each call once under the profiler's memory reports; its workspace from the trace."""
    with memory_reports([ProfilerActivity.CPU]) as profiler:
        for index, (func, args, kwargs, threads) in enumerate(signatures):
            real_args, real_kwargs = real(args), dict(real(kwargs))
            with computing_threads(threads), torch.no_grad(), record_function(f"{_RANGE}{index}"):
                try:
                    out = func(*real_args, **real_kwargs)
                except RuntimeError:  # see the module docstring: counted as none
                    out = None
            del out, real_args, real_kwargs
    trace = exported_trace(profiler)
    memory = cpu_allocator_reports(trace)
    times = [ts for ts, _, _ in memory]
    found = {}
    for event in trace:
        name = event.get("name", "")
        if event.get("ph") != "X" or not name.startswith(_RANGE):
            continue
        start, end = event["ts"], event["ts"] + event["dur"]
        live, peak = 0, 0
        for _, _, nbytes in memory[bisect_left(times, start) : bisect_right(times, end)]:
            live += nbytes
            peak = max(peak, live)
        found[signatures[int(name.removeprefix(_RANGE))]] = max(0, peak - live)
    return found


@contextlib.contextmanager
def computing_threads(threads: int | None):
    """torch computing with `threads` CPU threads inside (None: as it is), as it was after."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def exported_trace(profiler: profile) -> list[dict]:
    """The events of a finished profiler session, read back from its public Chrome-trace export
    (where its memory reports are the events named ``[memory]``)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        profiler.export_chrome_trace(path)
        with open(path) as file:
            return json.load(file)["traceEvents"]


def cpu_allocator_reports(trace: list[dict]) -> list[tuple[float, int, int]]:
    """(time, event index, bytes: + allocated, - freed) of each report of torch's CPU allocator
    in an exported trace (`exported_trace`), in the order they happened."""
    return sorted(
        (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Bytes"])
        for e in trace
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    )
