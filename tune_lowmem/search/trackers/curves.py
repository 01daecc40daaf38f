"""What a tracker records of a trial: its run, its epoch and the curves of one result.

A run is the sweep's point and seed (`Run`), as the store counts trainings: a trial that a
killed driver started after Tune's last snapshot runs again, under a new trial id, as the same
point and seed, and continues the same run.

A result's curves are the numbers the trial reported for that epoch (`trainable.final_result`):
training and validation metrics, the learning rate, epoch and update counts, the techniques'
own figures, and the memory and time columns (``memory.*``, ``time.*``: predicted, so flat,
and measured). Left out: what Ray adds to every result (its clock, iteration count, process),
the epoch (each curve's step) and the test metrics, which are reported beside a chosen
configuration and never shown where a configuration might be chosen by them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray.tune.result import AUTO_RESULT_KEYS

from ..progress import describe

STEP = "epoch"
NAME_LIMIT = 200  # characters of a run's folder name: file systems allow 255 bytes
UNSAFE = re.compile(r"[^\w.,=+ -]")  # what a run's name may not hold as a folder's name


def step(result: Mapping[str, Any]) -> int | None:
    """The epoch a result reports (None: a stored trial reporting its row again)."""
    epoch = result.get(STEP)
    return int(epoch) if _number(epoch) else None


def curves(result: Mapping[str, Any]) -> dict[str, float]:
    """The result's curves (see the module docstring), by the names the trial reported."""
    return {
        key: float(value)
        for key, value in result.items()
        if key not in AUTO_RESULT_KEYS
        and key != STEP
        and not key.startswith("test_")
        and _number(value)
    }


@dataclass(frozen=True)
class Run:
    """One training of the sweep: its point and seed (`key`), named by them and its searched
    values (`name`, a folder's name), and the trial that trains it now."""

    key: str  # "point 3 seed 0"
    name: str  # "point 3 seed 0 precision=bf16 schedule.lr_multiplier=1.153"
    trial_id: str
    params: dict[str, Any]  # the searched values, the seed and the point (a point's): hparams


def trial_run(trial_id: str, point: int | None, params: Mapping[str, Any]) -> Run:
    """The run of a Tune trial: its point (``trial.config["point"]``; None: the sweep's
    baseline, `search.baseline`) and its params (the searched values and the seed); the key
    first keeps the name unique when the values are cut short."""
    searched = {k: v for k, v in params.items() if k != "seed"}
    seed = params.get("seed", 0)
    key = f"baseline seed {seed}" if point is None else f"point {point} seed {seed}"
    name = UNSAFE.sub("_", f"{key} {describe(searched)}".strip())[:NAME_LIMIT].rstrip()
    return Run(key, name, trial_id, {**params, **({} if point is None else {"point": point})})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
