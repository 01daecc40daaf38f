"""The Python API: what the `tune-lowmem` commands do, for a notebook or a script.

    import tune_lowmem

    runs = tune_lowmem.open_store("runs")
    runs.sweeps()                           # ['quickstart']
    runs.trials("quickstart")               # one row per trial (pandas), config.*, metric.*, ...
    runs.epochs("quickstart")               # one row per trial and epoch
    runs.front("quickstart")                # the seed-averaged Pareto front, validation data
    runs.best_config(3.0, "quickstart")     # a TrialConfig: the best within 3 MB
    runs.best(3.0, max_slowdown=1.5)        # ... and at most 1.5x the baseline's time per update
    runs.front(objectives=["val_accuracy:max", "predicted_total_mb:min", "measured_update_s:min"])
    result = tune_lowmem.launch("search_spaces/quickstart.yaml", store="runs")
    result.front                            # the sweep's front (pandas)

The commands are built on it: ``launch``/``resume`` call `launch`/`resume`, ``pareto`` and
``status`` open the store with `open_store` and ask it. Choices are made on validation data only;
test metrics are reported beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from . import store as parquet
from .config import ConfigError, TrialConfig
from .preflight import store_folder

if TYPE_CHECKING:  # the store's readers import neither Ray nor torch; a sweep needs both
    from .search.driver import SweepResult


class SpaceUnreadable(ValueError):
    """A sweep's saved space file is there but cannot be read (empty, not YAML, not a mapping);
    the store's rows still answer. Its message is one line naming the file."""


@dataclass(frozen=True)
class SweepStatus:
    """What a store holds of one sweep."""

    name: str
    counts: dict[str, int]  # stored trials by status, every status named
    planned_points: int | None  # the space's num_samples (None: its space is not readable)
    seeds_per_point: int | None
    space_problem: str | None  # why the saved space could not be read, in one line
    baseline: bool = False  # the sweep trains its baseline too (`search.baseline`)

    @property
    def stored(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Store:
    """A Parquet store (`tune_lowmem.store`) and the sweeps in it; read-only except `compact`."""

    root: Path

    def sweeps(self) -> list[str]:
        """The names of the sweeps with at least one stored trial."""
        return parquet.list_sweeps(self.root)

    def trials(
        self, sweep: str | None = None, columns: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """One row per trial (of one sweep, or all): ``trial_id``, ``status``, ``config.*``,
        ``metric.*`` (final values), ``memory.*``, ``time.*`` (seconds measured on the trial's
        device: per update at steady state, per evaluation, per epoch; empty in rows of older
        stores); ``columns`` reads only those (a name ending in ``.`` stands for all that start
        with it)."""
        return parquet.read_trials(self.root, sweep, columns)

    def epochs(self, sweep: str | None = None, trial_id: str | None = None) -> pd.DataFrame:
        """One row per trial and epoch: ``epoch``, the ``metric.*`` reported then and the
        epoch's own ``time.*``."""
        return parquet.read_epochs(self.root, sweep, trial_id)

    def space(self, sweep: str) -> dict[str, Any] | None:
        """The search space the sweep was launched with, as plain values (None: launched
        elsewhere, only its rows are here). Raises `SpaceUnreadable` when the file is there but
        empty, not YAML or not a mapping."""
        from .analysis.objectives import read_saved_space

        values, problem = read_saved_space(self.root, parquet.check_name(sweep, "sweep"))
        if problem is not None:
            raise SpaceUnreadable(problem)
        return values

    def status(self, sweep: str) -> SweepStatus:
        """Stored trials by status, and what the sweep planned (from its saved space)."""
        name = parquet.check_name(sweep, "NAME")
        problem, space = None, None
        try:
            space = self.space(name)
        except SpaceUnreadable as error:
            problem = str(error)
        if space is None and problem is None and name not in self.sweeps():
            known = ", ".join(self.sweeps()) or "none"
            raise ConfigError("NAME", f"no sweep {name!r} in {self.root}; sweeps there: {known}")
        rows = self.trials(name, columns=["status"])
        found = rows["status"].value_counts() if len(rows) else pd.Series(dtype=int)
        counts = {status: int(found.get(status, 0)) for status in parquet.STATUSES}
        return SweepStatus(
            name,
            counts,
            space.get("num_samples") if space else None,
            space.get("seeds_per_point", 1) if space else None,
            problem,
            bool(space.get("baseline", False)) if space else False,  # older spaces: none
        )

    def front(
        self,
        sweep: str | None = None,
        task: str | None = None,
        objectives: Sequence[str] | None = None,
        min_accuracy: float | None = None,
    ) -> pd.DataFrame:
        """The configurations non-dominated on the objectives (default: the sweep's own), each
        averaged over its seeds: ``<column>.mean``, ``.ci95`` (1.96 standard errors),
        ``.count`` for every metric, memory and time column (e.g.
        ``time.measured_update_s.mean``), ``n`` (seeds), ``configuration``, ``points``,
        ``trial_ids``."""
        from .analysis import query

        return query.front(self._select(sweep, task, objectives, min_accuracy))

    def best(
        self,
        max_memory_mb: float | None = None,
        sweep: str | None = None,
        task: str | None = None,
        objectives: Sequence[str] | None = None,
        max_slowdown: float | None = None,
        max_update_s: float | None = None,
    ) -> pd.Series:
        """The seed-averaged configuration with the best validation score within
        ``max_memory_mb`` of the memory objective, ``max_slowdown`` times the baseline's
        seconds per update and ``max_update_s`` seconds per update (None: no such limit; one at
        least; times measured, else predicted: `analysis.slowdown`), as a `front` row."""
        from .analysis import query

        selection = self._select(sweep, task, objectives, None)
        return query.best(selection, max_memory_mb, max_slowdown, max_update_s)

    def best_config(
        self,
        max_memory_mb: float | None = None,
        sweep: str | None = None,
        task: str | None = None,
        objectives: Sequence[str] | None = None,
        max_slowdown: float | None = None,
        max_update_s: float | None = None,
    ) -> TrialConfig:
        """`best` as a `TrialConfig` (seed 0), ready for `tune_lowmem.train.Trainer`."""
        from .analysis import query
        from .analysis.points import trial_config

        selection = self._select(sweep, task, objectives, None)
        row = query.best(selection, max_memory_mb, max_slowdown, max_update_s)
        return TrialConfig.from_dict(trial_config(selection.done, row["seed_group"]))

    def answer(
        self,
        sweep: str | None = None,
        task: str | None = None,
        objectives: Sequence[str] | None = None,
        max_memory_mb: float | None = None,
        min_accuracy: float | None = None,
        form: str = "table",
        width: int | None = None,
        store_name: str | None = None,
        max_slowdown: float | None = None,
        max_update_s: float | None = None,
    ) -> str:
        """What `tune-lowmem pareto` prints: the front (or the best within ``max_memory_mb``,
        ``max_slowdown`` and ``max_update_s``, as TrialConfig YAML) as a table, JSON or CSV; the table at most ``width`` characters
        wide (None: the full table), whose train lines name the store ``store_name`` (default:
        its path)."""
        from .analysis import query

        return query.answer(
            str(self.root),
            sweep,
            task,
            list(objectives or []),
            max_memory_mb,
            min_accuracy,
            form,
            width,
            store_name,
            max_slowdown,
            max_update_s,
        )

    def compact(self, sweep: str | None = None) -> int:
        """Merge a sweep's one-trial files once there are many (`tune_lowmem.store.compact`);
        the number of files merged away. Safe while the sweep runs."""
        return parquet.compact(self.root, sweep)

    def _select(self, sweep, task, objectives, min_accuracy):
        from .analysis import query

        return query.select(str(self.root), sweep, task, list(objectives or []), min_accuracy)


def open_store(path: str | Path, field: str = "path") -> Store:
    """The store at ``path`` (a folder; a missing one holds no sweeps). ``field`` is what an
    error names the path (the commands: ``--store``)."""
    return Store(store_folder(path, field))


def launch(
    space: str | Path | Mapping[str, Any],
    name: str | None = None,
    store: str | Path = "runs",
    address: str | None = None,
    num_samples: int | None = None,
    mlflow: str | None = None,
) -> SweepResult:
    """Run a sweep to its end: ``space`` is a search-space YAML file or the same as a dict
    (validated before anything starts); ``address`` a Ray cluster (None: start one here);
    ``mlflow`` an MLflow tracking URI to log its trials to (docs/tracking.md). Returns the
    sweep's `SweepResult`: ``front``, ``trials`` (pandas), ``space``, ``root``."""
    from .search import driver
    from .space import SearchSpace

    # every check of the space before anything starts
    parsed = SearchSpace.load(space, num_samples, mlflow)
    return driver.launch(parsed, name, store, address)


def resume(
    name: str,
    store: str | Path = "runs",
    address: str | None = None,
    mlflow: str | None = None,
) -> SweepResult:
    """Continue a stopped sweep (a killed driver, a pre-emption): finished trials are kept,
    the rest run (``mlflow``: logged to that tracking URI from now on); returns its
    `SweepResult` as `launch` does."""
    from .search import driver

    return driver.resume(name, store, address, mlflow)
