"""A search space file's top-level keys, each with its own check and default, read in one call
(`validation.read_section`); what a key must be beside the others is checked by
`SearchSpace.from_dict`.

The schema (see search_spaces/quickstart.yaml for a full example)::

    name: quickstart                   # the sweep's name in the store (--name overrides it)
    description: ...                   # optional, free text
    base: {task: NAME, model: {depth: 10}, schedule.epochs: 3}   # fixed values, nested or dotted
    params:                            # dotted TrialConfig field -> distribution, sampled in this order
      precision: {type: choice, values: [fp32, bf16]}
      microbatch.size: {type: choice, values: [null, 25, 10], ordered: true}   # as listed (numbers: by value)
      schedule.lr_multiplier: {type: loguniform, low: 0.25, high: 4}
      sparsity.density: {type: uniform, low: 0.1, high: 1.0, step: 0.1}
      model.width: {type: int, low: 1, high: 4}
    conditions:                        # a param is sampled only when its condition holds,
      sparsity.period_multiplier: "sparsity.density < 1"   # else it keeps its base value
    objectives: {val_accuracy: maximize, memory.predicted_total_mb: minimize}
    memory_budget_mb: 50               # optional: points predicted above it are never trained
    time_budget: 2x                    # optional: predicted seconds per update, or a ratio to the baseline's (2x)
    sampler: nsga2                     # a built-in (plugins.SAMPLERS), an entry point's, or package.module:attribute
    sampler_options: {population_size: 8}   # optional keyword arguments of the sampler's class
    sampler_seed: 0
    exactness: true                    # each training once, at least memory (absent: true, but for a grid)
    baseline: true                     # also train the base with every technique off, once per seed (absent: true)
    num_samples: 12                    # points to evaluate (a grid's sampler: at most the grid's size, default all)
    seeds_per_point: 1                 # each feasible point trains with seeds 0..k-1
    resources: {cpu: 1, gpu: 0}        # per trial; gpu: auto sizes a GPU share from predicted memory
    max_concurrent: 2                  # optional cap on trials running at once
    max_failures: 1                    # retries of a trial whose worker died (not of a raised error)
    resume_checkpoint_s: 10            # training seconds between a trial's Tune checkpoints (0: every epoch)
    scheduler: {type: mo-asha, grace_epochs: 1, reduction_factor: 3}   # optional early stopping
    tracking: {tensorboard: true, mlflow: http://127.0.0.1:5000}   # besides the store (docs/tracking.md)
"""

from __future__ import annotations

import re
from typing import Any

from ..plugins import DEFAULT_SAMPLER
from ..store import check_name
from ..validation import (
    Field,
    checked,
    is_number,
    mapping,
    nonnegative_float,
    nonnegative_int,
    numpy_seed,
    optional_flag,
    optional_positive_float,
    optional_positive_int,
    positive_int,
    section,
)
from .params import param_specs
from .scheduler_settings import FIELDS as SCHEDULER_FIELDS
from .tracking_settings import FIELDS as TRACKING_FIELDS


def _text(value: Any, field_name: str) -> str:
    return checked(value, isinstance(value, str), field_name, "text")


def _gpu(value: Any, field_name: str) -> float | str:
    whole_or_share = is_number(value) and value >= 0 and (value < 1 or float(value).is_integer())
    return checked(
        value,
        value == "auto" or whole_or_share,
        field_name,
        "auto, a share below 1, or a whole number of GPUs",
    )


def _capability(value: Any, field_name: str) -> str | None:
    """A compute capability as "MAJOR.MINOR" (YAML may read 9.0 as a number)."""
    if value is None:
        return None
    text = str(value) if is_number(value) else value
    ok = isinstance(text, str) and re.fullmatch(r"\d{1,2}\.\d", text) is not None
    return checked(text, ok, field_name, 'a compute capability as "MAJOR.MINOR" (e.g. "9.0")')


def _megabytes(value: Any, field_name: str) -> float | None:
    if value is None:
        return None
    return float(
        checked(value, is_number(value) and value > 0, field_name, "a positive number (MB)")
    )


RATIO = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)x$")  # a time budget relative to the baseline's


def _time_budget(value: Any, field_name: str) -> float | str | None:
    """Null, seconds per update (a positive number), or a positive ratio to the baseline's
    predicted update written like ``2x`` (kept as written)."""
    ratio = isinstance(value, str) and (found := RATIO.match(value.strip())) is not None
    ok = value is None or is_number(value) and value > 0 or ratio and float(found[1]) > 0
    checked(value, ok, field_name, "a positive number (seconds per update) or a ratio like 2x")
    if ratio:
        return value.strip()
    return None if value is None else float(value)


def _optional_seed(value: Any, field_name: str) -> int | None:
    return numpy_seed(value, field_name, optional=True)


def _flag(value: Any, field_name: str) -> bool:
    return checked(value, isinstance(value, bool), field_name, "true or false")


RESOURCE_FIELDS = {
    "cpu": Field(positive_int, 1),
    "gpu": Field(_gpu, 0),
    "gpu_memory_mb": Field(_megabytes),  # required with gpu: auto (`_resources`)
    "gpu_capability": Field(_capability),  # the GPUs' architecture, e.g. "9.0"
}
SPACE_FIELDS = {  # the file's top level; what needs other keys is checked in `from_dict`
    "name": Field(check_name, required="required"),
    "description": Field(_text, "", blank_is_default=True),
    "base": Field(mapping, required="required"),
    "params": Field(param_specs, required="required"),
    "conditions": Field(mapping, {}, blank_is_default=True),
    "objectives": Field(mapping, required="required"),
    "memory_budget_mb": Field(optional_positive_float),
    "time_budget": Field(_time_budget),
    "sampler": Field(default=DEFAULT_SAMPLER),  # resolved with its options (`from_dict`)
    "sampler_options": Field(mapping, {}, blank_is_default=True),
    "sampler_seed": Field(_optional_seed, 0),
    "exactness": Field(optional_flag),  # absent: `SearchSpace.uses_exactness` decides
    "baseline": Field(_flag, True),
    "num_samples": Field(optional_positive_int),  # required unless the grid gives it
    "seeds_per_point": Field(positive_int, 1),
    "resources": Field(section(RESOURCE_FIELDS), {}, blank_is_default=True),
    "max_concurrent": Field(optional_positive_int),
    "max_failures": Field(nonnegative_int, 1),
    "resume_checkpoint_s": Field(nonnegative_float, 10.0),
    "scheduler": Field(section(SCHEDULER_FIELDS, optional=True)),
    "tracking": Field(section(TRACKING_FIELDS), {}, blank_is_default=True),
}
