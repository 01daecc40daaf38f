"""Sweeps launched before the searcher became Ray Tune's public `Searcher` (until issue 14).

Their Tune files pickle names of the old single module `tune_lowmem.search`: the searcher
`ScreenedOptunaSearch` with its `_Point`s, the callback `RecordWorkerDeaths`, `trial_dirname`.
These names unpickle them as today's objects; the searcher keeps what it pickled that still
means something (the space, the sweep, which Tune trial holds which point and seed) and rebuilds
the rest, so such a sweep resumes where it is (moving it needs a sweep launched by this version:
the old files have no `PlacedSearch`).
"""

from __future__ import annotations

from typing import Any

from .driver import RecordWorkerDeaths, trial_dirname
from .searcher import Point, ScreenedSearcher

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


__all__ = ["RecordWorkerDeaths", "ScreenedOptunaSearch", "_Point", "trial_dirname"]
