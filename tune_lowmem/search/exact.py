"""Which choices of a param train the same model: they change memory, never the results.

Why: a sampler that learns accuracy from trials need not learn it twice for two points that
train alike. Each technique and each registered task declares in `EXACT` the values of its params
that give the plain step's results (bit for bit or within rounding; docs/techniques.md gives each
technique's exactness, and the techniques' exactness tests prove it); `exact_values` gathers them
from the registries, so a new exact technique needs nothing here. Two points that differ only in
such values share one training key (`training_key`), so they share one accuracy.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..plugins import TASKS, techniques
from ..techniques.base import EVERY
from ..validation import ConfigError

if TYPE_CHECKING:
    from ..space import SearchSpace

SAME_TRAINING = "<exact>"  # what an exact value reads as in a training key


def exact_values() -> Mapping[str, tuple[Any, ...] | None]:
    """Param -> its exact values (`EVERY`: all of them), as the registered techniques and tasks
    declare them."""
    return _declared((*techniques(), *TASKS.registered()))


@functools.cache
def _declared(owners: tuple[type, ...]) -> Mapping[str, tuple[Any, ...] | None]:
    values: dict[str, tuple[Any, ...] | None] = {}
    declared_by: dict[str, str] = {}
    for owner in owners:
        for name, exact_ones in owner.EXACT.items():
            if name in values and values[name] != exact_ones:
                raise ConfigError(
                    name,
                    f"declared exact differently by {declared_by[name]} and {owner.__name__}; "
                    "one declaration is required",
                )
            values[name] = exact_ones
            declared_by[name] = owner.__name__
    return MappingProxyType(values)


def exact(name: str, value: Any) -> bool:
    """Whether `value` of param `name` trains as the plain step does."""
    return _listed(exact_values(), name, value)


def training_key(params: Mapping[str, Any]) -> str:
    """The point with each exact value replaced by one marker: equal for points that train
    the same model."""
    values = exact_values()  # once: a sampler keys hundreds of candidates an ask
    same = {n: SAME_TRAINING if _listed(values, n, v) else v for n, v in params.items()}
    return json.dumps(same, sort_keys=True, default=str)


def exchangeable(space: SearchSpace, point: Mapping[str, Any]) -> list[list[tuple[str, Any]]]:
    """Per choice param of `space` that `point` sets to an exact value, (name, value) for each of
    the param's exact values: what a point that trains alike may set it to."""
    return [
        [(p.name, v) for v in p.values if exact(p.name, v)]
        for p in space.params
        if p.kind == "choice" and p.name in point and exact(p.name, point[p.name])
    ]


def _listed(values: Mapping[str, tuple[Any, ...] | None], name: str, value: Any) -> bool:
    return name in values and (values[name] is EVERY or value in values[name])
