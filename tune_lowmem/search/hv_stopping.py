"""Early stopping by hypervolume improvement: stop a trial only when it cannot reach the front.

Why: rank-based rules (`MultiObjectiveASHA`, whole rung or memory bands) stop a trial for
being behind others at a rung, and a stopped trial's point is lost: on short schedules a stop
saves a few epochs but can cost a front point, which a sampler that never asks a point twice
does not get back. Here a trial's memory objective is known before it trains and does not
change over epochs, so only its learned objective is uncertain at a rung. The trial goes on
unless even an optimistic guess of its final values is weakly dominated by a trial that
finished (adds no hypervolume to the front): the guess moves each value by the largest
improvement from this rung to the end that the finished trials' own curves suggest: the
largest of their n improvements plus their range / (n - 1), the unbiased estimate of the top of
a uniform spread from n draws, since the largest of a few draws understates the largest
possible (a known memory never moves, so its guess is its value). With fewer than
``reduction_factor`` (at least 2) finished trials recorded at the rung there is no guess yet,
and the trial goes on.

Rungs, the record in the sweep folder, and Tune's save and restore are `MultiObjectiveASHA`'s;
the finished trials' final values are kept beside the rungs' records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.tune.schedulers import TrialScheduler

from .. import pareto
from .scheduler import MultiObjectiveASHA


class HypervolumeStopping(MultiObjectiveASHA):
    """Stops a trial at a rung when its optimistic final values add no hypervolume (see the
    module); the front is the final values of the trials that reached the schedule's end."""

    TYPE = "hypervolume"

    def __init__(self, *args, **kwargs):
        """`MultiObjectiveASHA`'s arguments."""
        self.finals: dict[str, list[float | None]] = {}  # trial id -> its final values
        super().__init__(*args, **kwargs)

    def decide(
        self, trial_id: str, result: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> str:
        epoch = result.get(self.time_attr)
        if epoch is not None and epoch >= self.settings.max_epochs and trial_id not in self.stopped:
            if trial_id not in self.finals:
                self.finals[trial_id] = self.values_of(result)
                self.save_record()
            return TrialScheduler.CONTINUE
        return super().decide(trial_id, result, params)

    def goes_on(self, rung: Mapping[str, list[float | None]], trial_id: str) -> bool:
        moved = self.moved(rung)
        if moved is None or len(moved) < self.settings.reduction_factor:
            return True
        top, bottom = moved.max(axis=0), moved.min(axis=0)
        gain = np.maximum(top + (top - bottom) / (len(moved) - 1), 0.0)
        optimistic = self.losses([rung[trial_id]])[0] - gain
        front = self.losses(list(self.finals.values()))
        return not bool(np.any(np.all(front <= optimistic, axis=1)))

    def moved(self, rung: Mapping[str, list[float | None]]) -> np.ndarray | None:
        """How far each finished trial recorded at the rung moved from there to its end, per
        objective, as losses (a missing value: not moved); None with fewer than two."""
        finished = [t for t in self.finals if t in rung]
        if len(finished) < 2:
            return None
        at_rung = self.losses([rung[t] for t in finished])
        at_end = self.losses([self.finals[t] for t in finished])
        moved = at_rung - at_end
        return np.where(np.isfinite(moved), moved, 0.0)

    def losses(self, values: list[list[float | None]]) -> np.ndarray:
        """Values as losses (lower is better); a missing value is the worst (inf)."""
        rows = [[math.nan if v is None else v for v in row] for row in values]
        loss = pareto.as_losses(rows, list(self.objectives.values()))
        return np.where(np.isnan(loss), math.inf, loss)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "finals": dict(self.finals)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self.finals.update(state.get("finals", {}))
