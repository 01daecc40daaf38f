"""The step's allocations played on the host's allocator: how many pages the step touches for
the first time (minor page faults).

Which requests glibc serves from fresh memory depends on what the process freed before (its
threshold for a fresh mapping, `mmap`, rises to the largest such block freed, up to 32 MiB, and
it gives the heap's top back when free space there passes twice that), so each recording is
played in a process in a known state: one that has imported torch, as a trial has, and done
nothing else. `serve` is that process (`faults.faults_per_run` starts it, running this file as a
script): for each recording it reads from stdin, one JSON line {"storages": [[first event, gone
event or null (alive at the end), bytes], ...], "segments": [[first event, weight], ...],
"runs": n}, it forks a child that plays it (`play`) and answers the child's count on stdout,
and so stays as it was. `play` allocates and frees each storage at its events as torch's CPU
allocator does (`posix_memalign`, 64-byte aligned), writing every byte as a kernel writes its
output, and plays the whole `runs` times, each segment (a pass) as many times as it stands for
microbatches (at most `REPEATS`, the last repetition's faults counted for the rest). A storage
alive at the end is freed when the next run begins, as a training step's gradients are by the
next one's `zero_grad`. The median of the runs' faults after the first (which grows the heap) is
the answer: the same allocations fault more or less from one run to the next, as a trial's steps
do.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import statistics
import sys

REPEATS = 3


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def play(storages: list[list[int]], segments: list[list[int]], runs: int) -> float:
    libc = ctypes.CDLL(None)
    libc.posix_memalign.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    end = max((max(born, gone or 0) for born, gone, _ in storages), default=0) + 1
    starts = [first for first, _ in segments] + [end]
    live: dict[int, ctypes.c_void_p] = {}

    def allocate(index: int) -> None:
        pointer, size = ctypes.c_void_p(), storages[index][2]
        libc.posix_memalign(ctypes.byref(pointer), 64, max(size, 1))
        ctypes.memset(pointer, 0, size)
        live[index] = pointer

    def release(index: int) -> None:
        libc.free(live.pop(index))

    per_run = []
    for _ in range(runs):
        for index in list(live):  # the last run's gradients, dropped by the next zero_grad
            release(index)
        counted = 0.0
        for (first, weight), last in zip(segments, starts[1:], strict=True):
            # a storage born and gone within the pass is made again by each of its repetitions
            born_here = [i for i, (born, _, _) in enumerate(storages) if first <= born < last]
            gone_here = [
                i
                for i, (_, gone, _) in enumerate(storages)
                if gone is not None and first <= gone < last
            ]
            inner = set(born_here) & set(gone_here)
            events = sorted(
                [(storages[i][1], 0, i) for i in gone_here]
                + [(storages[i][0], 1, i) for i in born_here]
            )
            repeats = min(weight, REPEATS)
            for repetition in range(repeats):
                before = faults()
                for _, allocation, index in events:
                    if repetition and index not in inner:
                        continue
                    if allocation:
                        allocate(index)
                    elif index in live:
                        release(index)
                made = faults() - before
                counted += made * (1 + (weight - repeats if repetition == repeats - 1 else 0))
        per_run.append(counted)
    return statistics.median(per_run[1:] or per_run)  # the first run grows the heap


def serve() -> None:
    """Answer each recording on stdin with its faults, played in a child forked from this
    process, which imports torch first and then allocates nothing of its own."""
    import torch  # noqa: F401  (the allocator's state a trial's process starts from)

    for line in sys.stdin:
        recording = json.loads(line)
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read)
            counted = play(recording["storages"], recording["segments"], recording["runs"])
            os.write(write, repr(counted).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            counted = answer.read()
        os.waitpid(child, 0)
        print(counted, flush=True)


if __name__ == "__main__":
    serve()
