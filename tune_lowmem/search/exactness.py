"""Exactness for every sampler: a point asked trains as its training's least-memory variant, and
a training asked before answers the ask.

Why: points that differ only in exact values (`exact`: the choices that techniques and tasks
declare change memory, never the results) train one model. The known-memory sampler knows it;
Optuna's samplers and plug-ins do not, and ask such variants as points of their own: each trains
again, and seldom at its least memory. The searcher applies this to whatever its sampler asks,
under a space's ``exactness`` (on, unless the sampler is a grid, which trains every combination
once):

- A point asked trains as the variant of its training of least predicted memory: its exact
  choices exchanged, every other param kept; the memory is the profiler's, of the space's memory
  objective the profiler predicts, else of the predicted total (`screening.budgeted_memory`). The
  point itself trains unless a variant needs strictly less.
- A point whose training an earlier point trains is not trained: it is told what that point is
  told, when that point is told, so the sampler sees one training give one result. A point that
  early stopping cut short (the study's ``stopped_points``) answers no later ask: a sampler that
  asks its training again has it trained again, to its end.

Both are written in the journal with the ask, as the trial's user attrs `TRAINED_AS` (the
variant, where it is not the point asked) and `ANSWERED_BY` (the earlier point), so that a
restarted searcher rebuilds the same from the journal (`ScreenedSearcher.rejoin`). An answered
point counts among the sweep's `num_samples` (one ask of the sampler), and has no store row: no
trial ran.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any

from optuna.trial import BaseTrial, FixedTrial, FrozenTrial

from ..space import SearchSpace
from .exact import exchangeable, training_key
from .samplers import MemoryOf, profiler_memory
from .screening import budgeted_memory

TRAINED_AS = "trained_as"  # trial user attr: the params trained, where not the params asked
ANSWERED_BY = "answered_by"  # trial user attr: the earlier point whose result answers this one


class Exactness:
    """The variant each point asked trains as, and which point trains each training."""

    def __init__(self, space: SearchSpace):
        self.space = space
        self.memory: MemoryOf = profiler_memory(space, budgeted_memory(space))
        self.trainers: dict[str, list[int]] = {}  # training key -> its points trained, in order

    def ask(
        self, trial: BaseTrial, asked: dict[str, Any], stopped: Collection[int]
    ) -> tuple[dict[str, Any], int | None]:
        """The params `asked` trains with and the earlier point that answers it (None: it trains;
        `stopped`: the points early stopping cut short), written in `trial`'s user attrs."""
        params = self.variant(asked)
        if params != asked:
            trial.set_user_attr(TRAINED_AS, params)
        earlier = next(
            (n for n in self.trainers.get(training_key(params), []) if n not in stopped), None
        )
        if earlier is None:
            self.trains(trial.number, params)
        else:
            trial.set_user_attr(ANSWERED_BY, earlier)
        return params, earlier

    def trains(self, number: int, params: Mapping[str, Any]) -> None:
        """Point `number` trains `params`' training."""
        self.trainers.setdefault(training_key(params), []).append(number)

    def variant(self, point: dict[str, Any]) -> dict[str, Any]:
        """Of the points that train as `point` does, the one of least memory (`point` itself
        unless another needs strictly less; None, an infeasible point's memory, is the most)."""
        others = [v for v in self.variants(point) if v != point]
        if not others:  # nothing to exchange: no prediction to make
            return point
        best, least = point, self.memory(point)
        for variant in others:
            memory = self.memory(variant)
            if memory is not None and memory > 0 and (least is None or memory < least):
                best, least = variant, memory
        return best

    def variants(self, point: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The points of the space that train as `point` does: its exact values exchanged
        (`exact.exchangeable`), every other param as it is (an exchange that makes another param
        active or inactive changes the training)."""
        key, found = training_key(point), []
        for values in itertools.product(*exchangeable(self.space, point)):
            try:
                variant = self.space.sample(FixedTrial({**point, **dict(values)}))
            except ValueError:  # a param made active that `point` has no value for
                continue
            if training_key(variant) == key:
                found.append(variant)
        return found


def trained_params(trial: FrozenTrial, asked: dict[str, Any]) -> dict[str, Any]:
    """What a point asked as `asked` trains with, as its ask wrote it in the journal."""
    return dict(trial.user_attrs.get(TRAINED_AS, asked))


def answered_by(trial: FrozenTrial) -> int | None:
    """The earlier point whose result answers this one, as its ask wrote it (None: it trains)."""
    return trial.user_attrs.get(ANSWERED_BY)
