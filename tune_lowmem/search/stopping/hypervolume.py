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

Rungs, the finished trials' final values, the optimistic guess (`optimistic`, also what a stopped
trial is told), the record in the sweep folder, and Tune's save and restore are
`MultiObjectiveASHA`'s.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .asha import MultiObjectiveASHA


class HypervolumeStopping(MultiObjectiveASHA):
    """Stops a trial at a rung when its optimistic final values add no hypervolume (see the
    module); the front is the final values of the trials that reached the schedule's end."""

    TYPE = "hypervolume"
    least_finished = 2  # finished trials at the rung before a guess (and the reduction factor)

    def goes_on(self, rung: Mapping[str, list[float | None]], trial_id: str) -> bool:
        finished = len(self.finished_at(rung))
        if finished < max(self.least_finished, self.settings.reduction_factor):
            return True
        optimistic = self.optimistic(rung, trial_id)
        front = self.losses(list(self.finals.values()))
        return not bool(np.any(np.all(front <= optimistic, axis=1)))
