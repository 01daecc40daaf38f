"""Early stopping by learning-curve extrapolation: a trial's final values predicted from its own
curve at the rung, by a line fitted to the sweep's finished curves.

Why: `HypervolumeStopping` moves every trial by the same optimistic gain, the largest any
finished trial made from the rung to its end, whatever the trial's own curve shows; a trial far
behind at the rung and one just behind get the same gain, although curves of one task, schedule
and model mostly keep their order (a trial ahead at epoch 1 mostly ends ahead). Here the guess
uses the trial's own partial curve, as learning-curve extrapolation does (Domhan et al., IJCAI
2015: stop a run when its predicted final value is unlikely to beat the best), with the memory
known: per learned objective, the finished trials recorded at the rung give n pairs (value at
the rung, value at the end), a least-squares line maps the one to the other (its slope never
below zero: a sweep's few curves do not show order reversing; with no spread at the rung, the
hypervolume rule's slope 1), and the trial's optimistic final value is the line's prediction
plus the largest residual plus the residuals' range / (n - 1), the unbiased estimate of the top
of a uniform spread from n draws, never worse than its value at the rung. A known memory never
moves (its line is the identity, with no residual). The trial is stopped when that guess is
weakly dominated by a finished trial's final values (adds no hypervolume), as in the hypervolume
rule; the guess is also what a stopped trial's point is told (`projection`).

Why a line and not a parametric family per curve (pow3, log-power, Domhan's ensemble), a
prior-fitted network (LC-PFN) or freeze-thaw: the schedules searched here are a few epochs
(the recorded tables: 3 and 4), so a rung sees one to three points of a curve, too few to fit a
curve family to a trial's own points; a fitted prior's curves are of other tasks' schedules; and
freeze-thaw continues paused trials, which saves only where trials are long enough to pause. The
pairs at the rung are what the sweep itself measured, on its own task and schedule.

A line needs three finished trials at the rung (two fit it exactly, leaving no residual), and at
least `reduction_factor` of them, before it stops anything. Rungs, the finished trials' final
values, the record in the sweep folder, and Tune's save and restore are `MultiObjectiveASHA`'s
(the fit is rebuilt from the record after a restart).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .hypervolume import HypervolumeStopping

LINE_PAIRS = 3  # pairs a line needs before it leaves a residual to be optimistic with


class CurveStopping(HypervolumeStopping):
    """Stops a trial at a rung when its extrapolated optimistic final values add no hypervolume
    (see the module)."""

    TYPE = "curve"
    least_finished = LINE_PAIRS

    def optimistic(
        self, rung: Mapping[str, list[float | None]], trial_id: str
    ) -> np.ndarray | None:
        """The trial's optimistic final values, as losses (see the module); None with fewer
        than `least_finished` finished trials at the rung."""
        finished = self.finished_at(rung)
        if len(finished) < self.least_finished:
            return None
        at_rung, at_end = self.at_rung_and_end(rung, finished)
        own = self.losses([rung[trial_id]])[0]
        return np.array([extrapolate(at_rung[:, j], at_end[:, j], own[j]) for j in range(len(own))])


def extrapolate(at_rung: np.ndarray, at_end: np.ndarray, own: float) -> float:
    """An optimistic final loss for a trial at `own` on the rung, from the finished trials'
    (rung, end) losses: the fitted line's prediction less the largest residual gain plus the
    residuals' range / (n - 1); never above `own`. Pairs with a missing value are left out; with
    fewer than `LINE_PAIRS` left, or `own` missing (inf), the trial is not moved."""
    kept = np.isfinite(at_rung) & np.isfinite(at_end)
    x, y = at_rung[kept], at_end[kept]
    if len(x) < LINE_PAIRS or not np.isfinite(own):
        return own
    if np.ptp(x) > 0:
        slope = max(float(np.polyfit(x, y, 1)[0]), 0.0)
    else:
        slope = 1.0
    intercept = float(np.mean(y - slope * x))
    residuals = y - (intercept + slope * x)
    best = float(residuals.min())  # losses: the largest gain over the line
    band = best - float(np.ptp(residuals)) / (len(x) - 1)
    return min(own, intercept + slope * own + band)
