"""A trial's whole run measured, where a person asks for it: its schedule on its data, every
epoch's evaluation and a checkpoint saved and restored after each, as the trial runs them.

On the CPU, under torch's allocator's reports (`workspace.memory_reports`): the trainer is built
and run inside one profiler session, and every allocation and free the CPU allocator reports is
replayed in order (the replay `allocations` makes of one step): the peak is the most bytes live
at once over the run, everything torch allocated included (kernels' internal buffers too). The
task, and with it the data set's host copy, is made before the session starts, so no figure
counts that copy (the prediction does not: it exists before the trial and outlives it). Named
ranges of the trace say what the run was doing at its peak: a training step, an evaluation, a
checkpoint.

On CUDA, the caching allocator's own peak: `torch.cuda.max_memory_allocated` (and
`max_memory_reserved`) from a reset before the trainer is built to the run's end.

It shares no counting code with the prediction (`predict`), which it is compared with; the CPU
heap's C++ objects, which do not come from torch's allocator, are in neither of its figures.
"""

from __future__ import annotations

import dataclasses
import gc
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, record_function

from ..config import TrialConfig
from ..train import Trainer, apply_environment, resolve_device, seed_everything
from .allocations import DEVICE_TYPES
from .workspace import exported_trace, memory_reports

RANGES = {  # what the run is doing: a range of the trace each
    "tune_lowmem.build": "building",
    "tune_lowmem.train_epoch": "training",
    "tune_lowmem.evaluation": "evaluation",
    "tune_lowmem.checkpoint": "checkpoint",
}
CHECKPOINT_FILE = "trainer.pt"


@dataclasses.dataclass(frozen=True)
class WholeRun:
    """A whole run's measured memory (see the module docstring), in bytes."""

    device: str
    peak_bytes: int  # the most bytes live at once (CUDA: max_memory_allocated)
    reserved_bytes: int | None  # CUDA: max_memory_reserved; None on the CPU
    peak_during: str  # training, evaluation, checkpoint (CUDA: unknown)
    epochs: int
    updates: int
    checkpoints: int  # saved and restored, one after each epoch
    events: int  # allocator reports replayed (CUDA: 0)


def measure_run(config: TrialConfig, checkpoints: bool = True) -> WholeRun:
    """Run `config`'s trial to the end of its schedule on its data, measuring its memory (module
    docstring); with `checkpoints`, a checkpoint saved and restored after every epoch."""
    apply_environment(config)
    device = resolve_device(config.device)
    seed_everything(config.seed)
    task = config.task_type()(config, device)
    next(iter(task.train_batches(0)), None)  # loads the data set's host copy: before the session
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, CHECKPOINT_FILE)
        if device.type == "cuda":
            return _on_cuda(config, task, device, path if checkpoints else None)
        return _on_cpu(config, task, path if checkpoints else None)


def _run(config: TrialConfig, task, path: Path | None) -> tuple[Trainer, int]:
    """The trial's trainer run to its end in named ranges; how many checkpoints it took."""
    with record_function("tune_lowmem.build"):
        trainer = Trainer(config, task=task)
    saved = 0

    def on_epoch(_metrics, trainer: Trainer) -> None:
        nonlocal saved
        if path is None:
            return
        with record_function("tune_lowmem.checkpoint"):
            trainer.save(path)  # as the trainable saves: then restores on a resume
            state = torch.load(path, map_location="cpu", weights_only=True)
            trainer.load_state_dict(state["trainer"])
            del state
        saved += 1

    trainer.train_epoch = _ranged(trainer.train_epoch, "tune_lowmem.train_epoch")
    evaluate = task.evaluate
    task.evaluate = _ranged(evaluate, "tune_lowmem.evaluation")
    try:
        trainer.run(on_epoch)
    finally:
        task.evaluate = evaluate
    return trainer, saved


def _ranged(function, name: str):
    def ranged(*args, **kwargs):
        with record_function(name):
            return function(*args, **kwargs)

    return ranged


def _on_cuda(config: TrialConfig, task, device: torch.device, path: Path | None) -> WholeRun:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    trainer, saved = _run(config, task, path)
    torch.cuda.synchronize(device)
    return WholeRun(
        device="cuda",
        peak_bytes=torch.cuda.max_memory_allocated(device),
        reserved_bytes=torch.cuda.max_memory_reserved(device),
        peak_during="unknown",
        epochs=trainer.epoch,
        updates=trainer.updates,
        checkpoints=saved,
        events=0,
    )


def _on_cpu(config: TrialConfig, task, path: Path | None) -> WholeRun:
    gc.collect()
    with memory_reports([ProfilerActivity.CPU]) as profiler:
        trainer, saved = _run(config, task, path)
    trace = exported_trace(profiler)
    ranges = sorted(
        (e["ts"], e["ts"] + e["dur"], RANGES[e["name"]])
        for e in trace
        if e.get("ph") == "X" and e.get("name") in RANGES
    )
    events = sorted(
        (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Addr"], e["args"]["Bytes"])
        for e in trace
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == DEVICE_TYPES["cpu"]
    )
    live: dict[int, int] = {}
    total = peak = 0
    peak_time = None
    for time, _, address, nbytes in events:
        if nbytes > 0:
            live[address] = nbytes
            total += nbytes
        else:
            total -= live.pop(address, 0)
        if total > peak:
            peak, peak_time = total, time
    during = [
        name for start, end, name in ranges if peak_time is not None and start <= peak_time <= end
    ]
    return WholeRun(
        device="cpu",
        peak_bytes=peak,
        reserved_bytes=None,
        peak_during=during[-1] if during else "building",
        epochs=trainer.epoch,
        updates=trainer.updates,
        checkpoints=saved,
        events=len(events),
    )
