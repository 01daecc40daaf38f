"""Seconds of a trial's work on its device, the device's own work included.

On the CPU the kernels run in the calling thread, so the host's clock covers them. On CUDA the
host only queues kernels: a host clock read between two updates would time the queueing. There
each mark is a CUDA event recorded in the stream, and the seconds between two marks are the
device's (`torch.cuda.Event.elapsed_time`), read once the later mark has been reached; marks
are read at an epoch's end, so timing adds no wait for the device (the step already waits once
per update, reading its loss and finiteness).
"""

from __future__ import annotations

import time
from typing import Any

import torch


class HostClock:
    """Marks of the host's monotonic clock: the device is the CPU."""

    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        return end - start


class CudaClock:
    """Marks recorded as timing events in the device's current stream."""

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def seconds(self, start: Any, end: Any) -> float:
        end.synchronize()  # the device has done everything queued before the later mark
        return start.elapsed_time(end) / 1000.0


def clock(device: torch.device) -> HostClock | CudaClock:
    """The clock that times work on `device`."""
    return CudaClock(device) if device.type == "cuda" else HostClock()
