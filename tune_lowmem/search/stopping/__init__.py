"""The early-stopping rule a space's ``scheduler.type`` names (`scheduler_settings.SCHEDULERS`),
built as Tune's scheduler: one place that maps the name to its class, for the driver and the
replay."""

from __future__ import annotations

from collections.abc import Mapping

from ...space.scheduler_settings import SchedulerSettings
from .asha import MultiObjectiveASHA
from .curve import CurveStopping
from .hypervolume import HypervolumeStopping
from .margin import MarginStopping

RULES = {
    rule.TYPE: rule
    for rule in (MultiObjectiveASHA, HypervolumeStopping, MarginStopping, CurveStopping)
}


def build_scheduler(
    settings: SchedulerSettings, objectives: Mapping[str, str], sweep: str | None = None, **options
) -> MultiObjectiveASHA:
    """The rule `settings.type` names; `options` go to its class (`memory_band`: mo-asha's)."""
    return RULES[settings.type](settings, objectives, sweep, **options)
