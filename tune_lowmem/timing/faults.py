"""Pages a step touches for the first time: what the host's memory costs beside the kernels.

On the CPU a kernel's output is memory the allocator takes from the operating system when it has
none free: glibc serves a request from a fresh mapping (`mmap`) when it is at least its
threshold, which starts at 128 KiB and rises to the largest such block freed (up to 32 MiB),
and gives the heap's top back when free space there passes twice that. Each page of fresh
memory costs a minor page fault (the kernel finds and zeroes a page) on first write, several
microseconds, so a step whose largest activations keep coming from fresh mappings spends a
large share of its time there (a WideResNet step at batch 50 on this project's CPU: tens of
thousands of pages). Which requests fault depends on the allocator's state, not on the call, so
the probe's kernel times leave out the faults they made (`timers.CallTime`), and the step's are
counted by playing the dry run's allocations (`memory.calls.Recording`) on the allocator of a
process that has imported torch and done nothing else, as a trial's starts (`replay`), and priced at the device's cost per page, measured here (`page_seconds`:
first writes to fresh memory against rewrites of the same bytes). A GPU's caching allocator
keeps its blocks: a step there faults none.

A trial whose earlier work freed a block larger than the step's own (up to 32 MiB: decoding a
data set, say) serves more of the step from its heap and faults less than the replay's process.
"""

from __future__ import annotations

import functools
import json
import statistics
import subprocess
import sys
import time
import weakref
from pathlib import Path

import torch

from ..memory.calls import Recording
from ..memory.workspace import computing_threads
from . import cache, replay
from .device import Device
from .timers import page_faults

PAGE = "page"  # the overhead section's key of the seconds per page
BYTES = 64 * 2**20  # above glibc's largest threshold for fresh memory: always a fresh mapping
SAMPLES = 5
RUNS = 6  # the replay's runs of the step: the median of the last five is a steady step's
_counted: weakref.WeakKeyDictionary[Recording, float] = weakref.WeakKeyDictionary()


def page_seconds(device: Device) -> float:
    """Seconds a first write to one page of fresh memory costs on `device` beyond a rewrite
    (none on a GPU), measured the first time it is asked for and cached."""
    if device.kind != "cpu":
        return 0.0
    known = cache.section(device, "overhead")
    if PAGE not in known:
        with computing_threads(device.threads):
            cache.update(device, "overhead", {PAGE: measure_page()})
    return known[PAGE]


def measure_page() -> float:
    """The median over `SAMPLES` of (taking `BYTES` of fresh memory, writing it and giving it
    back - rewriting as many bytes) / the pages that faulted: a page a step takes fresh is
    given back when its storage is freed (unmapped, or trimmed from the heap's top)."""
    written = torch.zeros(BYTES, dtype=torch.uint8)
    samples = []
    for _ in range(SAMPLES):
        before, started = page_faults(), time.perf_counter()
        fresh = torch.empty(BYTES, dtype=torch.uint8).zero_()
        del fresh
        first = time.perf_counter() - started
        touched = page_faults() - before
        started = time.perf_counter()
        written.zero_()
        again = time.perf_counter() - started
        if touched:
            samples.append(max(0.0, first - again) / touched)
    return statistics.median(samples) if samples else 0.0


def faults_per_run(recording: Recording) -> float:
    """The pages one run of the recorded code (an update, or an evaluation pass) touches first,
    in the steady state of a process that has imported torch (`replay`)."""
    if recording not in _counted:
        server = _server()
        payload = {"storages": recording.storages, "segments": recording.segments, "runs": RUNS}
        server.stdin.write(json.dumps(payload) + "\n")
        server.stdin.flush()
        _counted[recording] = float(server.stdout.readline())
    return _counted[recording]


@functools.cache
def _server() -> subprocess.Popen:
    """The process that plays recordings (`replay.serve`), started once; it ends with this one
    (its stdin closes)."""
    return subprocess.Popen(
        [sys.executable, str(Path(replay.__file__))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
