"""How a sweep's params reach its sampler: an ordered choice as its rank, and, under exactness, no
dimension for the choices that train alike.

Why: Optuna's samplers read a categorical distribution as unordered labels, so a density of 0.1,
0.3 or 1.0 asked of TPE or the GP is three unrelated categories where `known-memory` places it
on a line; and under exactness the searcher trains a point's least-memory variant whatever exact
choices the sampler asked, so asking them only adds dimensions that never change a result. A
fair comparison gives every sampler what `known-memory` has. For a sampler not built with the
space (Optuna's, and plug-ins that need neither the space nor the grid):

- an ordered choice (`Param.order`: numbers, by value, or the values a space declares
  ``ordered``, as listed) is asked as an integer, its rank in the order
  (``IntDistribution(0, k - 1)``), and samples the value of that rank;
- under exactness (`SearchSpace.uses_exactness`), a choice all of whose values are exact
  (`exact.exact`) is not asked: it takes its first value, which exactness exchanges for the
  least-memory one; a choice of which several values are exact is asked with the first of them
  standing for all. A choice that a condition reads is asked as it is: its value decides which
  params are sampled.

A sampler built with the space (`known-memory`, `qlognehvi`) reads each param's order and
exactness from the space itself, and a grid lists every value: they ask every choice as a
category, as before.

The representation is decided when a study is created and kept in its user attrs
(`REPRESENTATION`); a study is asked and read with its own. A study that an earlier version
created asked every choice as a category and has none recorded: it keeps asking so, since
Optuna refuses a param whose distribution changes within a study. The journal holds what the
sampler was asked: an ordered choice's rank, no value for a choice not asked; the searcher
reads its points back through the same representation (`Representation.asking` over a
``FixedTrial``), and the store's rows hold every value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from optuna.study import Study

from ..space.params import Param
from .exact import exact

if TYPE_CHECKING:
    from ..space import SearchSpace

REPRESENTATION = "representation"  # study user attr: the `Representation` it is asked with


@dataclass(frozen=True)
class Representation:
    """Which choices a study's sampler is asked as a rank, not at all, or with their exact values
    as one (see the module); nothing listed: every choice a category."""

    ordered: tuple[str, ...] = ()  # asked as the rank of the value in its order
    hidden: tuple[str, ...] = ()  # not asked: every value exact
    merged: tuple[str, ...] = ()  # asked with one exact value standing for all of them

    @classmethod
    def of(cls, space: SearchSpace) -> Representation:
        """What a new study of `space` is asked with."""
        if {"grid", "space"} & set(space.sampler.needs):
            return cls()
        read = {condition.parent for condition in space.conditions.values()}
        choices = [p for p in space.params if p.kind == "choice"]
        hidden, merged = [], []
        if space.uses_exactness():
            for param in (p for p in choices if p.name not in read):
                exact_ones = sum(exact(param.name, v) for v in param.values)
                if exact_ones == len(param.values):
                    hidden.append(param.name)
                elif exact_ones > 1:
                    merged.append(param.name)
        ordered = [p.name for p in choices if p.order() is not None and p.name not in hidden]
        return cls(tuple(ordered), tuple(hidden), tuple(merged))

    @classmethod
    def of_study(cls, study: Study, space: SearchSpace) -> Representation:
        """The representation `study` is asked with: its recorded one; none for a study that
        asked points before one was recorded (an earlier version's); else `of` the space,
        recorded now."""
        recorded = study.user_attrs.get(REPRESENTATION)
        if recorded is not None:
            return cls(**{k: tuple(v) for k, v in recorded.items()})
        if study.get_trials(deepcopy=False):
            return cls()
        chosen = cls.of(space)
        study.set_user_attr(REPRESENTATION, {k: list(v) for k, v in asdict(chosen).items()})
        return chosen

    def asked_values(self, param: Param) -> tuple:
        """The values the sampler chooses among, in order where the choice is ordered."""
        values = param.order() if param.name in self.ordered else param.values
        if param.name not in self.merged:
            return tuple(values)
        first = next(v for v in values if exact(param.name, v))
        return tuple(v for v in values if v == first or not exact(param.name, v))

    def asking(self, trial: Any, space: SearchSpace) -> Asking:
        """`trial` (an Optuna trial, or a ``FixedTrial`` of a journal's params) as
        `SearchSpace.sample` asks it under this representation."""
        return Asking(trial, {p.name: p for p in space.params}, self)


class Asking:
    """A trial that `SearchSpace.sample` asks: each choice as its representation says, every
    range as it is."""

    def __init__(self, trial: Any, params: Mapping[str, Param], representation: Representation):
        self.trial, self.params, self.representation = trial, params, representation

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        if name in self.representation.hidden:
            return choices[0]
        values = self.representation.asked_values(self.params[name])
        if name in self.representation.ordered:
            return values[self.trial.suggest_int(name, 0, len(values) - 1)]
        return self.trial.suggest_categorical(name, list(values))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1) -> int:
        return self.trial.suggest_int(name, low, high, step=step)

    def suggest_float(
        self, name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> float:
        return self.trial.suggest_float(name, low, high, step=step, log=log)
