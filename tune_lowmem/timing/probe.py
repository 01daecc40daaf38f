"""The time of each distinct operator call on its device, measured once and kept.

A recorded call (`memory.calls`: the operator, each tensor's sizes, strides, dtype and device,
the other arguments) is run for real on zero tensors of the same description, on the trial's
device at the trial's thread count, alone and among the others (`probe`: a warm-up, then the
median of a few rounds). Kernels do not read their inputs' values to choose a path, so zeros cost what the
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

import functools
import statistics
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..memory.calls import NotMade, TensorSpec, real
from ..memory.workspace import HALF, computing_threads
from . import cache
from .device import Device
from .timers import QUICK_S, SLOW_S, CallTime, EventTimer, WallTimer, timer_for

# what the probe cannot run (see the module docstring)
REFUSED = (NotMade, RuntimeError, ValueError, IndexError, NotImplementedError, TypeError)
ROUNDS = 5

Priced = tuple[tuple, Any]  # a call (`memory.calls.call_key`) and the outputs it made, if kept


def call_times(calls: Iterable[Priced], device: Device) -> dict[Priced, CallTime | None]:
    """Each call's `CallTime` on `device` (None: not priced), probing those not yet known."""
    wanted = set(calls)
    known = cache.section(device, "calls")
    unknown = sorted((call for call in wanted if cache.text(call) not in known), key=cache.text)
    if unknown:
        timer = timer_for(device.kind)
        with computing_threads(device.threads), torch.no_grad():
            found = probe(unknown, timer)
        cache.update(device, "calls", {cache.text(call): found[call] for call in unknown})
    return {call: known[cache.text(call)] for call in wanted}


def probe(calls: list[Priced], timer: WallTimer | EventTimer) -> dict[Priced, CallTime | None]:
    """The calls' times on zeros (see the module docstring), each timed alone in turn with the
    others, round after round, as a step runs each among others (a call repeated back to back
    finds its code, its inputs and the allocator's blocks where it left them): a first round
    warms up (a oneDNN primitive's creation, cuDNN's choice of algorithm), then `ROUNDS`
    rounds of one sample each (fewer for a slow call); each call's median."""
    made_again = {call: runnable(*call) for call in calls}
    first = {call: sample(parts, timer) for call, parts in made_again.items() if parts}
    samples: dict[Priced, list[CallTime]] = {call: [] for call in first}
    for round_ in range(ROUNDS):
        for call, warm_up in first.items():
            slowest = max(warm_up.device, warm_up.host)
            if round_ < (1 if slowest >= SLOW_S else 3 if slowest >= QUICK_S else ROUNDS):
                samples[call].append(sample(made_again[call], timer))
    return {
        call: CallTime(*map(statistics.median, zip(*samples[call]))) if call in samples else None
        for call in calls
    }


def sample(parts: list[Callable[[], Callable[[], object]]], timer) -> CallTime:
    """One timing of a call's parts, each on arguments made for it (zeros) just before."""
    times = [timer.seconds(make(), 1) for make in parts]
    return CallTime(*map(sum, zip(*times)))


def runnable(call: tuple, made: Any) -> list[Callable[[], Callable[[], object]]]:
    """What timing a call runs (see the module docstring), as makers of a ready call each: the
    call on zeros, where the device runs it (with its half-precision statistics in fp32 where
    it refuses the fake's), and writing the outputs it made, where they are kept; empty where
    neither can be made."""
    func, args, kwargs = call
    parts = []
    for described in (args, as_real_statistics(args)):
        try:
            ready = _ready(func, described, kwargs)
            ready()
        except REFUSED:
            continue
        parts.append(functools.partial(_ready, func, described, kwargs))
        break
    if made is not None:
        parts.append(functools.partial(functools.partial, real, made))
    return parts


def _ready(func, args: tuple, kwargs: tuple) -> Callable[[], object]:
    return functools.partial(func, *real(args), **dict(real(kwargs)))


def as_real_statistics(args: tuple) -> tuple:
    """`args` with each one-dimensional half-precision tensor in fp32 (see the module
    docstring)."""
    return tuple(
        arg._replace(dtype=torch.float32)
        if isinstance(arg, TensorSpec) and len(arg.shape) == 1 and arg.dtype in HALF
        else arg
        for arg in args
    )
