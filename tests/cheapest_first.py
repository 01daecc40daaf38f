"""A user's own sampler, as a user would write it outside the project: every point of an
all-choice space once, the least predicted memory first, so that a sweep learns what fits before
it spends trials on big points.

Installed packages register it under the ``tune_lowmem.samplers`` entry-point group;
tests/test_sampler_plugin.py writes such a package's metadata and nothing of tune_lowmem
changes. It declares what it is built with in `NEEDS`: the space's grid, and each point's memory
known before it trains.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial


class CheapestFirst(BaseSampler):
    """The grid's points by increasing predicted memory; those without one (over the budget,
    invalid) last, for the searcher to store as such."""

    NEEDS = ("grid", "memory")

    def __init__(
        self,
        grid: dict[str, list[Any]],
        memory: Callable[[Mapping[str, Any]], float | None],
        seed: int | None = None,
    ):
        self.grid, self.memory = grid, memory
        self.ordered: list[dict[str, Any]] | None = None  # predicted at the first ask
        self.fallback = RandomSampler(seed=seed)

    def points(self) -> list[dict[str, Any]]:
        if self.ordered is None:
            every = [dict(zip(self.grid, v)) for v in itertools.product(*self.grid.values())]
            memories = [self.memory(point) for point in every]
            order = sorted(range(len(every)), key=lambda i: (memories[i] is None, memories[i]))
            self.ordered = [every[i] for i in order]
        return self.ordered

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {name: CategoricalDistribution(values) for name, values in self.grid.items()}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        asked = [t.params for t in study.get_trials(deepcopy=False) if t.number != trial.number]
        return next((point for point in self.points() if point not in asked), {})

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)
