"""One training loop for every task: build, apply the techniques, step, evaluate, call back.

Runs as a plain function without Ray: `Trainer(config).run(on_epoch)`. The Ray trainable
plugs in through `on_epoch`, which receives each epoch's metrics and the trainer (whose
`state_dict` is the checkpoint to resume from).

Each epoch is timed on the trial's device (`stopwatch`): its updates, its evaluation and the
whole epoch, reported with its metrics under the outcome's time columns (`epoch_times`); the
trial's figures are their medians over its epochs (`measured_times`). What `on_epoch` does (a
checkpoint save, a report) falls outside every timed span.
"""

from __future__ import annotations

import copy
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import TrialConfig
from .finite import finite_flag
from .outcome import MEASURED_EPOCH_S, MEASURED_EVALUATION_S, MEASURED_TIMES, MEASURED_UPDATE_S
from .plugins import techniques
from .stopwatch import clock
from .tasks.base import Task
from .techniques.base import StepRunner, Technique

EpochCallback = Callable[[dict[str, float], "Trainer"], None]
# One timed update of an epoch: the clock's marks around it, and whether it is a steady-state one.
Span = tuple[Any, Any, bool]


class TrainingDiverged(RuntimeError):
    """The loss stopped being finite, or the fp16 loss scale collapsed: the trial has failed."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' is not available on this machine; allowed: auto, cpu")
    return torch.device(name)


def read_once(*values: torch.Tensor | None) -> list[float]:
    """Device scalars read on the host with one sync for all of them (None reads as 1.0)."""
    present = [v.detach().double().reshape(()) for v in values if v is not None]
    read = iter(torch.stack(present).tolist() if present else [])
    return [1.0 if v is None else next(read) for v in values]


def bound_techniques(config: TrialConfig, task: Task) -> list[Technique]:
    """The techniques a trial of `config` needs, bound to its task (some set what the task
    does: true microbatching its microbatch size)."""
    return [
        technique(config, task) for technique in techniques(config) if technique.enabled(config)
    ]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """One trial: the model with its techniques, the optimizer, and where training stands."""

    def __init__(self, config: TrialConfig, task: Task | None = None):
        self.config = config
        self.device = resolve_device(config.device)
        seed_everything(config.seed)
        self.task = task or config.task_type()(config, self.device)
        self.techniques = bound_techniques(config, self.task)
        model = self.task.build_model()
        for technique in self.techniques:
            model = technique.apply(model)
        self.model: nn.Module = model.to(self.device)
        # the technique that runs every loss's forward and backward and the optimizer step: the
        # one the config names (`plugins.step_runner` refused a config where none or two are)
        self.step_runner: StepRunner = next(t for t in self.techniques if t.RUNS_STEP)
        self.optimizer = self.task.build_optimizer(self.model)
        for technique in self.techniques:
            technique.attach(self.optimizer)
        self.clock = clock(self.device)
        self.epoch = 0
        self.updates = 0
        self.history: list[dict[str, float]] = []

    def seek(self, update: int) -> None:
        """Place the schedule at 0-based `update`: a measurement takes a later step (one after
        which a sparse run rewires) without the updates before it."""
        self.updates = update
        self.epoch = update // max(1, self.task.updates_per_epoch())

    def technique(self, kind: type[Technique]) -> Technique | None:
        """This trial's instance of a technique, None when its config leaves it off."""
        return next((t for t in self.techniques if isinstance(t, kind)), None)

    # ---- one update ---------------------------------------------------------------------------

    def train_step(self, batch: Any) -> dict[str, float]:
        """One optimizer update over a minibatch, microbatch by microbatch. The host waits for
        the device once: the loss and the gradients' finiteness are read together."""
        model, optimizer = self.model, self.optimizer
        lr = self.task.learning_rate(self.epoch, self.updates)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        normaliser = self.task.normaliser(batch)
        # in float64 on the device, added in order: the same sum a host float would make
        summed = torch.zeros((), dtype=torch.float64, device=self.device)
        microbatches = self.task.microbatches(batch)
        for technique in self.techniques:
            technique.begin_step(len(microbatches))
        for micro in microbatches:
            with self.step_runner.forward_context():
                loss, _ = self.task.loss(model, micro)
            scaled = loss / normaliser
            self.step_runner.backward(scaled)
            summed = summed + loss.detach().double()
        finite = finite_flag([p.grad for p in model.parameters() if p.grad is not None])
        total_loss, all_finite = read_once(summed, finite)
        runner = self.step_runner
        if not math.isfinite(total_loss) and not runner.skips_nonfinite_steps:
            raise TrainingDiverged(
                f"loss is {total_loss} at update {self.updates} (epoch {self.epoch})"
            )
        stepped = runner.unscale_(model.parameters(), bool(all_finite))
        if stepped:
            for technique in self.techniques:
                technique.before_step()
            runner.step(optimizer, model.parameters())
            for technique in self.techniques:
                technique.after_step(self.epoch, self.updates)
        elif not runner.skips_nonfinite_steps:
            raise TrainingDiverged(
                f"gradients are not finite at update {self.updates} (epoch {self.epoch})"
            )
        elif (reason := runner.cannot_go_on()) is not None:
            raise TrainingDiverged(reason)
        self.updates += 1
        return {"loss": total_loss / normaliser, "stepped": float(stepped), "lr": lr}

    # ---- the whole run ------------------------------------------------------------------------

    def run(self, on_epoch: EpochCallback | None = None) -> list[dict[str, float]]:
        """Train from where the trainer stands to the end of the schedule; one callback per epoch."""
        while not self.task.finished(self.epoch, self.updates):
            spans: list[Span] = []
            began = self.clock.mark()
            started = time.perf_counter()
            losses = self.train_epoch(spans)
            self.epoch += 1
            train_seconds = time.perf_counter() - started
            final = self.task.finished(self.epoch, self.updates)
            # the last step's gradients are not needed again (each step sets its own): not held
            # through the evaluation, whose peak then has the weights and optimizer state only
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()
            evaluating = self.clock.mark()
            with self.step_runner.forward_context():
                metrics = self.task.evaluate(self.model, final=final)
            ended = self.clock.mark()
            metrics.update(self.epoch_times(spans, began, evaluating, ended))
            metrics.update(
                epoch=self.epoch,
                updates=self.updates,
                train_loss=float(np.mean(losses)) if losses else math.nan,
                lr=self.task.learning_rate(self.epoch - 1, self.updates - 1),
                epoch_seconds=train_seconds,
                skipped_steps=self.step_runner.skipped_steps,
            )
            for technique in techniques(self.config):
                own = self.technique(technique)
                metrics.update(own.metrics() if own else technique.off_metrics(self.config))
            self.history.append(metrics)
            if on_epoch is not None:
                on_epoch(metrics, self)
        return self.history

    def train_epoch(self, spans: list[Span] | None = None) -> list[float]:
        """The epoch's updates and their losses; each update's marks go to `spans` when given,
        with whether it is a steady-state one: not the epoch's first (whose time holds the
        epoch's start: a new data iterator, the device's caches after an evaluation), nor one
        after which a technique does its occasional work (`Technique.works_after`). Its
        minibatches are this function's own, so none is held once it returns (an evaluation
        after it holds no training input)."""
        self.model.train()
        losses = []
        for index, batch in enumerate(self.task.train_batches(self.epoch)):
            occasional = any(t.works_after(self.epoch, self.updates) for t in self.techniques)
            start = self.clock.mark() if spans is not None else None
            losses.append(self.train_step(batch)["loss"])
            if spans is not None:
                spans.append((start, self.clock.mark(), index > 0 and not occasional))
            if self.task.finished(self.epoch, self.updates):  # an update budget ran out mid-epoch
                break
        return losses

    def epoch_times(self, spans: list[Span], began: Any, evaluating: Any, ended: Any) -> dict:
        """An epoch's seconds on the device, under their columns: an update at steady state
        (the median of its steady-state `spans`; None when it had none), its evaluation, and
        the whole epoch, updates and evaluation."""
        steady = [self.clock.seconds(start, end) for start, end, kept in spans if kept]
        return {
            MEASURED_UPDATE_S: float(np.median(steady)) if steady else None,
            MEASURED_EVALUATION_S: self.clock.seconds(evaluating, ended),
            MEASURED_EPOCH_S: self.clock.seconds(began, ended),
        }

    # ---- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A snapshot of everything needed to resume exactly: weights, optimizer, scaler, masks,
        RNG; a copy, which training on does not change (`save` writes one without the copy)."""
        return copy.deepcopy(self._live_state())

    def save(self, path: str | Path, **extra: Any) -> None:
        """Write `state_dict`, with `extra` beside it under its own keys, to `path` without a
        copy of the state on the device: `torch.save` moves one storage at a time to the host,
        so a checkpoint adds no second copy of the weights and optimizer state to the run's peak.
        """
        torch.save({"trainer": self._live_state(), **extra}, path)

    def _live_state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **{technique.NAME: technique.state_dict() for technique in self.techniques},
            "epoch": self.epoch,
            "updates": self.updates,
            "history": self.history,
            "rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for technique in self.techniques:
            technique.load_state_dict(state[technique.NAME])
        self.epoch = state["epoch"]
        self.updates = state["updates"]
        self.history = list(state["history"])
        torch.set_rng_state(state["rng"])


def trial_environment(config: TrialConfig) -> dict[str, str]:
    """The environment variables a trial of `config` runs with, as its techniques declare them
    (`Technique.environment`: e.g. the CUDA libraries' workspace settings)."""
    return {k: v for t in techniques(config) for k, v in t.environment(config).items()}


def apply_environment(config: TrialConfig) -> dict[str, str]:
    """Set `trial_environment` in this process, where the libraries under torch read it once CUDA
    starts: call it before anything touches CUDA. What it set; a variable the config leaves at
    its default is left as the process has it."""
    values = trial_environment(config)
    os.environ.update(values)
    return values


def measured_times(history: list[dict[str, Any]]) -> dict[str, float | None]:
    """A trial's time figures from its epochs (`Trainer.history`): each one's median over the
    epochs that have it (None when none has: a trial stopped before its first epoch ended, or
    one whose epochs each have a single update)."""
    times = {}
    for name in MEASURED_TIMES:
        values = [row[name] for row in history if row.get(name) is not None]
        times[name] = float(np.median(values)) if values else None
    return times


def train(config: TrialConfig, on_epoch: EpochCallback | None = None) -> list[dict[str, float]]:
    """Run one trial to the end without Ray; returns the per-epoch metrics."""
    apply_environment(config)
    return Trainer(config).run(on_epoch)
