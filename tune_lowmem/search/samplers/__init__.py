"""The Optuna sampler of a sweep, built from its space's sampler (`sampler_settings`: the class
a space names, resolved and its options checked when the space is read) and `sampler_seed`,
beside the searcher that asks and tells it.

A sampler is a plug-in (`plugins.SAMPLERS`: a built-in name, an entry point of the
``tune_lowmem.samplers`` group, or ``package.module:attribute``): an Optuna sampler class, built
with its seed, its options and what it declares in `NEEDS`, each given as the keyword argument
of that name (`SUPPLIES`):

- ``grid``: every param's values (a dict of lists). The space must then be a grid: choice params
  only, no conditions, and `num_samples` at most the grid's size, all of it when absent
  (`space.SearchSpace` checks it).
- ``space``: the validated `SearchSpace` (its params, conditions, objectives, budget).
- ``memory``: a point's objectives known before it trains (`KNOWN`: its predicted memory, its
  predicted update time): the profiler's predictions through the searcher's own screening (None:
  over a budget, or not a valid config), once per `memory_key`; one number where the space has one
  such objective, else a tuple of them in the space's order (`known_objectives`). The space must
  have at least one. The sampler keeps it as its `memory`, which the replay benchmark replaces
  with a recorded table's.
- ``cost``: a point's predicted training seconds (its predicted epoch seconds times its epochs),
  known before it trains, through the same screening (None: over a budget, or not a valid
  config), once per `cost_key`. The sampler keeps it as its `cost`, which the replay benchmark
  replaces with a table's points' predicted seconds (never the seconds they took).

Which params train alike (their exact values) is declared by techniques and tasks and read
through `search.exact`, the same for every sampler; the searcher applies them to whatever a
sampler asks (`search.exactness`). The launch builds the sampler once before anything starts,
so what only its class can check of its options is one line naming its field too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import optuna

from ...config import ConfigError, TrialConfig
from ...outcome import PREDICTED_EPOCH_S, SPACE_OBJECTIVES, known_before_training
from ...validation import SEED_LIMIT, require

if TYPE_CHECKING:
    from ...space import SearchSpace
    from ..screening import Screening

KNOWN = tuple(filter(known_before_training, SPACE_OBJECTIVES))  # the profiler's, before training
# a point's params -> its known objective(s): one number, or a tuple of them (None: infeasible)
MemoryOf = Callable[[Mapping[str, Any]], float | tuple[float, ...] | None]
# a point's params -> its predicted training seconds (None: infeasible or invalid)
CostOf = Callable[[Mapping[str, Any]], float | None]


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler: every point of the space's grid, once."""

    NEEDS = ("grid",)

    def __init__(self, grid: dict[str, list[Any]], seed: int | None = None):
        super().__init__(grid, seed=seed)


def known_objectives(space: SearchSpace) -> list[str]:
    """The space's objectives the profiler predicts before training, in its order;
    `ConfigError` on ``objectives`` when it has none."""
    known = [name for name in space.objectives if name in KNOWN]
    require(
        bool(known),
        "objectives",
        f"sampler {space.sampler.name} needs an objective the profiler predicts "
        f"({', '.join(KNOWN)}); got {', '.join(space.objectives)}",
    )
    return known


def known_objective(space: SearchSpace) -> str:
    """The first of the space's `known_objectives`."""
    return known_objectives(space)[0]


def profiler_memory(space: SearchSpace, objective: str | None = None) -> MemoryOf:
    """A point's known objectives from the profiler, through the searcher's own screening (so
    the budgets and invalid configs read as None, never as a value), once per `memory_key`:
    `objective` alone when named, else the space's `known_objectives` (one number where it has
    one, else their tuple)."""
    names = [objective] if objective else known_objectives(space)

    def known(screening: Screening) -> float | tuple[float, ...] | None:
        predicted = [screening.columns().get(name) for name in names]
        if None in predicted:
            return None
        return float(predicted[0]) if len(names) == 1 else tuple(map(float, predicted))

    return screened(space, memory_key, known)


def profiler_cost(space: SearchSpace) -> CostOf:
    """A point's predicted training seconds, its predicted epoch seconds times its epochs,
    through the searcher's own screening (None: over a budget or invalid), once per
    `cost_key`."""

    def seconds(screening: Screening) -> float | None:
        epoch = screening.columns().get(PREDICTED_EPOCH_S)
        return None if epoch is None else float(epoch) * screening.config.schedule.epochs

    return screened(space, cost_key, seconds)


def screened(
    space: SearchSpace,
    key_of: Callable[[SearchSpace, Mapping[str, Any]], str | None],
    value_of: Callable[[Screening], Any],
) -> Callable[[Mapping[str, Any]], Any]:
    """`value_of` a point's screening (`search.screening.screen`; None unless it is feasible),
    once per `key_of` the point (None: not a valid config, screened each time)."""
    from ..screening import screen

    values: dict[str, Any] = {}

    def value(params: Mapping[str, Any]) -> Any:
        key = key_of(space, params)
        if key is not None and key in values:
            return values[key]
        screening = screen(space, params)
        found = value_of(screening) if screening.feasible else None
        if key is not None:
            values[key] = found
        return found

    return value


def memory_key(space: SearchSpace, params: Mapping[str, Any]) -> str | None:
    """What a point's predicted memory depends on: the profiler's shape key (its dry run's
    cache key: the model, the schedule's shape fields, each technique's `shape_settings`, which
    also decide the sparse weights' nonzeros and layout) and whether the trial works between
    steps (a rewiring). Points that differ only in a learning rate or a rewiring knob that keeps
    rewiring share one. None: the config is not valid (the screening says why)."""
    try:
        return json.dumps(memory_parts(space.trial_config(params)), default=str)
    except ConfigError:
        return None


def memory_parts(config: TrialConfig) -> list[Any]:
    """`memory_key`'s parts: the dry run's shape key and whether the trial rewires."""
    from ...memory.predict import occasional_work, shape_key

    return [shape_key(config).to_flat(), occasional_work(config)]


def cost_key(space: SearchSpace, params: Mapping[str, Any]) -> str | None:
    """What a point's predicted seconds depend on: its `memory_key` (the shapes the dry run
    prices, the rewiring), its schedule's length and its data (how many updates and evaluation
    batches an epoch has). None: the config is not valid."""
    try:
        config = space.trial_config(params)
        return json.dumps([memory_parts(config), config.schedule.epochs, config.data], default=str)
    except ConfigError:
        return None


SUPPLIES: dict[str, Callable[[SearchSpace], Any]] = {  # each of `sampler_settings.NEEDS`
    "grid": lambda space: {p.name: list(p.values) for p in space.params},
    "space": lambda space: space,
    "memory": profiler_memory,
    "cost": profiler_cost,
}


def build_sampler(space: SearchSpace, seed_offset: int = 0) -> optuna.samplers.BaseSampler:
    """The space's Optuna sampler. With a budget, nsga2, tpe and gp read each trial's
    constraints (`screening.budget_excess`), which the searcher sets when it screens the point
    (Optuna >= 5: `Trial.set_constraint`). A resumed sweep passes the number of points already asked as
    `seed_offset`, so that its rebuilt sampler does not draw the points of the sweep's start
    again."""
    sampler = space.sampler
    seed = None if space.sampler_seed is None else (space.sampler_seed + seed_offset) % SEED_LIMIT
    supplied = {need: SUPPLIES[need](space) for need in sampler.needs}
    try:
        return sampler.cls(seed=seed, **supplied, **sampler.options)
    except ConfigError:  # the sampler's own check of the space names its field
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(
            "sampler_options", f"{error}; see optuna.samplers for {sampler.name}'s options"
        ) from None
