"""Sweeps: the searcher (Ray Tune's public Searcher over Optuna's ask and tell on a journal, with
screening by predicted memory), where a sweep lives (`place`), its journal, and the driver that
launches and resumes it. The names users and tests import are re-exported here."""

from .driver import (
    SPACE_FILE,
    SweepResult,
    front,
    launch,
    resume,
    saved_space,
    status_counts,
    storage_root,
    trial_resources,
)
from .journal import JOURNAL, sweep_study
from .legacy import RecordWorkerDeaths, ScreenedOptunaSearch, _Point, trial_dirname  # noqa: F401
from .place import sweep_folder
from .searcher import ScreenedSearcher

__all__ = [
    "JOURNAL",
    "SPACE_FILE",
    "ScreenedSearcher",
    "SweepResult",
    "front",
    "launch",
    "resume",
    "saved_space",
    "status_counts",
    "storage_root",
    "sweep_folder",
    "sweep_study",
    "trial_resources",
]
