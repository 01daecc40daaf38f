"""The names that Tune files of older sweeps pickle, read as today's objects.

Sweeps launched before the searcher became Ray Tune's public `Searcher` (until issue 14) pickle
names of the old single module `tune_lowmem.search`: the searcher `ScreenedOptunaSearch` with
its `_Point`s, the callback `RecordWorkerDeaths`, `trial_dirname` (the package re-exports the
last two from `driver`). The searcher keeps what it pickled that still means something (the
space, the sweep, which Tune trial holds which point and seed) and rebuilds the rest, so such a
sweep resumes where it is (moving it needs a sweep launched by this version: the old files have
no `PlacedSearch`).

Sweeps launched before a module moved pickle its objects under its old name: the callback
`ProgressPrinter` under `tune_lowmem.progress` (before `progress` and `trainable` moved into
`search/`), the early-stopping rules under `tune_lowmem.search.scheduler` and its siblings,
the samplers under `tune_lowmem.search.known_memory`, a space's params, conditions and
settings under `tune_lowmem.params` and its siblings (before `search/samplers/`,
`search/stopping/` and `space/` became packages). `old_module_names` leads each old name to
its module before Tune unpickles a sweep.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .searcher import Point, ScreenedSearcher

MOVED_MODULES = {  # a module's name in older sweeps' pickles -> its name now
    "tune_lowmem.progress": "tune_lowmem.search.progress",
    "tune_lowmem.trainable": "tune_lowmem.search.trainable",
    "tune_lowmem.search.known_memory": "tune_lowmem.search.samplers.known_memory",
    "tune_lowmem.search.qlognehvi": "tune_lowmem.search.samplers.qlognehvi",
    "tune_lowmem.search.gaussian_process": "tune_lowmem.search.samplers.gaussian_process",
    "tune_lowmem.search.scheduler": "tune_lowmem.search.stopping.asha",
    "tune_lowmem.search.hv_stopping": "tune_lowmem.search.stopping.hypervolume",
    "tune_lowmem.search.curve_stopping": "tune_lowmem.search.stopping.curve",
    "tune_lowmem.search.margin_stopping": "tune_lowmem.search.stopping.margin",
    "tune_lowmem.params": "tune_lowmem.space.params",
    "tune_lowmem.constraints": "tune_lowmem.space.constraints",
    "tune_lowmem.scheduler_settings": "tune_lowmem.space.scheduler_settings",
    "tune_lowmem.sampler_settings": "tune_lowmem.space.sampler_settings",
    "tune_lowmem.tracking_settings": "tune_lowmem.space.tracking_settings",
}

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
        sys.modules.setdefault(old, importlib.import_module(new))


__all__ = ["MOVED_MODULES", "ScreenedOptunaSearch", "_Point", "old_module_names"]
