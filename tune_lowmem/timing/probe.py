"""The time of each distinct operator call on its device, measured once and kept.

A recorded call (`memory.calls`: the operator, each tensor's sizes, strides, dtype and device,
the other arguments) is run for real on zero tensors of the same description, on the trial's
device at the trial's thread count (`timers.steady`: a warm-up, then the median of a few
samples). Kernels do not read their inputs' values to choose a path, so zeros cost what the
step's tensors cost; two kinds of call are the exceptions:

- an operator whose output's size depends on its inputs' values (`torch.Tag.
  dynamic_output_shape`: a packed sparse layer's `repeat_interleave`, `nonzero`) would make
  another size from zeros, or refuse them: it is priced as its run on zeros, where it runs,
  plus writing the outputs the step's call made (their descriptions are recorded with it);
- a call whose fake tensors differ from the real ones in dtype: under a half-precision model
  the fake batch norm keeps its saved statistics in half precision where the real kernel keeps
  them in fp32, and the real backward refuses the fake's; a refused call is tried again with its
  one-dimensional half-precision tensors in fp32 (`as_real_statistics`);
- a call that cannot be made again (an object of torch's script classes among its arguments:
  a profiler range's record) or that the device refuses on zeros even so is not priced: `None`,
  and the prediction counts it at the framework's overhead alone.

Figures are kept in memory and on disk (`cache`), per device, thread count and torch version
(`device.Device`), so that a sweep times each call once.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from typing import Any

import torch

from ..memory.calls import NotMade, TensorSpec, real
from ..memory.workspace import HALF, computing_threads
from . import cache
from .device import Device
from .timers import CallTime, EventTimer, WallTimer, steady, timer_for

# what the probe cannot run (see the module docstring)
REFUSED = (NotMade, RuntimeError, ValueError, IndexError, NotImplementedError, TypeError)

Priced = tuple[tuple, Any]  # a call (`memory.calls.call_key`) and the outputs it made, if kept


def call_times(calls: Iterable[Priced], device: Device) -> dict[Priced, CallTime | None]:
    """Each call's `CallTime` on `device` (None: not priced), probing those not yet known."""
    wanted = set(calls)
    known = cache.section(device, "calls")
    unknown = [call for call in wanted if cache.text(call) not in known]
    if unknown:
        timer = timer_for(device.kind)
        with computing_threads(device.threads), torch.no_grad():
            found = {cache.text(call): probe(*call, timer) for call in unknown}
        cache.update(device, "calls", found)
    return {call: known[cache.text(call)] for call in wanted}


def probe(call: tuple, made: Any, timer: WallTimer | EventTimer) -> CallTime | None:
    """One call's steady time on zeros (see the module docstring)."""
    func, args, kwargs = call
    runs = None
    for described in (args, as_real_statistics(args)):
        try:
            real_args, real_kwargs = real(described), dict(real(kwargs))
        except NotMade:
            return None
        with contextlib.suppress(*REFUSED):
            runs = steady(functools.partial(func, *real_args, **real_kwargs), timer)
            break
    if made is None:
        return runs
    writes = steady(functools.partial(real, made), timer)
    return writes if runs is None else CallTime(*(a + b for a, b in zip(runs, writes)))


def as_real_statistics(args: tuple) -> tuple:
    """`args` with each one-dimensional half-precision tensor in fp32 (see the module
    docstring)."""
    return tuple(
        arg._replace(dtype=torch.float32)
        if isinstance(arg, TensorSpec) and len(arg.shape) == 1 and arg.dtype in HALF
        else arg
        for arg in args
    )
