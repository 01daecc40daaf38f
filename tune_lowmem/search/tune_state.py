"""What Ray Tune has saved of a sweep's experiment, read through its public API
(`Tuner.can_restore`, `ExperimentAnalysis`).

Tune snapshots its trials (``experiment_state-*.json``, every trial's state, about 25 kB each)
at the period Tune chooses itself (``TUNE_GLOBAL_CHECKPOINT_S=auto``: at least 10 s, and at most
a twentieth of the driver's time), so the snapshot's cost, which grows with the sweep's trials,
never grows the cost of a trial. Nothing waits for a snapshot: a trial stores its row as it ends,
and after a killed driver the searcher rebuilds from the journal, the store and this snapshot
(`searcher.rejoin`), so trials that ended after the snapshot are neither lost nor run again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ray import tune

SNAPSHOTS = "experiment_state-*.json"


def tune_saved(folder: Path) -> bool:
    """Tune's experiment can be restored: its tuner (written as the sweep starts) and a first
    snapshot of its trials (written as its first trial is made) are both there."""
    return tune.Tuner.can_restore(str(folder)) and any(Path(folder).glob(SNAPSHOTS))


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
