"""Early stopping by a margin at the rung: stop a trial that another trial at the same epoch,
of no more memory, leads by more than learning curves have ever closed.

Why: a stopped trial saves only the epochs it had left, and a stop that loses a front point
costs far more (the sampler asks a point cut short again only once nothing untried is left), so
a stop must be near certain. Rules that compare a trial with finished ones
(`HypervolumeStopping`) stop little before the front is known, late in a sweep; rank quotas
(`MultiObjectiveASHA`) stop the slow learners of the cheap end. Here the memory objective is
known before training and never moves, so two trials at the same rung differ in memory exactly
and in accuracy by what one epoch count shows. A trial is stopped when another trial recorded at
the rung weakly dominates it by a margin in every objective: the spread of the n finished
trials' moves from this rung to their end (the largest less the smallest: the most one finished
trial gained on another; zero for a memory objective, which does not move), times
(n + 1) / (n - 1), the unbiased estimate of a uniform spread's width from n draws (the spread of a few draws
understates it). A trial that far behind ends dominated by the one ahead unless it gains more on
it than curves are estimated to. With fewer than two finished trials recorded at the rung there
is no spread yet, and the trial goes on. A stop may still cut a front point short (a curve that
climbs late); the known-memory sampler asks such a point again once nothing untried is left, and
the rerun is not stopped (`MultiObjectiveASHA.decide`).

The rungs matter: on the recorded WRN-16-2 curves (4 epochs) the moves from epoch 1 spread wider
than most gaps, so a rung there stops nothing; its rungs are at epochs 2 and 3 there
(``grace_epochs: 2, reduction_factor: 1.5``, chosen on 20 sampler seeds; docs/samplers.md has it
on others and on a second table).

Rungs, the finished trials' final values and their moves (`moved`), the record in the sweep
folder, and Tune's save and restore are `MultiObjectiveASHA`'s.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .asha import MultiObjectiveASHA


class MarginStopping(MultiObjectiveASHA):
    """Stops a trial at a rung when another trial there leads it by more than the finished
    trials' curves ever moved apart (see the module)."""

    TYPE = "margin"

    def goes_on(self, rung: Mapping[str, list[float | None]], trial_id: str) -> bool:
        moved = self.moved(rung)
        if moved is None:
            return True
        spread = moved.max(axis=0) - moved.min(axis=0)
        margin = spread * (len(moved) + 1) / (len(moved) - 1)
        own = self.losses([rung[trial_id]])[0]
        others = self.losses([values for t, values in rung.items() if t != trial_id])
        return not bool(np.any(np.all(others + margin <= own, axis=1)))
