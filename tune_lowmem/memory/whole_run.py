"""A trial's whole run measured, where a person asks for it: its schedule on its data, every
epoch's evaluation and a checkpoint saved and restored after each, as the trial runs them.

On the CPU, under torch's allocator's reports (`workspace.memory_reports`): the trainer is built
and run inside one profiler session, and every allocation and free the CPU allocator reports is
replayed in order (the replay `allocations` makes of one step): the peak is the most bytes live
at once over the run, everything torch allocated included (kernels' internal buffers too). The
session records in cycles, one per piece of the run (its build, each step, each evaluation,
each checkpoint), each replayed as it ends, so a long run's trace is never held whole. The
task, and with it the data set's host copy, is made before the session starts, so no figure
counts that copy (the prediction does not: it exists before the trial and outlives it). The cycle the peak fell in says what the run was doing then: a
training step, an evaluation, a checkpoint.

On CUDA, the caching allocator's own peak: `torch.cuda.max_memory_allocated` (and
`max_memory_reserved`) from a reset before the trainer is built to the run's end.

It shares no counting code with the prediction (`predict`), which it is compared with; the CPU
heap's C++ objects, which do not come from torch's allocator, are in neither of its figures.
"""

from __future__ import annotations

import dataclasses
import gc
import tempfile
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, schedule

from ..config import TrialConfig
from ..train import Trainer, apply_environment, resolve_device, seed_everything
from .allocations import DEVICE_TYPES
from .workspace import exported_trace, memory_reports

CHECKPOINT_FILE = "trainer.pt"


@dataclasses.dataclass(frozen=True)
class WholeRun:
    """A whole run's measured memory (see the module docstring), in bytes."""

    device: str
    peak_bytes: int  # the most bytes live at once (CUDA: max_memory_allocated)
    reserved_bytes: int | None  # CUDA: max_memory_reserved; None on the CPU
    peak_during: str  # building, training, evaluation, checkpoint save and restore (CUDA: unknown)
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


def _run(config: TrialConfig, task, path: Path | None, done) -> tuple[Trainer, int]:
    """The trial's trainer run to its end; `done(what)` after each piece of it (its build, each
    training step, each evaluation, each checkpoint saved and restored). How many checkpoints
    it took."""
    trainer = Trainer(config, task=task)
    done("building")
    saved = 0

    def on_epoch(_metrics, trainer: Trainer) -> None:
        nonlocal saved
        if path is None:
            return
        trainer.save(path)  # as the trainable saves: then restores on a resume
        state = torch.load(path, map_location="cpu", weights_only=True)
        trainer.load_state_dict(state["trainer"])
        del state
        saved += 1
        done("checkpoint save and restore")

    trainer.train_step = _then(trainer.train_step, done, "training")
    evaluate = task.evaluate
    task.evaluate = _then(evaluate, done, "evaluation")
    try:
        trainer.run(on_epoch)
    finally:
        task.evaluate = evaluate
    return trainer, saved


def _then(function, done, what: str):
    """`function`, then `done(what)`."""

    def call(*args, **kwargs):
        result = function(*args, **kwargs)
        done(what)
        return result

    return call


def _on_cuda(config: TrialConfig, task, device: torch.device, path: Path | None) -> WholeRun:
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()  # what an earlier run left cached is not this run's reserve
    torch.cuda.reset_peak_memory_stats(device)
    trainer, saved = _run(config, task, path, lambda what: None)
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


class _Replay:
    """The allocator's reports replayed across the profiler's cycles, one cycle per piece of the
    run: the bytes live carry over from one cycle to the next (the session records each cycle
    back to back, so no report falls between them), the peak and what the run was doing."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.total = self.peak = self.events = 0
        self.doing, self.peak_during = "building", "building"

    def read(self, profiler) -> None:
        """One finished cycle's reports (`on_trace_ready`)."""
        reports = sorted(
            (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Addr"], e["args"]["Bytes"])
            for e in exported_trace(profiler)
            if e.get("name") == "[memory]" and e["args"].get("Device Type") == DEVICE_TYPES["cpu"]
        )
        for _, _, address, nbytes in reports:
            if nbytes > 0:
                self.live[address] = nbytes
                self.total += nbytes
            else:
                self.total -= self.live.pop(address, 0)
            if self.total > self.peak:
                self.peak, self.peak_during = self.total, self.doing
        self.events += len(reports)


def _on_cpu(config: TrialConfig, task, path: Path | None) -> WholeRun:
    replay = _Replay()
    gc.collect()
    # torch warns that a cycle without warm-up skews timings, and that each cycle's events are
    # cleared at its end: none is timed here, and each is replayed before it is cleared
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(warmup|clears events).*")
        cycles = schedule(wait=0, warmup=0, active=1)
        session = memory_reports(
            [ProfilerActivity.CPU], schedule=cycles, on_trace_ready=replay.read
        )
        with session as profiler:

            def done(what: str) -> None:
                replay.doing = what
                profiler.step()  # ends this piece's cycle (replayed now) and starts the next

            trainer, saved = _run(config, task, path, done)
            replay.doing = "after"
    return WholeRun(
        device="cpu",
        peak_bytes=replay.peak,
        reserved_bytes=None,
        peak_during=replay.peak_during,
        epochs=trainer.epoch,
        updates=trainer.updates,
        checkpoints=saved,
        events=replay.events,
    )
