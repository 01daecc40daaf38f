"""Ray Tune's `SearchGenerator` around the searcher, restored in the sweep's present place.

The generator makes Tune's trials from the searcher's points. Tune saves it with the experiment
it was given, whose storage names where the sweep then was, and its restore brings that back: a
trial created after a resume would write its checkpoints there, and fail ("Unable to set up
cluster storage") when that place is gone. Tune moves the trials it restores to the experiment
folder's new place; this moves the generator's experiment the same way, to the sweep's place.
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from . import place


class PlacedSearch(SearchGenerator):
    """The searcher, at most `max_concurrent` trials at a time (None: no cap), in its place."""

    def __init__(self, searcher: Searcher, sweep: str, max_concurrent: int | None):
        if max_concurrent:
            searcher = ConcurrencyLimiter(searcher, max_concurrent=max_concurrent)
        super().__init__(searcher)
        self.sweep = sweep

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        # the storage new trials get (one object with the experiment's own `storage`)
        state["experiment"].spec["storage"].storage_fs_path = str(
            place.root(self.sweep) / place.RAY
        )
