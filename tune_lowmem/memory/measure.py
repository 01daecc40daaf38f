"""Measured training memory: one real `Trainer.train_step` on a random minibatch of real shape.

The trial's trainer is built as a real trial builds it, takes a warm-up step (so the optimizer
state exists, as at every step but the first; under a `StorageTracker`, because the first
operator a process dispatches through a Python mode allocates about 25 MB of torch's own, once),
and then one measured step, with the allocator's
count of bytes in use sampled after every operator by a `StorageTracker`:
- on a GPU, `torch.cuda.memory_allocated()`; `peak_bytes` is `torch.cuda.max_memory_allocated()`;
- on the CPU, the bytes glibc's malloc has handed out (`mallinfo2`), which is where PyTorch's CPU
  tensors live; where glibc is missing, the sizes of the storages the tracker saw instead.
The activation part is the most bytes in use at once, less what was in use before the step and
the gradients and optimizer state the step allocated so far (the tracker knows which storages
those are). Sampling at operator boundaries leaves a kernel's internal workspace out, as the
paper's accounting does; on a GPU `peak_bytes` includes it. Model and optimizer parts count the
trainer's real parameters, gradients and optimizer state with the paper's rules (`accounting`;
compressed weights as held). The minibatch exists before the step and is not counted in
the activation part, as in the prediction; the data set's host copy it refers to is counted in
no figure.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable, Iterable

import torch

from ..config import TrialConfig
from ..data.batch import batch_tensors, host_data_tensors
from ..train import Trainer
from . import accounting, stepping
from .report import MemoryReport
from .tracker import StorageTracker


def measure(
    config: TrialConfig, lengths: tuple[int, int] | None = None, update: int | None = None
) -> MemoryReport:
    """The memory and FLOPs of one real training step of `config` on its device. `lengths`: the
    translation task's synthetic (source, target) sentence lengths; `update`: the step's 0-based
    update in the schedule (`Trainer.seek`; e.g. one after which a sparse run rewires), rather
    than the one after the warm-up, and that step must update the weights."""
    trainer, batches = stepping.synthetic_trainer(config, lengths)
    device = trainer.device
    with StorageTracker():  # loads what a first dispatch through a Python mode allocates
        stepping.warm_up(trainer, batches)
    batch = stepping.ready(trainer, batches, update)
    existing = [*_held(trainer), *batch_tensors(batch)]
    host_data = host_data_tensors(batch)  # the data set's host copy: the tracker's, not counted
    probe = allocator_probe(device)
    gc.collect()  # before the peak is reset: garbage alive at the reset would stay in the peak
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    reads_heap = device.type != "cuda"  # glibc's heap, which holds the tracker's records too
    with _no_collection(), StorageTracker([*existing, *host_data], probe, reads_heap) as tracker:
        stepping.take(trainer, batch, update)
    held = _held(trainer)
    if probe is None:
        activation = tracker.peak(exclude=held)
        peak = _storage_bytes(existing) + tracker.peak()
    else:
        before = tracker.samples[0]
        held_new = tracker.curve(held, of=True)  # gradients (and any new state) alive so far
        activation = max(s - before - h for s, h in zip(tracker.samples, held_new, strict=True))
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
        else:
            peak = _storage_bytes(existing) + max(tracker.samples) - before
    model, optimizer = trainer.model, trainer.optimizer
    return MemoryReport(
        model_bytes=accounting.model_bytes(model),
        optimizer_bytes=accounting.held_gradient_bytes(model)
        + accounting.state_bytes(model, optimizer),
        activation_bytes=activation,
        flops_per_step=tracker.flops,
        source="measured",
        peak_bytes=peak,
    )


def allocator_probe(device: torch.device) -> Callable[[], int] | None:
    """A function returning the bytes the device's allocator has in use now, if there is one."""
    if device.type == "cuda":
        return functools.partial(torch.cuda.memory_allocated, device)
    return _malloc_in_use()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _malloc_in_use() -> Callable[[], int] | None:
    """glibc's bytes in use, small chunks (uordblks) plus directly mapped ones (hblkhd); None
    without glibc >= 2.33, or when another allocator serves PyTorch (an 8 MB tensor must show)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _Mallinfo2

    def in_use() -> int:
        info = mallinfo2()
        return info.uordblks + info.hblkhd

    before = in_use()
    probe = torch.empty(2**21)  # 8 MiB
    seen = in_use() - before >= probe.nbytes
    del probe
    return in_use if seen else None


@contextlib.contextmanager
def _no_collection():
    """Python's cyclic garbage collected before, not during, the measured step: a collection in
    the step frees what earlier work left (another trainer's tensors) and reads as the step
    using less than nothing (measured: 1.50 MB of activations where the tensors alone hold 1.75)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _held(trainer: Trainer) -> list[torch.Tensor]:
    """The tensors a trainer keeps between steps: parameters, gradients, buffers, optimizer state
    and what the techniques keep (`Technique.held_tensors`)."""
    model = trainer.model
    held = [*model.parameters(), *model.buffers()]
    held += [p.grad for p in model.parameters() if p.grad is not None]
    held += accounting.state_tensors(trainer.optimizer)
    for technique in trainer.techniques:
        held += technique.held_tensors()
    return held


def _storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`."""
    return sum({id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}.values())
