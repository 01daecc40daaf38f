"""The training step a measurement watches, driven the same way for both measurements.

`measure` (the dispatch-level tracker) and `allocations` (the allocator's reports) count memory
in ways that share no code; what they must agree on is which step they count: a trial's real
trainer on synthetic minibatches, warmed up until the optimizer has stepped once (its state
exists, as at every step but the first), placed at the asked update of the schedule, with its
gradients cleared so the step allocates them itself; and, to compare with a prediction (a run's
peak), which updates those are (`at_peak`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ..config import TrialConfig
from ..plugins import techniques
from ..train import Trainer, resolve_device
from .synthetic import synthetic_task

WARM_UP_TRIES = 8  # fp16 loss scaling may skip the first steps; one of these must update


def synthetic_trainer(
    config: TrialConfig, lengths: tuple[int, int] | None
) -> tuple[Trainer, Iterator[Any]]:
    """`config`'s trainer on its device and an endless stream of its synthetic minibatches."""
    device = resolve_device(config.device)
    trainer = Trainer(config, task=synthetic_task(config, device, lengths))
    return trainer, itertools.chain.from_iterable(
        map(trainer.task.train_batches, itertools.count())
    )


def warm_up(trainer: Trainer, batches: Iterator[Any]) -> None:
    """Train until one step has updated the weights (so the optimizer's state exists)."""
    for _ in range(WARM_UP_TRIES):
        if trainer.train_step(next(batches))["stepped"]:
            return
    raise RuntimeError(f"no optimizer step in {WARM_UP_TRIES} warm-up steps (loss scale overflow)")


def ready(trainer: Trainer, batches: Iterator[Any], update: int | None) -> Any:
    """The measured step's minibatch, with the trainer placed at 0-based `update` of its
    schedule (None: the one after the warm-up) and no gradients held."""
    batch = next(batches)
    if update is not None:
        trainer.seek(update)
    trainer.optimizer.zero_grad(set_to_none=True)  # the step allocates its gradients itself
    return batch


def take(trainer: Trainer, batch: Any, update: int | None) -> None:
    """The measured step; a step placed at `update` must update the weights (else the
    measurement would not be of that update)."""
    if not trainer.train_step(batch)["stepped"] and update is not None:
        raise RuntimeError(f"the measured step of update {update} skipped its update")


def peak_steps(config: TrialConfig) -> list[int | None]:
    """The updates whose step may be a run's peak, for a measurement to take: those the
    techniques name (`Technique.peak_updates`: a sparse run's first update and first rewiring),
    else the step after the warm-up (None)."""
    updates = {u for technique in techniques(config) for u in technique.peak_updates(config)}
    return sorted(updates) or [None]


def at_peak(measurement: Callable[..., Any], config: TrialConfig, lengths=None) -> Any:
    """`measurement(config, lengths, update)` (`measure` or `measure_allocations`) at each step
    that may be the run's peak (`peak_steps`), the larger total kept: what the prediction, a
    run's peak, is compared with."""
    steps = (measurement(config, lengths, update) for update in peak_steps(config))
    return max(steps, key=lambda step: step.total_bytes)
