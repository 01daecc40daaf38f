"""The Ray Tune function trainable: the only place where Ray meets training.

One Tune trial trains one `TrialConfig` (a point of the search space with one seed):

1. if the store already holds this trial (its worker died after writing it, or the driver was
   killed before it heard), the stored result is reported again and nothing trains;
2. otherwise the `Trainer` runs the point (the searcher screened it by predicted memory before
   handing it out: see `screening`), resumed from `tune.get_checkpoint()` when Tune
   restarts the trial, and every epoch is reported with `tune.report`, with a checkpoint of the
   trainer's state once `resume_checkpoint_s` seconds have passed since the last one (never with
   the final epoch, whose durable record is the store row); the predicted seconds of an update,
   an evaluation and an epoch on the trial's device (`timing.predict_time`) and the measured
   memory of one real step
   (and the allocator's peak over a side run of a step and an evaluation batch) is reported
   beside the prediction, and the seconds the trial's updates, evaluations and epochs took on
   its device (`train.measured_times`) with every epoch;
3. the trial's row (and its epochs) lands in the store when it ends: completed, failed with
   the reason (an exception, a diverged loss, a config that is not valid), or infeasible when it
   ran out of memory (the point needs more than the device has: retrying it would fail the same
   way). A failure is the trial's result, not a crash: it is not retried, and the sweep goes on.
   A store write that fails (a full disk) is the storage's failure, not the trial's: the trial
   raises, stores nothing, and runs again when the sweep is resumed. So does an error met while
   the worker process exits under the trial (its driver died: `worker_exiting`). The row is
   written as soon as the trial ends, never waiting on Tune's snapshot: after a killed driver
   the store, not Tune's older snapshot, says which (point, seed) ran (`searcher`). A
   completed trial's final weights are kept beside its row (`store.model_file`), for
   `tune-lowmem export`.

Every result carries ``trial_status`` (running, completed, failed, infeasible) and every
objective key (None when unknown), so the searcher can tell a failure from a result
(`outcome.trial_result`).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from .. import store
from ..config import TrialConfig
from ..memory import MemoryReport
from ..memory.allocations import measured_run_peak
from ..memory.measure import measure
from ..memory.predict import predict
from ..memory.share import hold_to_share, peak_memory_mb, trial_share
from ..memory.stored import accounted
from ..outcome import (
    CUDA_MAX_RESERVED,
    MEMORY_OBJECTIVE,
    memory_columns,
    result_from_row,
    time_columns,
    trial_result,
)
from ..space import SearchSpace
from ..timing import TimePrediction, predict_time
from ..train import Trainer, apply_environment, measured_times, resolve_device

CHECKPOINT_FILE = "trainer.pt"
FULL_COLLECTION_EVERY = 64  # trials of a worker process between collections of its frozen objects
REASON_LIMIT = 500  # characters of an error message kept as the failure reason


def final_result(
    space: SearchSpace,
    status: str,
    metrics: Mapping[str, Any],
    outcome: Mapping[str, Any],
    reason: str | None = None,
) -> dict[str, Any]:
    """What a trial of `space` reports (`outcome.trial_result`); its outcome columns win over an
    epoch's own values of them in `metrics` (an epoch's seconds, kept in its row of epochs)."""
    return trial_result(space.objectives, status, metrics, outcome, reason)


def sweep_rows(space: SearchSpace, sweep: str) -> store.SweepRows:
    """What builds the store rows of `sweep`, a sweep of `space` (its sampler and objectives)."""
    return store.SweepRows(sweep, space.sampler.name, space.objectives)


def out_of_memory(error: BaseException) -> bool:
    """The allocator refused: torch's CUDA OOM, a CPU allocation that failed, a MemoryError."""
    text = str(error).lower()
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or any(
        phrase in text for phrase in ("out of memory", "can't allocate memory")
    )


def failure_reason(error: BaseException) -> str:
    """One line naming what went wrong; running out of memory is said so plainly."""
    text = " ".join(str(error).split()) or type(error).__name__
    prefix = "out of memory: " if out_of_memory(error) else ""
    return f"{prefix}{type(error).__name__}: {text}"[:REASON_LIMIT]


# ---- the trainable --------------------------------------------------------------------------


def train_trial(tune_config: dict[str, Any], space: SearchSpace, root: str, sweep: str) -> None:
    """Train one point with one seed under Ray Tune (see the module docstring)."""
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    torch.set_num_threads(space.resources.cpu)
    freeze_survivors()
    params = tune_config["params"]
    stored = _stored_row(root, sweep, trial_id)
    if stored is not None:
        tune.report(result_from_row(stored, space.objectives))
        return
    _Run(space, root, sweep, trial_id, tune_config["point"], params).train()


_trials_in_process = itertools.count()


def freeze_survivors() -> None:
    """Keep a trial's garbage collections to its own objects. Tune reuses a worker process
    for trial after trial (``reuse_actors``), which keeps what earlier trials cached (the memory
    prediction's dry runs, torch's fake-tensor dispatch cache), and every trial runs full
    collections (`memory.measure`, twice per trial) whose cost is the number of live objects:
    measured, a trial's CPU time grew by a quarter over its worker's first 200 trials. So what
    is alive as a trial starts is collected once and then frozen (`gc.freeze`: out of every
    later collection's sight); every `FULL_COLLECTION_EVERY` trials the frozen objects are
    unfrozen first, so that a cache entry dropped since (cyclic garbage) is still freed."""
    if next(_trials_in_process) % FULL_COLLECTION_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


class _ReportFailed(Exception):
    """Tune itself failed while a result was being reported: not the trial's failure."""


class _Run:
    """One trial's training: resume, train, report each epoch, store the outcome."""

    def __init__(
        self,
        space: SearchSpace,
        root: str,
        sweep: str,
        trial_id: str,
        point: int,
        params: Mapping[str, Any],
    ):
        self.space, self.root, self.sweep, self.trial_id, self.point = (
            space,
            root,
            sweep,
            trial_id,
            point,
        )
        self.params = params
        self.config: TrialConfig | None = None
        self.predicted: MemoryReport | None = None
        self.paper_csr: MemoryReport | None = None  # sparse weights as CSR (the paper's)
        self.measured: MemoryReport | None = None
        self.time: TimePrediction | None = None
        self.started_at = datetime.now(UTC)
        self.trainer: Trainer | None = None
        self.last_checkpoint = time.monotonic()
        self.node_id = _node_id()

    def train(self) -> None:
        from ray import tune

        try:
            self.config = self.space.trial_config(self.params)
            apply_environment(self.config)  # before CUDA starts: its libraries read it then
            self.predicted = predict(self.config)  # on the trial's own device, probed there
            self.paper_csr = accounted(self.config, "csr")
            self.time = predict_time(self.config)  # at the trial's threads, on its device
            share = trial_share(self.space.resources, self.config)  # what Ray was asked for
            hold_to_share(share, resolve_device(self.config.device))  # its OOM is its own
            self.trainer = Trainer(self.config)
            self._resume(tune.get_checkpoint())
            if self.measured is None:  # the step as the tracker sees it; a side run's step and
                # evaluation batch, as torch's allocator sees them (not the whole run)
                self.measured = dataclasses.replace(
                    measure(self.config), run_peak_bytes=measured_run_peak(self.config)
                )
            if self.trainer.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.trainer.device)
            self.trainer.run(self._on_epoch)
        except _ReportFailed as error:
            raise error.__cause__ from None
        except store.WriteFailed:
            raise
        except Exception as error:  # the trial's own failure: stored, reported, not retried
            if worker_exiting():  # torn down under the trial (its driver died): runs again
                raise
            if out_of_memory(error):  # infeasible at this memory on this device, told as such
                self._fail(f"{self._memory_reached()}{failure_reason(error)}", "infeasible")
            else:
                self._fail(failure_reason(error))

    def _resume(self, checkpoint) -> None:
        if checkpoint is None:
            return
        with checkpoint.as_directory() as folder:
            # on the host: loading copies each tensor into the trainer's own, one at a time
            state = torch.load(Path(folder, CHECKPOINT_FILE), map_location="cpu", weights_only=True)
        self.trainer.load_state_dict(state["trainer"])
        self.started_at = datetime.fromisoformat(state["started_at"])
        self.measured = MemoryReport(**state["measured"])

    def _outcome(self) -> dict[str, float | None]:
        """The predictions, the measured step, on a GPU the peaks the trial has reached, and the
        seconds its epochs took so far."""
        device = self.trainer.device if self.trainer is not None else torch.device("cpu")
        history = self.trainer.history if self.trainer is not None else []
        memory = memory_columns(self.predicted, self.measured, self.paper_csr)
        times = {**time_columns(self.time), **measured_times(history)}
        return {**memory, **peak_memory_mb(device), **times}

    def _memory_reached(self) -> str:
        """What an out-of-memory trial had predicted and reached, for its failure reason."""
        memory = self._outcome()
        names = {"predicted": MEMORY_OBJECTIVE, "reached": CUDA_MAX_RESERVED}
        said = [f"{k} {memory[n]:.1f} MB" for k, n in names.items() if memory[n] is not None]
        return "".join(f"{part}; " for part in said)

    def _on_epoch(self, metrics: dict[str, float], trainer: Trainer) -> None:
        from ray import tune

        final = trainer.task.finished(trainer.epoch, trainer.updates)
        extra = {
            "train_seconds": sum(row["epoch_seconds"] for row in trainer.history),
            "node_id": self.node_id,
        }
        if final:
            store.write_model(self.root, self.sweep, self.trial_id, trainer.model.state_dict())
            self._write("completed", {**metrics, **extra})
        status = "completed" if final else "running"
        result = final_result(self.space, status, {**metrics, **extra}, self._outcome())
        due = time.monotonic() - self.last_checkpoint >= self.space.resume_checkpoint_s
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = None
            if due and not final:
                trainer.save(Path(folder, CHECKPOINT_FILE), **self._state())
                checkpoint = tune.Checkpoint.from_directory(folder)
                self.last_checkpoint = time.monotonic()
            try:
                tune.report(result, checkpoint=checkpoint)
            except Exception as error:
                raise _ReportFailed() from error

    def _state(self) -> dict[str, Any]:
        """What a checkpoint keeps beside the trainer's state."""
        return {
            "started_at": self.started_at.isoformat(),
            "measured": dataclasses.asdict(self.measured),
        }

    def _write(self, status: str, metrics: Mapping[str, Any], reason: str | None = None) -> None:
        history = self.trainer.history if self.trainer is not None else []
        record = sweep_rows(self.space, self.sweep).row(
            self.trial_id,
            status,
            self._flat_config(),
            metrics,
            self._outcome(),
            failure_reason=reason,
            started_at=self.started_at,
            finished_at=datetime.now(UTC),
            epochs_completed=self.trainer.epoch if self.trainer is not None else 0,
            node_id=self.node_id,
            point=self.point,
        )
        store.write_trial(self.root, record, epochs=history)

    def _flat_config(self) -> dict[str, Any]:
        """The trial's config as stored; the space's base when the point's is not a valid one."""
        return self.config.to_flat() if self.config is not None else dict(self.space.base)

    def _fail(self, reason: str, status: str = "failed") -> None:
        from ray import tune

        history = self.trainer.history if self.trainer is not None else []
        last = {k: v for k, v in (history[-1] if history else {}).items() if _finite(v)}
        self._write(status, last, reason)
        tune.report(final_result(self.space, status, {}, self._outcome(), reason))


def worker_exiting() -> bool:
    """This worker process is exiting under the trial: when its driver dies Ray SIGTERMs the
    job's workers, whose main thread leaves with `sys.exit` while the trial's thread still runs,
    and the exit's handlers then tear down what it uses (torch's operators: "Tried to access the
    schema ..."). Python marks the main thread stopped before any exit handler runs. An error
    met then is the teardown's, not the trial's: stored as its failure, resume would keep it."""
    return not threading.main_thread().is_alive()


def _node_id() -> str:
    """The Ray node this trial runs on: stored with its row, reported with every epoch."""
    import ray

    return ray.get_runtime_context().get_node_id()


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _stored_row(root: str, sweep: str, trial_id: str) -> Mapping[str, Any] | None:
    if trial_id not in store.trial_ids(root, sweep):
        return None
    rows = store.read_trials(root, sweep)
    mine = rows[rows["trial_id"] == trial_id] if "trial_id" in rows else rows.iloc[:0]
    return mine.iloc[0].to_dict() if len(mine) else None  # an unreadable file: trained again
