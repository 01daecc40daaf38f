"""The search-space check of the rewiring knobs: searching them does nothing at a point that
never rewires, so a space whose sparse points never rewire is refused before anything runs.
What `techniques.sparsity.Sparsity.check_space` answers (`Technique.check_space`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from ..config import ConfigError, TrialConfig
from .rewiring import REWIRING_KNOBS, SCHEDULE_SHAPERS, planned_run, rewiring_updates


def check_space(probes: Mapping[str, list[Any]], base: Mapping[str, Any], limit: int) -> None:
    """Each combination (at most `limit`) of the ends and choices of what shapes the rewiring
    schedule must rewire at least once where it is sparse, when a rewiring knob is searched."""
    knobs = [name for name in probes if name in REWIRING_KNOBS]
    if not knobs:
        return
    shapers = [
        [(name, v) for v in values] for name, values in probes.items() if name in SCHEDULE_SHAPERS
    ]
    for combo in itertools.islice(itertools.product(*shapers), limit):
        try:
            config = TrialConfig.from_dict({**base, **dict(combo)})
        except ConfigError:
            continue  # not a point the search proposes
        if not config.sparsity.enabled or config.sparsity.rewiring == "static":
            continue
        run = planned_run(config)
        if next(rewiring_updates(config.sparsity, run), None) is None:
            point = ", ".join(f"{k}={v}" for k, v in combo)
            raise ConfigError(
                f"params.{knobs[0]}",
                f"the point {point} rewires 0 times in its {run.updates} updates "
                f"(sparsity.schedule_units {config.sparsity.schedule_units}), so searching "
                f"{', '.join(knobs)} does nothing; allowed: points that rewire (schedule_units "
                "relative, a lower period_multiplier or a longer run)",
            )
