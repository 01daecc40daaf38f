"""The Optuna sampler of a sweep, built from its space's `sampler`, `sampler_options` and
`sampler_seed`, beside the searcher that asks and tells it.

Names and classes are the registry's (`plugins.SAMPLERS`). A space's options are typed as the
sampler's own defaults before it is built, since Optuna checks only some of them (a negative
`n_startup_trials` or a number for the function `gamma` would fail mid-sweep); the launch builds
the sampler once before anything starts, so every option error is one line naming its field.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from ..plugins import sampler_class
from ..validation import SEED_LIMIT, ConfigError, is_int, is_number, require

if TYPE_CHECKING:
    from ..space import SearchSpace

NOT_OPTIONS = ("self", "seed", "search_space", "space", "memory")  # set by the space itself
AT_LEAST_ONE = (
    "n_ei_candidates",
    "population_size",
    "n_candidates",
    "n_predicted",
)  # options counting draws


def build_sampler(space: SearchSpace, seed_offset: int = 0):
    """The space's Optuna sampler. With a budget, nsga2, tpe and gp read each trial's
    `space.CONSTRAINT`, which the searcher sets when it screens the point (Optuna >= 5:
    `Trial.set_constraint`). A resumed sweep passes the number of points already asked as
    `seed_offset`, so that its rebuilt sampler does not draw the points of the sweep's start
    again."""
    options = check_options(space.sampler, space.sampler_options)
    sampler = sampler_class(space.sampler)
    seed = None if space.sampler_seed is None else (space.sampler_seed + seed_offset) % SEED_LIMIT
    try:
        if space.sampler == "grid":
            return sampler({p.name: list(p.values) for p in space.params}, seed=seed, **options)
        if space.sampler == "known-memory":  # it asks the space for each candidate's memory
            return sampler(space, seed=seed, **options)
        return sampler(seed=seed, **options)
    except ConfigError:  # the sampler's own check of the space names its field
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(
            "sampler_options", f"{error}; see optuna.samplers for {space.sampler}'s options"
        ) from None


def check_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` when each is a keyword of the sampler `name` of its default's type; else
    `ConfigError` on ``sampler_options.<option>``."""
    parameters = inspect.signature(sampler_class(name)).parameters
    allowed = [p for p in parameters if p not in NOT_OPTIONS]
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
