"""A search space's sampler, resolved once from its ``sampler`` and ``sampler_options``: the
Optuna sampler class the registry names (`plugins.SAMPLERS`), what it declares it is built with
(`NEEDS`), and its options, checked with the rest of the space's file.

Optuna checks only some options (a negative `n_startup_trials` or a number for the function
`gamma` would fail mid-sweep), so each is typed here as the sampler's own default before the
sweep starts; what the sampler alone can check it checks when the launch builds it
(`search.samplers.build_sampler`), before anything starts too.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..plugins import SAMPLERS
from ..validation import ConfigError, is_int, is_number, require

# What a sampler may declare it is built with, each given as the keyword argument of its name
# (`search.samplers.SUPPLIES`): the space's grid, the validated space, a point's known memory,
# a point's predicted training seconds.
NEEDS = ("grid", "space", "memory", "cost")
AT_LEAST_ONE = (
    "n_ei_candidates",
    "population_size",
    "n_candidates",
    "n_predicted",
    "mc_samples",
)  # options counting draws


@dataclass(frozen=True)
class SamplerSettings:
    """The sampler a space names: its name as the space gives it, its class, what it needs and
    its checked options."""

    name: str  # a built-in name, an entry point's, or package.module:attribute (the store's)
    cls: type  # an Optuna sampler class
    needs: tuple[str, ...]  # of `NEEDS`, as the class declares them
    options: Mapping[str, Any]  # its keyword arguments from the space

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the space's file gives it (its name and options), and resolved anew when
        read, as a sweep's searcher is: its class is imported as it was named."""
        return sampler_settings, (self.name, dict(self.options))


def sampler_settings(name: object, options: Mapping[str, Any]) -> SamplerSettings:
    """The sampler `name` names with `options`; `ConfigError` on ``sampler`` (no such sampler,
    or one needing what no sweep supplies) or ``sampler_options.<option>``."""
    sampler = SAMPLERS.get(name)
    needs = tuple(getattr(sampler, "NEEDS", ()))
    for need in needs:
        require(
            need in NEEDS,
            "sampler",
            f"{name!r} needs {need!r}, which no sweep supplies; allowed: {', '.join(NEEDS)}",
        )
    return SamplerSettings(
        str(name), sampler, needs, checked_options(name, sampler, needs, options)
    )


def checked_options(
    name: object, sampler: type, needs: tuple[str, ...], options: Mapping[str, Any]
) -> dict[str, Any]:
    """`options` when each is a keyword of `sampler` of its default's type (not a seed, nor what
    the sampler needs: the space sets those); else `ConfigError` on
    ``sampler_options.<option>``."""
    parameters = inspect.signature(sampler).parameters
    set_by_space = ("self", "seed", *needs)
    allowed = [p for p in parameters if p not in set_by_space]
    for option, value in options.items():
        field_name = f"sampler_options.{option}"
        require(
            option in allowed,
            field_name,
            f"not an option of {name} here; allowed: {', '.join(allowed)}",
        )
        default = parameters[option].default
        if callable(default) or "Callable" in str(parameters[option].annotation):
            raise ConfigError(field_name, "a function in Optuna; it cannot be set from YAML")
        if isinstance(default, bool):
            require(
                isinstance(value, bool),
                field_name,
                f"{value!r} is not allowed; true or false is required",
            )
        elif is_int(default):
            low = 1 if option in AT_LEAST_ONE else 0
            require(
                is_int(value) and value >= low,
                field_name,
                f"{value!r} is not allowed; an integer >= {low} is required",
            )
        elif isinstance(default, float):
            require(
                is_number(value),
                field_name,
                f"{value!r} is not allowed; a finite number is required",
            )
    return dict(options)
