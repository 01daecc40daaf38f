"""The sweep: a search space's sampler inside Ray Tune's OptunaSearch, trials, and the store.

Where a sweep keeps things, under the store root ``DIR``::

    DIR/trials/, DIR/epochs/     the Parquet store (`tune_lowmem.store`): what every trial gave
    DIR/ray/<sweep>/             Tune's experiment (trial states, checkpoints, the searcher) plus
        space.yaml               the validated search space, as resume reads it
        optuna.journal           Optuna's study (JournalStorage): every point asked and told

Points and seeds: the sampler proposes a point once; a feasible point runs as
``seeds_per_point`` Tune trials (seeds 0..k-1, one store row each, sharing a ``seed_group``), and
the sampler is told the mean over the seeds that completed. `num_samples` counts points.

Memory budget: `ScreenedOptunaSearch.suggest` predicts each proposed point's memory before Tune
sees it; a point over the budget (or not a valid config) is stored at once as infeasible (or
failed) under the id ``infeasible-<n>`` (``invalid-<n>``), told to Optuna as a constraint
violation (``Trial.set_constraint``: predicted MB over the budget, which NSGA-II, TPE and GP rank
below every feasible point) with dominated values, and another point is asked for, so it never
occupies a worker.

Surviving the driver: the journal is written as points are asked (with their params) and
told; the store is written by the trials themselves; Tune snapshots its trials and then the
searcher, every second. On resume Tune restarts unfinished trials from their last checkpoint, a
trial that had already stored its row reports that row again instead of training (see
`trainable`), and the searcher rebuilds its state from those three records
(`ScreenedOptunaSearch.rejoin`), not from its own snapshot alone, which a driver killed between
the two files leaves older than Tune's trials. So every point runs once per seed, a point asked
but never given to a trial runs after the restart, and every trial lands in the store once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from ray import tune
from ray.tune import Callback
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from . import pareto, preflight, store
from .analysis import baselines
from .config import ConfigError
from .progress import ProgressPrinter, say
from .space import CONSTRAINT, SearchSpace, store_column, worst_value
from .tasks.registry import module_directory
from .trainable import (
    Screening,
    memory_metrics,
    result_from_row,
    screen,
    store_record,
    train_trial,
    write_screened,
)
from .yaml_loading import load_file

JOURNAL = "optuna.journal"
SPACE_FILE = "space.yaml"
TUNE_ENVIRONMENT = {
    "TUNE_GLOBAL_CHECKPOINT_S": "1",  # snapshot trials and searcher every second: what a killed driver loses
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",  # frequent snapshots are wanted
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0 the classic reporter prints nothing; ours prints
}
SCREENED_PREFIXES = {"infeasible": "infeasible-", "failed": "invalid-"}
PARAMS_ATTR = "tune_lowmem.params"  # an asked point's params, kept in the journal with it
log = logging.getLogger(__name__)


def storage_root(value: str | Path) -> Path:
    """The sweep's one storage root (store, Tune's experiment, Optuna's journal), as a path that
    every node of the cluster must see at the same place: a shared file system (EFS, NFS, Lustre).
    Not a bucket URI: the store renames each trial's file into place and the journal locks its
    file, which object stores cannot do."""
    text = str(value)
    if "://" in text:
        raise ConfigError("--store", f"{text!r} is not allowed; a file-system path that every node "
                          "mounts at the same place is required (e.g. EFS at /mnt/tune-lowmem)")
    return Path(text).expanduser().resolve()


def sweep_folder(root: str | Path, sweep: str) -> Path:
    return Path(root) / "ray" / store.check_name(sweep, "name")


def sweep_study(root: str | Path, sweep: str):
    """The sweep's Optuna study, read from its journal: every point asked, and what it was told."""
    import optuna

    return optuna.load_study(study_name=sweep, storage=_journal_storage(str(sweep_folder(root, sweep) / JOURNAL)))


@dataclass
class _Point:
    """A feasible point: its params, and what each of its seeds gave (None: did not complete)."""

    params: dict[str, Any]
    given: set[int] = field(default_factory=set)  # seeds given to Tune trials (or found stored)
    outcomes: dict[int, list[float] | None] = field(default_factory=dict)


class ScreenedOptunaSearch(OptunaSearch):
    """OptunaSearch that screens each point by predicted memory and runs it once per seed."""

    def __init__(self, space: SearchSpace, sweep: str, root: str, journal: str):
        _quiet_optuna()
        super().__init__(
            space=space.sample,
            metric=list(space.objectives),
            mode=["max" if d == "maximize" else "min" for d in space.objectives.values()],
            sampler=space.build_sampler(),
            study_name=sweep,
            storage=_journal_storage(journal),
        )
        self._search_space = space
        self._sweep, self._root, self._journal = sweep, root, journal
        self._points: dict[int, _Point] = {}  # Optuna trial number -> feasible point
        self._assigned: dict[str, tuple[int, int]] = {}  # Tune trial id -> (point, seed)
        self._open: list[int] = []  # points with seeds not yet handed out
        self._unscreened: list[int] = []  # points asked before a restart, never handed out
        self._asked = 0  # points asked of Optuna (with their params in the journal)
        self.rejoin({})  # a resumed sweep that Tune cannot restore starts from the journal

    # The study lives in the journal and the sampler is rebuilt from the space: neither is pickled
    # (Optuna's GA samplers hold a thread lock, which OptunaSearch.save cannot pickle).
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_ot_study", "_sampler", "_storage"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        _quiet_optuna()
        self.__dict__.update(state)
        self._sampler = self._search_space.build_sampler()
        self._storage = _journal_storage(self._journal)
        self._setup_study(self._mode)
        self.rejoin(_tune_trials(Path(self._journal).parent))  # Tune's tuner.pkl or its snapshot

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.__getstate__(), handle)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as handle:
            self.__setstate__(pickle.load(handle))

    def rejoin(self, tune_trials: Mapping[str, Mapping[str, Any]]) -> None:
        """Rebuild the points, their seeds and outcomes from what was written as it happened:
        the journal (every point asked, with its params, and told), Tune's trials (trial id ->
        the config this searcher gave it) with this searcher's own assignments, and the store's
        rows (each names its point and seed). Points told neither way are told now; an asked
        point that no trial holds or stored is screened again and handed out first; the sampler
        is reseeded past the points asked."""
        from optuna.trial import TrialState

        trials = self._ot_study.get_trials(deepcopy=False)
        self._ot_study.sampler = self._search_space.build_sampler(seed_offset=len(trials))
        asked = {t.number: t.user_attrs[PARAMS_ATTR] for t in trials if PARAMS_ATTR in t.user_attrs}
        running = {t.number for t in trials if t.state == TrialState.RUNNING}
        for number in sorted(running - set(asked)):  # the driver died between asking and recording
            self._tell(number, None)
        self._asked = len(asked)
        self._assigned.update((i, (c["point"], c["params"]["seed"])) for i, c in tune_trials.items())
        stored = self._stored_outcomes()
        self._points = {}
        for number, seed in [*self._assigned.values(), *stored]:
            self._points.setdefault(number, _Point(asked[number])).given.add(seed)
        for (number, seed), values in stored.items():
            self._points[number].outcomes[seed] = values
        self._unscreened = sorted((running & set(asked)) - set(self._points))
        live = sorted(running & set(self._points))
        self._open = [number for number in live if self._free_seed(self._points[number]) is not None]
        for number in live:
            self._tell_if_done(number)

    def _stored_outcomes(self) -> dict[tuple[int, int], list[float] | None]:
        """(point, seed) -> the objective values of every trained trial's row in the store."""
        rows = store.read_trials(self._root, self._sweep)
        if rows.empty or "point" not in rows:
            return {}
        screened = rows["trial_id"].str.startswith(tuple(SCREENED_PREFIXES.values()))
        trained = rows[rows["point"].notna() & ~screened].to_dict("records")
        space = self._search_space
        return {(int(row["point"]), int(row["config.seed"])): self._values(result_from_row(space, row), False)
                for row in trained}

    def _free_seed(self, point: _Point) -> int | None:
        return min(set(range(self._search_space.seeds_per_point)) - point.given, default=None)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if trial_id not in self._assigned:
            if not self._open:
                number = self._next_point()
                if number is None:
                    return Searcher.FINISHED
                self._open.append(number)
            number = self._open[0]
            point = self._points[number]
            seed = self._free_seed(point)
            self._assigned[trial_id] = (number, seed)
            point.given.add(seed)
            if self._free_seed(point) is None:
                self._open.pop(0)
        number, seed = self._assigned[trial_id]
        return {"point": number, "params": {**self._points[number].params, "seed": seed}}

    def _next_point(self) -> int | None:
        """The next feasible point, asked before a restart or anew; store and tell the others."""
        space = self._search_space
        while self._unscreened or self._asked < space.num_samples:
            trial, params = self._unscreened_point() if self._unscreened else self._ask()
            screening = screen(space, params)
            if screening.predicted is not None and space.memory_budget_mb is not None:
                excess = screening.predicted.total_mb - space.memory_budget_mb
                trial.set_constraint(CONSTRAINT, excess)
            if screening.feasible:
                self._points[trial.number] = _Point(params)
                return trial.number
            self._answer_screened(trial, params, screening)
        return None

    def _ask(self) -> tuple[Any, dict[str, Any]]:
        trial = self._ot_study.ask()
        params = self._suggest_from_define_by_run_func(self._space, trial)
        trial.set_user_attr(PARAMS_ATTR, params)
        self._asked += 1
        return trial, params

    def _unscreened_point(self) -> tuple[Any, dict[str, Any]]:
        from optuna.trial import Trial

        frozen = self._ot_study.get_trials(deepcopy=False)[self._unscreened.pop(0)]
        return Trial(self._ot_study, frozen._trial_id), frozen.user_attrs[PARAMS_ATTR]

    def _answer_screened(self, trial, params: dict[str, Any], screening: Screening) -> None:
        space = self._search_space
        trial_id = f"{SCREENED_PREFIXES[screening.status]}{trial.number:05d}"
        write_screened(self._root, self._sweep, trial_id, space, trial.number, params, screening)
        say(f"{trial_id} {screening.status}, not trained: {screening.reason}")
        if screening.status == "failed":
            self._tell(trial.number, None)
            return
        self._tell(trial.number, self._dominated(memory_metrics(screening.predicted, None)))

    def _dominated(self, memory: dict[str, Any]) -> list[float]:
        """An infeasible point's values: its memory where known, the worst value of the rest."""
        values = []
        for name, direction in self._search_space.objectives.items():
            is_memory = name.startswith("memory_") or name == "flops_per_step"
            known = memory.get(name) if is_memory else None
            values.append(worst_value(name, direction, self._search_space.base["task"]) if known is None else float(known))
        return values

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """No pruning: a point's value is the mean over its seeds, known when they all end."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self._assigned:
            return
        number, seed = self._assigned[trial_id]
        point = self._points[number]
        if seed in point.outcomes:
            return
        point.outcomes[seed] = self._values(result, error)
        self._tell_if_done(number)

    def _tell_if_done(self, number: int) -> None:
        """Tell Optuna a point's mean over its seeds once every seed has an outcome."""
        outcomes = self._points[number].outcomes
        if len(outcomes) == self._search_space.seeds_per_point:
            done = [v for v in outcomes.values() if v is not None]
            self._tell(number, np.mean(done, axis=0).tolist() if done else None)

    def _values(self, result: dict | None, error: bool) -> list[float] | None:
        if not error and result and result.get("trial_status") == "infeasible":  # out of memory
            return self._dominated(result)
        if error or not result or result.get("trial_status") != "completed":
            return None
        values = [result.get(name) for name in self._search_space.objectives]
        if any(v is None or not np.isfinite(v) for v in values):
            return None
        return [float(v) for v in values]

    def _tell(self, number: int, values: list[float] | None) -> None:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        state = TrialState.COMPLETE if values is not None else TrialState.FAIL
        try:
            self._ot_study.tell(number, values, state=state)
        except (UpdateFinishedTrialError, RuntimeError, ValueError) as error:  # told before a resume
            log.debug("point %d already told: %s", number, error)


def _tune_saved(folder: Path) -> bool:
    """Tune's experiment can be restored: its tuner (written as the sweep starts) and a first
    snapshot of its trials (written within a second of the start) are both there."""
    return tune.Tuner.can_restore(str(folder)) and any(folder.glob("experiment_state-*.json"))


def _tune_trials(folder: Path) -> dict[str, dict[str, Any]]:
    """Tune's trials in its newest experiment state (what its restore runs): id -> config."""
    if not _tune_saved(folder):
        return {}
    analysis_log = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level = analysis_log.level
    analysis_log.setLevel(logging.ERROR)  # it warns of every trial that has no result yet
    try:
        trials = tune.ExperimentAnalysis(str(folder)).trials
    finally:
        analysis_log.setLevel(level)
    return {trial.trial_id: trial.config for trial in trials}


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress lines say what happens


def _journal_storage(path: str):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(path))


class RecordWorkerDeaths(Callback):
    """A trial whose worker died more than max_failures times still gets its failed row."""

    def __init__(self, space: SearchSpace, sweep: str, root: str):
        self.space, self.sweep, self.root = space, sweep, root

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        if trial.trial_id in store.trial_ids(self.root, self.sweep):
            return
        error = trial.get_pickled_error() or trial.error_file or "unknown error"
        reason = f"worker failed {self.space.max_failures + 1} times: {' '.join(str(error).split())}"[:500]
        now = datetime.now(UTC)
        config = self.space.trial_config(trial.config["params"]).to_flat()
        record = store_record(self.space, self.sweep, trial.trial_id, "failed", config, {}, {},
                              point=trial.config["point"], failure_reason=reason, started_at=now,
                              finished_at=now)
        store.write_trial(self.root, record)


def trial_resources(space: SearchSpace, tune_config: dict[str, Any]) -> dict[str, float]:
    """One trial's request; with gpu: auto, a GPU share sized by the predicted memory."""
    resources = space.resources
    gpu = resources.gpu
    if gpu == "auto":
        from .memory.predict import predict

        total = predict(space.trial_config(tune_config["params"])).total_mb
        gpu = resources.gpu_share(total)
    return {"cpu": resources.cpu, "gpu": float(gpu)}


def trial_dirname(trial) -> str:
    return trial.trial_id


def _trainable(space: SearchSpace, sweep: str, root: Path):
    trainable = tune.with_parameters(train_trial, space=space, root=str(root), sweep=sweep)
    return tune.with_resources(trainable, functools.partial(trial_resources, space))


def _tuner(space: SearchSpace, sweep: str, root: Path) -> tune.Tuner:
    folder = sweep_folder(root, sweep)
    searcher = ScreenedOptunaSearch(space, sweep, str(root), str(folder / JOURNAL))
    return tune.Tuner(
        _trainable(space, sweep, root),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=space.num_samples * space.seeds_per_point,
            max_concurrent_trials=space.max_concurrent,
            trial_dirname_creator=trial_dirname,
            reuse_actors=True,  # a worker process per trial costs seconds of imports
        ),
        run_config=tune.RunConfig(
            name=sweep,
            storage_path=str(root / "ray"),
            failure_config=tune.FailureConfig(max_failures=space.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),  # slack for a lagging snapshot
            callbacks=[ProgressPrinter(space, sweep, str(root)), RecordWorkerDeaths(space, sweep, str(root))],
            verbose=0,
        ),
    )


@contextlib.contextmanager
def _ray(address: str | None, task: str) -> Iterator[None]:
    """Connect to `address`, or start a local cluster of this machine's CPUs; reuse a live one.
    A `task` given as ``module:attribute`` from the working directory goes on the workers' path."""
    import ray

    for key, value in TUNE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    if ray.is_initialized():
        yield
        return
    preflight.reachable(address)  # an unreachable address: one line, nothing started
    passed = {k: os.environ[k] for k in ("TUNE_LOWMEM_DATA", "TUNE_LOWMEM_CACHE") if k in os.environ}
    task_folder = module_directory(task)
    if task_folder is not None:
        passed["PYTHONPATH"] = os.pathsep.join(filter(None, (task_folder, os.environ.get("PYTHONPATH"))))
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if passed:
        options["runtime_env"] = {"env_vars": passed}
    try:
        if address is None:
            ray.init(address="local", include_dashboard=False, **options)
        else:
            ray.init(address=address, **options)
    except ConnectionError as error:
        raise preflight.connection_refused(address, error) from None
    try:
        yield
    finally:
        ray.shutdown()


@dataclass
class SweepResult:
    """What a sweep left: Tune's own results, the store's rows, and the Pareto front."""

    sweep: str
    root: Path
    space: SearchSpace
    results: Any  # ray.tune.ResultGrid
    trials: pd.DataFrame
    front: pd.DataFrame


def launch(space_path: str | Path, name: str | None = None, store_root: str | Path = "runs",
           address: str | None = None, num_samples: int | None = None) -> SweepResult:
    """Validate the space, then run the sweep to the end (nothing is created if it is invalid)."""
    space = SearchSpace.load(space_path, num_samples=num_samples)
    sweep = store.check_name(space.name if name is None else name, "--name")
    root = preflight.writable_folder(storage_root(store_root), "--store")
    folder = sweep_folder(root, sweep)
    if folder.exists() or sweep in store.list_sweeps(root):
        raise ConfigError("--name", f"sweep {sweep!r} already exists in {root}; continue it with "
                          f"`tune-lowmem resume {sweep} --store {root}` or choose another --name")
    preflight.machine(space, address)
    with _ray(address, space.base["task"]):
        preflight.cluster(space)
        folder.mkdir(parents=True)
        (folder / SPACE_FILE).write_text(yaml.safe_dump(space.to_dict(), sort_keys=False))
        say(f"sweep {sweep}: {space.num_samples} points x {space.seeds_per_point} seed(s), "
            f"sampler {space.sampler}, store {root}")
        results = _tuner(space, sweep, root).fit()
    return _finish(space, sweep, root, results)


def resume(name: str, store_root: str | Path = "runs", address: str | None = None) -> SweepResult:
    """Continue a stopped sweep: unfinished trials run again, finished ones are not repeated."""
    root = storage_root(store_root)
    space = saved_space(name, root)
    preflight.writable_folder(root, "--store")
    folder = sweep_folder(root, name)
    preflight.machine(space, address)
    with _ray(address, space.base["task"]):
        preflight.cluster(space)
        if _tune_saved(folder):
            say(f"sweep {name}: resuming from {folder}")
            tuner = tune.Tuner.restore(str(folder), trainable=_trainable(space, name, root),
                                       resume_unfinished=True, restart_errored=False)
        else:  # stopped before Tune saved anything: start it, the journal keeps what was asked
            say(f"sweep {name}: nothing to restore in {folder}; starting it")
            tuner = _tuner(space, name, root)
        results = tuner.fit()
    return _finish(space, name, root, results)


def saved_space(name: str, root: str | Path) -> SearchSpace:
    """The search space a sweep was launched with."""
    path = sweep_folder(root, name) / SPACE_FILE
    if not path.is_file():
        known = sorted(p.parent.name for p in Path(root).glob(f"ray/*/{SPACE_FILE}"))
        raise ConfigError("NAME", f"no sweep {name!r} in {root}; sweeps there: {', '.join(known) or 'none'}")
    return SearchSpace.from_dict(load_file(path, "sweep space file"))


def _finish(space: SearchSpace, sweep: str, root: Path, results) -> SweepResult:
    store.compact(root, sweep, force=True)  # one file for the analysis to read, not one per trial
    baselines.record(root, sweep)  # the report then needs no profiler for an untrained baseline
    trials = store.read_trials(root, sweep)
    return SweepResult(sweep, root, space, results, trials, front(space, trials))


def front(space: SearchSpace, trials: pd.DataFrame) -> pd.DataFrame:
    """The Pareto front of the completed trials on the space's objectives, seeds averaged.

    Columns: the objectives (by metric name), the searched params (by field name), and
    ``seeds``, the number of distinct seeds completed for the point (a sampler proposing the
    same point twice gives it two trials of the same seed: one config, one row here)."""
    params = [p.name for p in space.params]
    columns = {store_column(m): m for m in space.objectives}
    if trials.empty or "status" not in trials:
        return pd.DataFrame(columns=[*space.objectives, *params, "seeds"])
    done = trials[trials["status"] == "completed"]
    missing = [c for c in columns if c not in done.columns]
    if done.empty or missing:
        return pd.DataFrame(columns=[*space.objectives, *params, "seeds"])
    means = pareto.aggregate_seeds(done, "seed_group", list(columns))
    first = done.drop_duplicates("seed_group").set_index("seed_group")
    points = pd.DataFrame({
        **{metric: means[f"{column}.mean"].to_numpy() for column, metric in columns.items()},
        **{name: first.loc[means["seed_group"], f"config.{name}"].astype(object).to_numpy() for name in params},
        "seeds": done.groupby("seed_group")["config.seed"].nunique().loc[means["seed_group"]].to_numpy(),
    })
    return pareto.pareto_front(points, dict(space.objectives)).reset_index(drop=True)


def status_counts(trials: pd.DataFrame) -> dict[str, int]:
    """Stored trials by status, every status named."""
    counts = trials["status"].value_counts() if "status" in trials else pd.Series(dtype=int)
    return {name: int(counts.get(name, 0)) for name in store.STATUSES}
