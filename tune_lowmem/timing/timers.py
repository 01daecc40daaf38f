"""How one operator call is timed on its device, and what a call costs in a step.

On the CPU the host runs each kernel, so a call costs its wall time (`WallTimer`). On CUDA the
host only launches the kernel and runs ahead while the GPU works, so a call costs the longer of
its kernel (timed between two CUDA events, `EventTimer`) and the host's time to launch it, the
dispatcher and the framework's work around it included: small kernels are launch-bound.

Both timers take a call and how many times to run it back to back, and answer a `CallTime`: its
device's time and the host's, per call, and on the CPU the pages it touched for the first time
(minor page faults: memory the kernel gave the process for its outputs), whose cost depends on
the allocator's state, not on the call, and is priced apart (`faults`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

try:
    import resource
except ImportError:  # not a Unix: no page fault counts
    resource = None

SAMPLE_S = 1e-3  # a timed sample runs a short call this long, back to back
MOST_PER_SAMPLE = 1000
QUICK_S = 0.02  # a call under this is sampled `SAMPLES` times
SLOW_S = 0.5  # one over this, once (after its warm-up)
SAMPLES = 5


class CallTime(NamedTuple):
    """One call's seconds on its device and on the host (equal where the host runs it), and the
    pages it touched for the first time while timed (the CPU's; none on a GPU)."""

    device: float
    host: float
    faults: float = 0.0

    def cost(self, overhead: float, asynchronous: bool, page: float = 0.0) -> float:
        """The call's seconds in a step with `overhead` seconds of the framework's host work
        around it, less its page faults at `page` seconds each (a step's own are priced apart):
        the host's and the device's in turn, or, where the host runs ahead of an asynchronous
        device, the longer of the two."""
        if asynchronous:
            return max(self.device, self.host + overhead)
        return max(0.0, self.host - self.faults * page) + overhead


class WallTimer:
    """The host runs the kernel: a call's time is its wall time (the CPU), with the process's
    minor page faults meanwhile."""

    asynchronous = False

    def seconds(self, run: Callable[[], object], number: int) -> CallTime:
        faults = page_faults()
        started = time.perf_counter()
        for _ in range(number):
            run()
        wall = (time.perf_counter() - started) / number
        return CallTime(wall, wall, (page_faults() - faults) / number)


def page_faults() -> int:
    """The process's minor page faults so far (0 where the platform does not count them)."""
    if resource is None:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class EventTimer:
    """The device runs the kernel while the host goes on (CUDA): the device's time between two
    events recorded around the calls, and the host's time to issue them. `event` and
    `synchronize` are torch.cuda's by default (any classes of the same interface serve)."""

    asynchronous = True

    def __init__(self, event: Callable[..., object] | None = None, synchronize=None) -> None:
        self.event = event or torch.cuda.Event
        self.synchronize = synchronize or torch.cuda.synchronize

    def seconds(self, run: Callable[[], object], number: int) -> CallTime:
        self.synchronize()  # nothing queued before the first event
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        started = time.perf_counter()
        start.record()
        for _ in range(number):
            run()
        end.record()
        host = (time.perf_counter() - started) / number
        end.synchronize()
        return CallTime(start.elapsed_time(end) / 1e3 / number, host)


def timer_for(device: torch.device | str) -> WallTimer | EventTimer:
    """The timer of a device's type: CUDA's events on a GPU, the wall clock elsewhere."""
    return EventTimer() if torch.device(device).type == "cuda" else WallTimer()


def steady(run: Callable[[], object], timer: WallTimer | EventTimer) -> CallTime:
    """A call's steady-state time: once to warm up (a oneDNN primitive's creation, cuDNN's
    choice of algorithm, the allocator's first blocks), then the median of a few samples, each
    running a short call back to back for about `SAMPLE_S` (fewer samples of a slow call)."""
    timer.seconds(run, 1)
    first = timer.seconds(run, 1)
    slowest = max(first.device, first.host)
    if slowest >= SLOW_S:
        return first
    number = max(1, min(MOST_PER_SAMPLE, round(SAMPLE_S / max(slowest, 1e-9))))
    samples = [timer.seconds(run, number) for _ in range(SAMPLES if slowest < QUICK_S else 3)]
    return CallTime(*(statistics.median(values) for values in zip(*samples)))
