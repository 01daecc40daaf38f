"""A configuration's training time, predicted before it trains, for the device it trains on.

The dry run that predicts its memory (`memory.predict.dry_run`) records each distinct operator
call of one update, with how many times the update runs it (`memory.calls.CallCounts`): every
microbatch's forward and backward passes (a pass that stands for several microbatches counted
that many times, `memory.predict.pass_weights`), the recomputation of a checkpointed backward
(it runs inside the recorded backward), the finiteness check, the unscale and the optimizer's
step; and those of one evaluation pass. Each call is priced by its own probed time on the
device (`probe`; the page faults it made while probed left out) plus the framework's overhead
around a call of its context (`overhead`), and on the CPU the pages of fresh memory the update
touches (`faults`: its allocations played on the allocator of a process that has imported
torch) at the device's cost per page:

    update     = sum over the update's calls of count x (probed time + overhead)
                 + pages touched first x seconds per page
    evaluation = evaluation batches x the same over one evaluation pass
    epoch      = updates per epoch x update + evaluation

Left out: a technique's occasional work (a sparse model's rewiring, every few hundred updates;
the measured update excludes it too), the training loop's few scalar operations per microbatch
(the loss summed for the log), data loading beyond what the task does on the device, and a
final epoch's test evaluation and beam search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..config import TrialConfig
from ..memory.calls import Recording
from ..memory.predict import dry_run, shape_key
from ..memory.synthetic import synthetic_task
from ..memory.workspace import computing_threads
from ..train import bound_techniques
from .device import Device
from .faults import faults_per_run, page_seconds
from .overhead import overheads
from .probe import call_times
from .timers import timer_for


@dataclass(frozen=True)
class TimePrediction:
    """A configuration's predicted seconds on `device`: one optimizer update (every microbatch's
    forward and backward, recomputation, the finiteness check, the unscale, the optimizer
    step), one evaluation of the validation split (None: the task has no evaluation pass or
    does not say how many batches it takes), and one epoch (its updates and its evaluation)."""

    update_seconds: float
    evaluation_seconds: float | None
    epoch_seconds: float
    updates_per_epoch: int
    evaluation_batches: int | None
    device: Device
    calls_per_update: int
    unpriced_per_update: int  # calls the probe could not run, priced at the overhead alone
    page_faults_per_update: float  # pages of fresh memory an update touches (`faults`)

    def to_dict(self) -> dict[str, float | int | str | None]:
        """The figures as a trial's ``time.`` columns name them, and what they were for."""
        return {
            "predicted_update_s": self.update_seconds,
            "predicted_evaluation_s": self.evaluation_seconds,
            "predicted_epoch_s": self.epoch_seconds,
            "predicted_device": self.device.describe(),
        }


def predict_time(
    config: TrialConfig, lengths: tuple[int, int] | None = None, threads: int | None = None
) -> TimePrediction:
    """`config`'s predicted time per update, evaluation and epoch on the device a trial of it
    runs on here (a GPU where the config asks for one and this machine has it, else the CPU),
    at `threads` CPU threads (default: this process's; a sweep's driver passes
    `resources.cpu`). `lengths`: the translation task's synthetic (source, target) sentence
    lengths."""
    lengths = None if lengths is None else tuple(lengths)
    with computing_threads(threads):
        # timed on the device this machine has: a CUDA trial on its GPU, else the CPU (a CUDA
        # trial's memory is predicted without one; its time is not)
        key = shape_key(config, lengths, cuda=None if torch.cuda.is_available() else False)
        run = dry_run(key, lengths)
        device = Device.of(key.device)
        update, calls, unpriced = priced(run.recording.calls, device)
        faults = step_faults(run.recording, device)
        update += faults * page_seconds(device)
        evaluation = None
        if run.evaluation_recording is not None:
            pass_seconds = priced(run.evaluation_recording.calls, device)[0]
            pass_faults = step_faults(run.evaluation_recording, device)
            evaluation = pass_seconds + pass_faults * page_seconds(device)
    updates, batches = schedule_counts(config, lengths)
    evaluation_seconds = None
    if evaluation is not None and batches is not None:
        evaluation_seconds = batches * evaluation
    return TimePrediction(
        update_seconds=update,
        evaluation_seconds=evaluation_seconds,
        epoch_seconds=updates * update + (evaluation_seconds or 0.0),
        updates_per_epoch=updates,
        evaluation_batches=batches,
        device=device,
        calls_per_update=calls,
        unpriced_per_update=unpriced,
        page_faults_per_update=faults,
    )


def priced(counts: Mapping[tuple, int], device: Device) -> tuple[float, int, int]:
    """Seconds of the counted calls on `device` (see the module docstring), their own page
    faults left out, how many calls they are, and how many of them the probe could not run."""
    framework, page = overheads(device), page_seconds(device)
    times = call_times({(call, made) for _, call, made in counts}, device)
    asynchronous = timer_for(device.kind).asynchronous
    seconds, unpriced = 0.0, 0
    for (context, call, made), count in counts.items():
        time = times[call, made]
        if time is None:
            unpriced += count
            seconds += count * max(0.0, framework[context])
        else:
            seconds += count * max(0.0, time.cost(framework[context], asynchronous, page))
    return seconds, sum(counts.values()), unpriced


def step_faults(recording: Recording, device: Device) -> float:
    """Pages a run of the recording touches first on `device` (none on a GPU, whose caching
    allocator keeps its blocks)."""
    return faults_per_run(recording) if device.kind == "cpu" else 0.0


def schedule_counts(config: TrialConfig, lengths: tuple[int, int] | None) -> tuple[int, int | None]:
    """A trial's updates per epoch and evaluation batches, as its task cuts them with its
    techniques bound (true microbatching sets an `auto` evaluation batch)."""
    task = synthetic_task(config, torch.device("cpu"), lengths)
    bound_techniques(config, task)
    return task.updates_per_epoch(), task.synthetic_evaluation_batches()
