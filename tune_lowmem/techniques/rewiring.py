"""When dynamic sparsity rewires its masks, for a run of any length.

The reference (IntelAI/dynamic-reparameterization) trains WRN-28-2 for 200 epochs of 450
updates (45,000 images, batch 100) and rewires every 100 / 200 / 400 / 800 updates from epochs
0 / 25 / 80 / 140, stopping at epoch 190 (`SparsityConfig.stop_epoch` 0.95); Sohoni et al. halve
the periods for the DC-Transformer's 50,000 updates. `SparsityConfig.schedule_units` says how
that carries over to a run of another length:

- relative (default): periods and boundaries are both fractions of the run's updates, so a run
  rewires as often, for its length, as the paper's does (a 180-update run rewires about every
  update early on); at the paper's length and batch it is the paper's schedule exactly;
- absolute: periods in updates as the reference has them, boundaries scaled in epochs (the
  schedule before relative units existed): a short run rewires rarely or never.

The `constant` period schedule rewires every `constant_period` updates in both units (only its
stop scales). Either way rewiring happens after update u when u > 0 and u % period == 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from ..config import TrialConfig
from .sparsity_config import SparsityConfig

# The reference's WRN schedule: (from epoch, of PAPER_EPOCHS) -> updates between rewirings.
PAPER_PERIODS = ((0, 100), (25, 200), (80, 400), (140, 800))
PAPER_EPOCHS = 200
# The reference's run in updates (WRN-28-2: 200 epochs x 450).
REFERENCE_UPDATES = 200 * 450
# What sparsity reads of a task (`Technique.TASK_NEEDS`): the paper's run of the task in updates,
# which relative rewiring units scale from (the reference run for a task the paper did not
# train), and a scale of the schedule's periods.
TASK_NEEDS = {"PAPER_UPDATES": REFERENCE_UPDATES, "REWIRING_PERIOD_SCALE": 1.0}
# The knobs that do something only when rewiring happens: searching them needs rewiring.
REWIRING_KNOBS = tuple(
    f"sparsity.{name}"
    for name in (
        "period_multiplier",
        "fraction_multiplier",
        "fraction",
        "initial_threshold",
        "period_schedule",
        "constant_period",
        "stop_epoch",
        "schedule_units",
    )
)
# What else decides whether, and how often, a run rewires.
SCHEDULE_SHAPERS = (
    *REWIRING_KNOBS,
    "sparsity.density",
    "sparsity.rewiring",
    "schedule.epochs",
    "schedule.batch_size",
    "schedule.max_updates",
    "schedule.max_epochs",
    "schedule.max_tokens",
    "data.train_subset",
    "data.val_size",
    "data.split",
)


@dataclass(frozen=True)
class RunLength:
    """What the schedule scales to: the run's updates, and the paper's run of the same task."""

    updates: int
    updates_per_epoch: int
    paper_updates: int = REFERENCE_UPDATES
    scale: float = 1.0  # the task's period scale (REWIRING_PERIOD_SCALE of TASK_NEEDS)

    @property
    def epochs(self) -> int:
        return math.ceil(self.updates / max(1, self.updates_per_epoch))

    @classmethod
    def of(cls, config: TrialConfig, task) -> RunLength:
        """The run `task` (real or synthetic) trains for `config`."""
        return cls(
            task.total_updates(),
            task.updates_per_epoch(),
            getattr(task, "PAPER_UPDATES", TASK_NEEDS["PAPER_UPDATES"]),
            getattr(task, "REWIRING_PERIOD_SCALE", TASK_NEEDS["REWIRING_PERIOD_SCALE"]),
        )


def rewiring_period(
    sparsity: SparsityConfig, run: RunLength, epoch: int, update: int
) -> int | None:
    """Updates between rewirings at 0-based `update` (in `epoch`); None when none happen."""
    relative = sparsity.schedule_units == "relative"
    if sparsity.rewiring == "static":
        return None
    if (
        update >= sparsity.stop_epoch * run.updates
        if relative
        else epoch >= sparsity.stop_epoch * run.epochs
    ):
        return None
    if sparsity.period_schedule == "constant":
        base, length = sparsity.constant_period, 1.0
    elif relative:  # the paper's phase at the same fraction of the run
        base = [p for start, p in PAPER_PERIODS if update * PAPER_EPOCHS >= start * run.updates][-1]
        length = run.updates / run.paper_updates
    else:
        base = [p for start, p in PAPER_PERIODS if epoch * PAPER_EPOCHS >= start * run.epochs][-1]
        length = 1.0
    return max(1, round(base * length * sparsity.period_multiplier * run.scale))


def rewires_after(sparsity: SparsityConfig, run: RunLength, epoch: int, update: int) -> bool:
    period = rewiring_period(sparsity, run, epoch, update)
    return period is not None and update > 0 and update % period == 0


def rewiring_updates(sparsity: SparsityConfig, run: RunLength) -> Iterator[int]:
    """The 0-based updates after which the run rewires, in order."""
    per_epoch = max(1, run.updates_per_epoch)
    return (u for u in range(run.updates) if rewires_after(sparsity, run, u // per_epoch, u))


@functools.lru_cache(maxsize=256)
def first_rewiring(sparsity: SparsityConfig, run: RunLength) -> int | None:
    """The first update after which the run rewires; None when it never does (finding that
    walks the whole run, hence the cache: the profiler asks for every trial)."""
    return next(rewiring_updates(sparsity, run), None)


def planned_run(config: TrialConfig) -> RunLength:
    """A trial's run length from its config alone, as its task built synthetic (no data set
    loaded, as the profiler builds it) estimates it (exact for CIFAR-10; for IWSLT'14 epochs of
    the full corpus). The task class comes from the config, so the technique imports no task."""
    import torch

    return RunLength.of(config, config.task_type()(config, torch.device("cpu"), synthetic=True))


def planned_rewirings(config: TrialConfig) -> int:
    """How many times a trial will rewire (0 when dense)."""
    if not config.sparsity.enabled:
        return 0
    return sum(1 for _ in rewiring_updates(config.sparsity, planned_run(config)))


def planned_first_rewiring(config: TrialConfig) -> int | None:
    """The first update after which a trial rewires; None when it never does (or is dense)."""
    if not config.sparsity.enabled:
        return None
    return first_rewiring(config.sparsity, planned_run(config))


def rewires(config: TrialConfig) -> bool:
    """Whether a trial rewires at all (its peak memory may then be a rewiring's)."""
    return planned_first_rewiring(config) is not None
