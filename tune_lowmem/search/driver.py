"""The driver: launch and resume a sweep (the searcher inside Ray Tune, trials, the store).

Where a sweep keeps things, under the store root ``DIR``::

    DIR/trials/, DIR/epochs/     the Parquet store (`tune_lowmem.store`): what every trial gave
    DIR/ray/<sweep>/             Tune's experiment (trial states, checkpoints, the searcher) plus
        space.yaml               the validated search space, as resume reads it
        optuna.journal           Optuna's study (`journal`): every point asked and told
        tracking.yaml            the trackers the sweep runs (`trackers`), as resume reads them
        tensorboard/             each trial's curves as TensorBoard event files (`trackers`)
        mlflow.yaml              the sweep's MLflow run ids, when it logs to MLflow

A sweep folder (``DIR`` as a whole) can be copied or moved: nothing saved in it names a path
(`place`), Tune restores from wherever its experiment now is, and `resume` writes only there.

Surviving the driver: see `searcher` (what is rebuilt from the journal, Tune's trials and the
store), `trainable` (a restarted trial that had stored its row reports it again; a worker torn
down with its driver stores nothing) and `tune_state` (how often Tune snapshots). A file that
cannot be written (a full disk) stops the sweep with `store.WriteFailed`, one line naming the
file; `resume`, once there is room, repairs a torn journal line and finishes the sweep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from ray import tune
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from .. import pareto, preflight, store
from ..analysis import baselines
from ..config import ConfigError, TrialConfig
from ..outcome import column
from ..plugins import plugins_folder, techniques
from ..space import SearchSpace
from ..space.tracking_settings import mlflow_uri
from ..train import trial_environment
from ..yaml_loading import load_file
from . import journal, legacy, place, trackers
from .generator import PlacedSearch
from .place import sweep_folder
from .progress import ProgressPrinter, say
from .samplers import build_sampler
from .searcher import ScreenedSearcher
from .stopping import build_scheduler
from .stopping.asha import RecordStopped
from .trainable import sweep_rows, train_trial
from .tune_state import tune_saved

SPACE_FILE = "space.yaml"
TUNE_ENVIRONMENT = {
    # Tune's snapshot of every trial costs the driver time in proportion to the trials so far:
    # Tune's own period keeps it to a twentieth of the driver's time (`tune_state`)
    "TUNE_GLOBAL_CHECKPOINT_S": "auto",
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0 the classic reporter prints nothing; ours prints
    # Tune's own loggers are named in `_tuner`: its JSON and CSV files, and not its TensorBoard
    # files, which `trackers` writes as the sweep chooses
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
}


def storage_root(value: str | Path) -> Path:
    """The sweep's one storage root (store, Tune's experiment, Optuna's journal), as a path that
    every node of the cluster must see at the same place: a shared file system (EFS, NFS, Lustre).
    Not a bucket URI: the store renames each trial's file into place and the journal locks its
    file, which object stores cannot do."""
    text = str(value)
    if "://" in text:
        raise ConfigError(
            "--store",
            f"{text!r} is not allowed; a file-system path that every node "
            "mounts at the same place is required (e.g. EFS at /mnt/tune-lowmem)",
        )
    return Path(text).expanduser().resolve()


class RecordWorkerDeaths(Callback):
    """A trial whose worker died more than max_failures times still gets its failed row; one
    that could not write its row (a full disk) stops the sweep instead, to run again on resume.
    Pickled into Tune's tuner.pkl: it names its sweep, and finds its store through `place`."""

    def __init__(self, space: SearchSpace, sweep: str):
        self.space, self.sweep = space, sweep

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        root = place.root(self.sweep)
        if trial.trial_id in store.trial_ids(root, self.sweep):
            return
        error = trial_error(trial)
        failed_write = write_failure(error)
        if failed_write is not None:
            raise failed_write
        text = " ".join(str(error).split())
        reason = f"worker failed {self.space.max_failures + 1} times: {text}"[:500]
        now = datetime.now(UTC)
        config = self.space.trial_config(trial.config["params"]).to_flat()
        record = sweep_rows(self.space, self.sweep).row(
            trial.trial_id,
            "failed",
            config,
            point=trial.config["point"],
            failure_reason=reason,
            started_at=now,
            finished_at=now,
        )
        store.write_trial(root, record)


class CompactAsItGoes(Callback):
    """Keeps the sweep's store compacted while it runs (`store.compact` after each trial): its
    folders hold a bounded number of files at any moment instead of one per trial, and what
    reads them meanwhile (a trial looking for its own row, the progress line, `status`) opens
    a few files, not thousands."""

    def __init__(self, sweep: str):
        self.sweep = sweep

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        store.compact(place.root(self.sweep), self.sweep)

    on_trial_error = on_trial_complete


def trial_error(trial) -> BaseException | str:
    """A Tune trial's latest error: the pickled exception, else the exception line of the text
    trace Tune keeps of one it could not pickle (a lost node's RpcError), not that file's path."""
    pickled = trial.get_pickled_error()
    if pickled is not None:
        return pickled
    lines = [line for line in (trial.get_error() or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown error"


def write_failure(error: BaseException | str | None) -> store.WriteFailed | None:
    """The `store.WriteFailed` behind an error (Tune's and Ray's wrap it), if one is."""
    seen = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        if isinstance(error, store.WriteFailed):
            return error
        seen.add(id(error))
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return None


def searches_environment(space: SearchSpace) -> bool:
    """Whether the space's trials differ in their process's environment (a field a technique
    makes it from, `Technique.ENVIRONMENT`: e.g. a CUDA workspace setting)."""
    fields = {name for technique in techniques() for name in technique.ENVIRONMENT}
    return any(p.name in fields for p in space.params)


def trial_resources(space: SearchSpace, tune_config: dict[str, Any]) -> dict[str, float]:
    """One trial's request; with gpu: auto, a GPU share sized by the predicted memory."""
    from ..memory.share import trial_share

    config = space.trial_config(tune_config["params"]) if space.resources.gpu == "auto" else None
    return {"cpu": space.resources.cpu, "gpu": trial_share(space.resources, config)}


def trial_dirname(trial) -> str:
    return trial.trial_id


def _trainable(space: SearchSpace, sweep: str, root: Path):
    trainable = tune.with_parameters(train_trial, space=space, root=str(root), sweep=sweep)
    return tune.with_resources(trainable, functools.partial(trial_resources, space))


def _tuner(space: SearchSpace, sweep: str, root: Path) -> tune.Tuner:
    """Everything the sweep runs with, made in one pass: the searcher, the callbacks, then
    early stopping (its rungs from the space) and the trainable."""
    place.bind(sweep, root)
    search = PlacedSearch(ScreenedSearcher(space, sweep), sweep, space.max_concurrent)
    early = space.scheduler is not None  # early stopping: its decisions kept in the sweep folder
    callbacks = [
        ProgressPrinter(space, sweep, functools.partial(place.root, sweep)),
        RecordWorkerDeaths(space, sweep),
        *([RecordStopped(space, sweep)] if early else []),
        CompactAsItGoes(sweep),
        trackers.Trackers(space, sweep),
        JsonLoggerCallback(),  # each trial's result.json
        CSVLoggerCallback(),  # and progress.csv
    ]
    scheduler = build_scheduler(space.scheduler, space.objectives, sweep) if early else None
    return tune.Tuner(
        _trainable(space, sweep, root),
        tune_config=tune.TuneConfig(
            search_alg=search,
            num_samples=space.planned_trials,
            scheduler=scheduler,
            trial_dirname_creator=trial_dirname,
            # a worker process per trial costs seconds of imports; but CUDA's libraries read
            # their settings once a process starts CUDA, so trials whose environments differ
            # each take a fresh one
            reuse_actors=not searches_environment(space),
        ),
        run_config=tune.RunConfig(
            name=sweep,
            storage_path=str(root / "ray"),
            failure_config=tune.FailureConfig(max_failures=space.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),  # slack for a lagging snapshot
            callbacks=callbacks,
            verbose=0,
        ),
    )


@contextlib.contextmanager
def tune_environment() -> Iterator[None]:
    """Tune's settings for a sweep (`TUNE_ENVIRONMENT`, each where the user set none), in this
    process while the sweep runs only: a later Tuner of the same process (a user's own, reading
    Tune's JSON and CSV results) runs with Tune's defaults."""
    added = {key: value for key, value in TUNE_ENVIRONMENT.items() if key not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


@contextlib.contextmanager
def _ray(address: str | None, space: SearchSpace) -> Iterator[None]:
    """Connect to `address`, or start a local cluster of this machine's CPUs; reuse a live one.
    Nothing starts unless the space's sampler builds (its options, its dependencies) and a local
    cluster (this machine) holds one trial; once joined, the cluster must hold one, else the
    trial would wait forever. A plug-in the space names as ``module:attribute`` from the
    working directory (a task, a step runner) puts it on the workers' path."""
    import ray

    with tune_environment():
        build_sampler(space)  # the sampler's own checks now, not mid-sweep
        preflight.machine(space, address)
        if ray.is_initialized():
            preflight.cluster(space)
            yield
            return
        preflight.reachable(address)  # an unreachable address: one line, nothing started
        passed = {
            k: os.environ[k] for k in ("TUNE_LOWMEM_DATA", "TUNE_LOWMEM_CACHE") if k in os.environ
        }
        # the space's fixed CUDA workspace settings, in every worker before it starts CUDA (a
        # searched one is set by its trial: `trainable`)
        passed |= trial_environment(TrialConfig.from_dict(space.base))
        folder = plugins_folder()
        if folder is not None:
            paths = (folder, os.environ.get("PYTHONPATH"))
            passed["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
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
            preflight.cluster(space)
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


def launch(
    space: SearchSpace,
    name: str | None = None,
    store_root: str | Path = "runs",
    address: str | None = None,
) -> SweepResult:
    """Run a validated space's sweep to the end; its name, store, sampler and resources are
    checked first (nothing is created if one is wrong)."""
    sweep = store.check_name(space.name if name is None else name, "--name")
    root = preflight.writable_folder(storage_root(store_root), "--store")
    folder = sweep_folder(root, sweep)
    if folder.exists() or sweep in store.list_sweeps(root):
        raise ConfigError(
            "--name",
            f"sweep {sweep!r} already exists in {root}; continue it with "
            f"`tune-lowmem resume {sweep} --store {root}` or choose another --name",
        )
    trackers.check(space.tracking)
    with _ray(address, space):
        folder.mkdir(parents=True)
        (folder / SPACE_FILE).write_text(yaml.safe_dump(space.to_dict(), sort_keys=False))
        trackers.save_settings(folder, space.tracking)
        baseline = " and the baseline" if space.baseline else ""
        say(
            f"sweep {sweep}: {space.num_samples} points x {space.seeds_per_point} seed(s)"
            f"{baseline}, sampler {space.sampler.name}, store {root}"
        )
        results = _fit(_tuner(space, sweep, root))
    return _finish(space, sweep, root, results)


def resume(
    name: str,
    store_root: str | Path = "runs",
    address: str | None = None,
    mlflow: str | None = None,
) -> SweepResult:
    """Continue a stopped sweep: unfinished trials run again, finished ones are not repeated;
    `mlflow` (``--mlflow``) logs it to that MLflow tracking URI from now on."""
    mlflow_uri(mlflow, "--mlflow")
    root = storage_root(store_root)
    space = saved_space(name, root)
    preflight.writable_folder(root, "--store")
    folder = sweep_folder(root, name)
    tracking = trackers.saved_settings(folder)
    launched_before = tracking is None and tune_saved(folder)  # Tune pickled no trackers
    tracking = tracking or space.tracking
    if mlflow is not None:
        tracking = dataclasses.replace(tracking, mlflow=mlflow)
    trackers.check(tracking)
    with _ray(address, space):
        if not launched_before:
            trackers.save_settings(folder, tracking)
        elif mlflow is not None:
            say(f"sweep {name} was launched without trackers; --mlflow does not reach it")
        if tune_saved(folder):
            say(f"sweep {name}: resuming from {folder}")
            place.bind(name, root)  # before Tune unpickles the searcher and the callbacks
            legacy.old_module_names()  # and the modules older sweeps pickled under
            journal.repair(folder / journal.JOURNAL)
            # resume_errored keeps an errored trial's id (restart_errored would give it a new
            # one): one that errored without a row (its write failed) runs again; one whose row
            # is stored (a worker that died too often) reports that row again, not a second one
            tuner = tune.Tuner.restore(
                str(folder),
                trainable=_trainable(space, name, root),
                resume_unfinished=True,
                resume_errored=True,
            )
        else:  # stopped before Tune saved anything: start it, the journal keeps what was asked
            say(f"sweep {name}: nothing to restore in {folder}; starting it")
            tuner = _tuner(space, name, root)
        results = _fit(tuner)
    return _finish(space, name, root, results)


def _fit(tuner: tune.Tuner):
    """Run the sweep; a file that could not be written stops it as `store.WriteFailed` alone,
    whatever Tune wrapped it in."""
    try:
        return tuner.fit()
    except Exception as error:
        failed = write_failure(error)
        if failed is None:
            raise
        raise failed from None


def saved_space(name: str, root: str | Path) -> SearchSpace:
    """The search space a sweep was launched with."""
    path = sweep_folder(root, name) / SPACE_FILE
    if not path.is_file():
        known = sorted(p.parent.name for p in Path(root).glob(f"ray/*/{SPACE_FILE}"))
        raise ConfigError(
            "NAME", f"no sweep {name!r} in {root}; sweeps there: {', '.join(known) or 'none'}"
        )
    saved = load_file(path, "sweep space file")
    if isinstance(saved, dict):  # launched before baselines were trained: its Tune run has none
        saved.setdefault("baseline", False)
    return SearchSpace.from_dict(saved)


def _finish(space: SearchSpace, sweep: str, root: Path, results) -> SweepResult:
    store.compact(root, sweep)  # once a sweep has many one-trial files: fewer for analysis to read
    baselines.record(root, sweep)  # the report then needs no profiler for an untrained baseline
    trials = store.read_trials(root, sweep)
    return SweepResult(sweep, root, space, results, trials, front(space, trials))


def front(space: SearchSpace, trials: pd.DataFrame) -> pd.DataFrame:
    """The Pareto front of the completed trials on the space's objectives, seeds averaged.

    Columns: the objectives (by metric name), the searched params (by field name), and
    ``seeds``, the number of distinct seeds completed for the point (a sampler proposing the
    same point twice gives it two trials of the same seed: one config, one row here)."""
    params = [p.name for p in space.params]
    columns = {column(m): m for m in space.objectives}
    if trials.empty or "status" not in trials:
        return pd.DataFrame(columns=[*space.objectives, *params, "seeds"])
    done = trials[trials["status"] == "completed"]
    missing = [c for c in columns if c not in done.columns]
    if done.empty or missing:
        return pd.DataFrame(columns=[*space.objectives, *params, "seeds"])
    means = pareto.aggregate_seeds(done, "seed_group", list(columns), "config.seed")
    first = done.drop_duplicates("seed_group").set_index("seed_group")
    points = pd.DataFrame(
        {
            **{metric: means[f"{column}.mean"].to_numpy() for column, metric in columns.items()},
            **{
                name: first.loc[means["seed_group"], f"config.{name}"].astype(object).to_numpy()
                for name in params
            },
            "seeds": done.groupby("seed_group")["config.seed"]
            .nunique()
            .loc[means["seed_group"]]
            .to_numpy(),
        }
    )
    return pareto.pareto_front(points, dict(space.objectives)).reset_index(drop=True)


def status_counts(trials: pd.DataFrame) -> dict[str, int]:
    """Stored trials by status, every status named."""
    counts = trials["status"].value_counts() if "status" in trials else pd.Series(dtype=int)
    return {name: int(counts.get(name, 0)) for name in store.STATUSES}
