"""The sweep's baseline: the space's base with every technique off (fp32, dense, no
checkpointing, no microbatching: `memory.baseline_config`), trained with each of the sweep's
seeds, so that the report's accuracy and time changes have a reference (a space's
``baseline: false`` leaves it out).

It is a trial outside the sampler: the searcher hands it to Tune before the sampler's first
point, with no Optuna trial behind it (its Tune config and store rows have no ``point``); the
sampler is never told it, and early stopping neither judges it nor judges by it. Not Optuna's
`enqueue_trial`: the baseline is often outside the space (a base with a technique fixed on, a
precision not among the choices), where its values would teach the sampler about params it
cannot propose, and an enqueued trial would take one of the space's `num_samples` and change
which points the sampler asks. A baseline predicted over the space's `memory_budget_mb` (or its
`time_budget`) is said so and stored as infeasible (`INFEASIBLE_ID`), never trained. A resumed sweep finds the seeds
already given in Tune's trials and the store, as it does for points, and trains only the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..memory import baseline_config
from ..space import SearchSpace

INFEASIBLE_ID = "baseline-infeasible"  # the trial id of a baseline over the memory budget


def baseline_params(space: SearchSpace) -> dict[str, Any]:
    """What the baseline sets over the space's base (its params, as a point's are given):
    every technique field the base sets otherwise, back at its default."""
    flat = baseline_config(space.trial_config({"seed": 0})).to_flat()
    del flat["seed"]
    return {key: value for key, value in flat.items() if space.base.get(key) != value}


def is_baseline(tune_config: Mapping[str, Any]) -> bool:
    """Whether a Tune trial's config is the baseline's (no point of the sampler behind it)."""
    return "point" in tune_config and tune_config["point"] is None
