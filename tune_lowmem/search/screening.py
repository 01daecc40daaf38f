"""Screening a point before any worker sees it: its config, its predicted memory, its verdict.

The searcher screens every point it is given: a point over the space's `memory_budget_mb` (or
one whose model cannot even be built, or not a valid config) is stored at once as infeasible (or
failed) and told to Optuna, so it never occupies a worker; the trainable trains what it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import store
from ..config import ConfigError, TrialConfig
from ..memory import MemoryReport
from ..memory.cuda import trial_target
from ..memory.predict import predict
from ..memory.stored import accounted
from ..outcome import MEMORY, MEMORY_OBJECTIVE, known_before_training, memory_columns
from ..space import SearchSpace
from .trainable import failure_reason, out_of_memory, sweep_rows

# A point stored without training: its id's prefix by status (then its point's number).
SCREENED_PREFIXES = {"infeasible": "infeasible-", "failed": "invalid-"}


@dataclass(frozen=True)
class Screening:
    """A point's verdict before training: feasible (with its config and predicted memory) or not."""

    status: str  # feasible | infeasible | failed
    config: TrialConfig | None = None
    predicted: MemoryReport | None = None
    reason: str | None = None

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"


def screen(space: SearchSpace, params: Mapping[str, Any]) -> Screening:
    """Build the point's config and predict its memory; over the budget (or a model whose
    parameters alone do not fit in memory) means infeasible."""
    try:
        config = space.trial_config(params)
    except ConfigError as error:
        return Screening("failed", reason=f"invalid config: {error}")
    try:
        target = trial_target(config, space.resources.gpu != 0, space.resources.capability)
        if target is not None:  # the driver's view: nothing probed (`memory.share`)
            target = dataclasses.replace(target, on_card=False)
        # as the trial will compute: its threads, its device
        predicted = predict(config, threads=space.resources.cpu, target=target)
    except Exception as error:  # the profiler builds the real model: its parameters did not fit
        if not out_of_memory(error):
            raise
        return Screening("infeasible", config, None, f"too big to build: {failure_reason(error)}")
    budget = space.memory_budget_mb
    if budget is not None and (memory := budgeted_memory_mb(space, predicted)) > budget:
        name = budgeted_memory(space).removeprefix(MEMORY)
        reason = f"predicted memory {memory:.1f} MB ({name}) is over memory_budget_mb {budget:g}"
        return Screening("infeasible", config, predicted, reason)
    return Screening("feasible", config, predicted)


def budgeted_memory(space: SearchSpace) -> str:
    """The memory a budget holds a point to: the space's objective the profiler predicts (the
    run's peak in the shipped joint spaces), else a training step's predicted total."""
    predicted = (n for n in space.objectives if n.startswith(MEMORY) and known_before_training(n))
    return next(predicted, MEMORY_OBJECTIVE)


def budgeted_memory_mb(space: SearchSpace, predicted: MemoryReport) -> float:
    return float(memory_columns(predicted)[budgeted_memory(space)])


def write_screened(
    root: str,
    sweep: str,
    trial_id: str,
    space: SearchSpace,
    point: int | None,
    params: Mapping[str, Any],
    screening: Screening,
) -> store.TrialRecord:
    """Store a point that was never trained (infeasible, or not a valid config); `point` None:
    the sweep's baseline."""
    now = datetime.now(UTC)
    known = screening.predicted is not None
    csr = accounted(screening.config, "csr") if known else None
    memory = memory_columns(screening.predicted, None, csr)
    config = (
        screening.config.to_flat() if screening.config is not None else {**space.base, **params}
    )
    reason = screening.reason
    rows = sweep_rows(space, sweep)
    try:
        record = rows.row(
            trial_id,
            screening.status,
            config,
            outcome=memory,
            point=point,
            failure_reason=reason,
            started_at=now,
            finished_at=now,
        )
    except ConfigError:  # an invalid point may not even fit the config columns' types
        record = rows.row(
            trial_id,
            screening.status,
            space.base,
            outcome=memory,
            point=point,
            failure_reason=f"{reason} (params: {dict(params)})",
            started_at=now,
            finished_at=now,
        )
    store.write_trial(root, record, epochs=[])
    return record
