"""A search space's ``scheduler`` section: which early-stopping rule stops trials, and at which
rungs. Its keys, their checks and its rule against the base are kept here, by the settings the
rules (`search.stopping`) run on; the space reads the section through them.

It stands beside the space rather than in `search/`: the space reads it, and `search/` imports
the space.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..validation import Field, checked, choice, is_int, is_number, positive_int, require

SCHEDULERS = ("mo-asha", "hypervolume", "margin", "curve")  # `search.stopping.RULES`


@dataclass(frozen=True)
class SchedulerSettings:
    """The ``scheduler`` section (early stopping): rungs at grace_epochs * reduction_factor**k
    epochs, below max_epochs (the base's schedule.epochs); at each, the rule `type` names
    (`search.stopping`) stops trials: ``mo-asha`` by Pareto rank, ``hypervolume`` when a
    finished trial dominates its optimistic final values, ``margin`` when a trial at the rung of
    no more memory leads it by more than finished curves ever closed, ``curve`` when a finished
    trial dominates its final values extrapolated from its own curve."""

    type: str = "mo-asha"
    grace_epochs: int = 1
    reduction_factor: float = 3.0
    max_epochs: int = 1

    def rungs(self) -> list[int]:
        rungs, rung = [], float(self.grace_epochs)
        while rung < self.max_epochs:
            if not rungs or round(rung) > rungs[-1]:
                rungs.append(round(rung))
            rung *= self.reduction_factor
        return rungs

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "grace_epochs": self.grace_epochs,
            "reduction_factor": self.reduction_factor,
        }


def _scheduler_type(value: Any, field_name: str) -> str:
    return choice(value, SCHEDULERS, field_name)


def _reduction_factor(value: Any, field_name: str) -> float:
    return float(checked(value, is_number(value) and value > 1, field_name, "a number > 1"))


FIELDS = {  # the section's keys, each with its check and default (`validation.read_section`)
    "type": Field(_scheduler_type),
    "grace_epochs": Field(positive_int, 1),
    "reduction_factor": Field(_reduction_factor, 3),
}


def scheduler_settings(
    values: dict[str, Any] | None, base: Mapping[str, Any], searched: Collection[str]
) -> SchedulerSettings | None:
    """The section's values (read by `FIELDS`) as settings: its rungs count epochs of the base's
    fixed schedule, which no searched param (`searched`) may change."""
    if values is None:
        return None
    grace = values["grace_epochs"]
    epochs = base.get("schedule.epochs")
    require(
        is_int(epochs) and "schedule.epochs" not in searched,
        "scheduler",
        "early stopping needs a fixed number of epochs: set schedule.epochs in base, unsearched",
    )
    require(
        grace < epochs,
        "scheduler.grace_epochs",
        f"{grace} is not allowed; fewer than schedule.epochs ({epochs}) is required",
    )
    return SchedulerSettings(**values, max_epochs=epochs)
