"""Screening a point before any worker sees it: its config, its predicted memory and time, its
verdict.

The searcher screens every point it is given: a point over the space's `memory_budget_mb` or
`time_budget` (or one whose model cannot even be built, or not a valid config) is stored at once
as infeasible (or failed) and told to Optuna, so it never occupies a worker; the trainable trains
what it is given. The time is predicted for the device this process has at the trial's threads
(`timing.predict_time`): a CUDA trial screened by a driver without a GPU is timed on its CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import store
from ..config import ConfigError, TrialConfig
from ..memory import MemoryReport, baseline_config
from ..memory.cuda import trial_target
from ..memory.predict import predict
from ..memory.stored import accounted
from ..outcome import (
    MEMORY,
    MEMORY_OBJECTIVE,
    known_before_training,
    memory_columns,
    time_columns,
)
from ..space import SearchSpace
from ..space.schema import RATIO
from ..timing import TimePrediction, predict_time
from .trainable import failure_reason, out_of_memory, sweep_rows

# A point stored without training: its id's prefix by status (then its point's number).
SCREENED_PREFIXES = {"infeasible": "infeasible-", "failed": "invalid-"}


@dataclass(frozen=True)
class Screening:
    """A point's verdict before training: feasible (with its config, predicted memory and
    time) or not."""

    status: str  # feasible | infeasible | failed
    config: TrialConfig | None = None
    predicted: MemoryReport | None = None
    reason: str | None = None
    time: TimePrediction | None = None

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"

    def columns(self) -> dict[str, float | int | None]:
        """What it predicted, under the outcome columns (None where not predicted)."""
        return {**memory_columns(self.predicted), **time_columns(self.time)}


def screen(space: SearchSpace, params: Mapping[str, Any]) -> Screening:
    """Build the point's config and predict its memory and time; over a budget (or a model whose
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
        time = predict_time(config, threads=space.resources.cpu)
    except Exception as error:  # the profiler builds the real model: its parameters did not fit
        if not out_of_memory(error):
            raise
        return Screening("infeasible", config, None, f"too big to build: {failure_reason(error)}")
    excess = budget_excess(space, predicted, time)
    reason = None
    if excess.get(MEMORY_EXCESS, 0.0) > 0:
        name = budgeted_memory(space).removeprefix(MEMORY)
        memory = budgeted_memory_mb(space, predicted)
        budget = space.memory_budget_mb
        reason = f"predicted memory {memory:.1f} MB ({name}) is over memory_budget_mb {budget:g}"
    elif excess.get(TIME_EXCESS, 0.0) > 0:
        seconds = time.update_seconds
        reason = (
            f"predicted update {seconds:.3g} s is over time_budget {space.time_budget} "
            f"({time_budget_s(space):.3g} s)"
        )
    return Screening(
        "feasible" if reason is None else "infeasible", config, predicted, reason, time
    )


# Optuna constraints (`Trial.set_constraint`): the prediction less the budget, > 0 is infeasible
MEMORY_EXCESS, TIME_EXCESS = "memory_over_budget_mb", "time_over_budget_s"


def budget_excess(
    space: SearchSpace, predicted: MemoryReport, time: TimePrediction
) -> dict[str, float]:
    """How far a point's predictions are over each budget the space sets (negative: under)."""
    excess = {}
    if space.memory_budget_mb is not None:
        excess[MEMORY_EXCESS] = budgeted_memory_mb(space, predicted) - space.memory_budget_mb
    if (seconds := time_budget_s(space)) is not None:
        excess[TIME_EXCESS] = time.update_seconds - seconds
    return excess


def time_budget_s(space: SearchSpace) -> float | None:
    """The space's `time_budget` in predicted seconds per update: as given, or its ratio times
    the baseline's predicted update (the base with every technique off, `memory.baseline_config`)
    at the trial's threads."""
    budget = space.time_budget
    if budget is None or not isinstance(budget, str):
        return budget
    baseline = baseline_config(space.trial_config({"seed": 0}))
    seconds = baseline_update_s(json.dumps(baseline.to_flat(), default=str), space.resources.cpu)
    return float(RATIO.match(budget)[1]) * seconds


@functools.cache
def baseline_update_s(flat: str, threads: int) -> float:
    """A baseline's predicted seconds per update, once per config and threads."""
    config = TrialConfig.from_dict(json.loads(flat))
    return predict_time(config, threads=threads).update_seconds


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
    memory = {**memory_columns(screening.predicted, None, csr), **time_columns(screening.time)}
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
