"""What Ray Tune has saved of a sweep's experiment, read through its public API
(`Tuner.can_restore`, `ExperimentAnalysis`).

Tune snapshots its trials into the sweep folder every second or so; a trial can start, train
and end between two snapshots. A trial's store row is written only once a snapshot names the
trial (`wait_until_saved`), so after a killed driver Tune restores every trial that has a row:
its results and `ExperimentAnalysis` show every stored trial, and a trial done before the kill
reports its row again instead of its point running once more under another trial id.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from ray import tune

SAVED_WAIT_S = 120.0  # then the row is written anyway: a result is never dropped for this
POLL_S = 0.25


def tune_saved(folder: Path) -> bool:
    """Tune's experiment can be restored: its tuner (written as the sweep starts) and a first
    snapshot of its trials (written within a second of the start) are both there."""
    return tune.Tuner.can_restore(str(folder)) and any(Path(folder).glob("experiment_state-*.json"))


def tune_trials(folder: Path) -> dict[str, dict[str, Any]]:
    """Tune's trials in its newest experiment state (what its restore runs): id -> config."""
    if not tune_saved(folder):
        return {}
    analysis_log = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level = analysis_log.level
    analysis_log.setLevel(logging.ERROR)  # it warns of every trial that has no result yet
    try:
        trials = tune.ExperimentAnalysis(str(folder)).trials
    finally:
        analysis_log.setLevel(level)
    return {trial.trial_id: trial.config for trial in trials}


def wait_until_saved(folder: Path, trial_id: str, timeout: float = SAVED_WAIT_S) -> bool:
    """Wait until Tune's saved experiment in `folder` names `trial_id` (False: it did not in
    `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        if _names(folder, trial_id):
            return True
        if time.monotonic() >= deadline:
            return False
        # a read grows with the sweep's trials: waiting twice as long as it took keeps a
        # trial's worker reading Tune's state at most a third of the time
        time.sleep(max(POLL_S, 2 * (time.monotonic() - started)))


def _names(folder: Path, trial_id: str) -> bool:
    try:
        return trial_id in tune_trials(folder)
    except Exception:  # noqa: BLE001 - Tune's reader fails on a half-written snapshot: read again
        return False
