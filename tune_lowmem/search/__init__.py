"""Sweeps: the searcher (Ray Tune's public Searcher over Optuna's ask and tell on a journal, with
screening by predicted memory), where a sweep lives (`place`), its journal, the driver that
launches and resumes it, and where Ray meets training (`trainable`: the trial Tune runs;
`progress`: the lines a sweep prints). The names users and tests import are re-exported here,
each imported when first asked for: a module of the package (`search.trainable`'s Ray-free
functions on a machine without Ray or Optuna) imports nothing of the others."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from .place import sweep_folder
    from .searcher import ScreenedSearcher

_HOMES = {
    **dict.fromkeys(
        [
            "SPACE_FILE",
            "SweepResult",
            "front",
            "launch",
            "resume",
            "saved_space",
            "status_counts",
            "storage_root",
            "trial_resources",
            "RecordWorkerDeaths",
            "trial_dirname",
        ],
        "driver",
    ),
    "JOURNAL": "journal",
    "sweep_study": "journal",
    "sweep_folder": "place",
    "ScreenedSearcher": "searcher",
    # the names sweeps launched before the searcher's package pickled (`legacy`)
    "ScreenedOptunaSearch": "legacy",
    "_Point": "legacy",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


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
