"""The names that Tune files of older sweeps pickle, read as today's objects.

Sweeps launched before the searcher became Ray Tune's public `Searcher` (until issue 14) pickle
names of the old single module `tune_lowmem.search`: the searcher `ScreenedOptunaSearch` with
its `_Point`s, the callback `RecordWorkerDeaths`, `trial_dirname` (the package re-exports the
last two from `driver`). The searcher keeps what it pickled that still means something (the
space, the sweep, which Tune trial holds which point and seed) and rebuilds the rest, so such a
sweep resumes where it is (moving it needs a sweep launched by this version: the old files have
no `PlacedSearch`).

Sweeps launched while `progress` and `trainable` stood at the package's root pickle their
callback `ProgressPrinter` under `tune_lowmem.progress`: `old_module_names` leads those names
to the modules under `search/` before Tune unpickles a sweep.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .searcher import Point, ScreenedSearcher

MOVED_MODULES = {"tune_lowmem.progress": ".progress", "tune_lowmem.trainable": ".trainable"}

_Point = Point  # the old searcher's snapshots pickle their points under this name


class ScreenedOptunaSearch(ScreenedSearcher):
    """The old searcher's pickled state, read as today's."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(
            {
                "space": state["_search_space"],
                "sweep": state["_sweep"],
                "assigned": state["_assigned"],
                "_metric": None,
                "_mode": None,
            }
        )


def old_module_names() -> None:
    """Each module's old name, as pickles of older sweeps spell it, leads to the module."""
    for old, new in MOVED_MODULES.items():
        sys.modules.setdefault(old, importlib.import_module(new, __package__))


__all__ = ["MOVED_MODULES", "ScreenedOptunaSearch", "_Point", "old_module_names"]
