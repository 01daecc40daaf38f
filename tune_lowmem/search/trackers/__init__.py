"""Where a sweep's trials are followed besides the store: TensorBoard event files
(`event_files`) and MLflow runs (`mlflow_runs`), as the space's ``tracking`` section (or
``--mlflow``) asks; docs/tracking.md.

One Tune callback, `Trackers`, runs them in the driver. It reads what to run from the sweep's
folder (``tracking.yaml``, written by launch and by resume) when the sweep starts, not from what
Tune pickled at launch, so ``resume --mlflow URI`` reaches a sweep launched without it. A
tracker never fails the sweep: the first error it meets (a full disk under the event files, a
tracking server that does not answer) is one line, that tracker stops for the rest of the
driver's run, and the trials and the store go on; a resume tries it again.
"""

from __future__ import annotations

import functools
import importlib.util
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from ray.tune import Callback
from ray.tune.experiment import Trial

from ...config import ConfigError
from ...space import SearchSpace
from ...space.tracking_settings import FIELDS, SERVER_SCHEMES, TrackingSettings, tracking_settings
from ...validation import mapping, read_section
from .. import place
from ..progress import say
from .curves import Run, curves, step, trial_run
from .event_files import EventFiles
from .mlflow_runs import MLflowRuns

SETTINGS_FILE = "tracking.yaml"
CONNECT_TIMEOUT_S = 5.0


def check(settings: TrackingSettings) -> None:
    """Before Ray starts: a sweep that asks for MLflow has its client installed."""
    if settings.mlflow is not None and importlib.util.find_spec("mlflow") is None:
        raise ConfigError(
            "tracking.mlflow",
            "MLflow's client is not installed; install the mlflow extra "
            "(pip install -e '.[mlflow]', or mlflow-skinny) or leave mlflow out",
        )


def save_settings(folder: Path, settings: TrackingSettings) -> None:
    (folder / SETTINGS_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))


def saved_settings(folder: Path) -> TrackingSettings | None:
    """What the sweep's driver last ran with (None: a sweep launched before trackers were)."""
    path = folder / SETTINGS_FILE
    if not path.is_file():
        return None
    values = mapping(yaml.safe_load(path.read_text()) or {}, str(path))
    return tracking_settings(read_section(values, FIELDS, "tracking."))


class Trackers(Callback):
    """Tune's events to the trackers the sweep's folder names (see the module docstring).
    Pickled into Tune's tuner.pkl with its sweep and space only; the trackers are made anew by
    each driver, in `setup`."""

    def __init__(self, space: SearchSpace, sweep: str):
        self.space, self.sweep = space, sweep
        self.trackers: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"space": self.space, "sweep": self.sweep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, trackers={})

    def setup(self, **info) -> None:
        folder = place.sweep_folder(place.root(self.sweep), self.sweep)
        self.trackers = {}
        try:
            settings = saved_settings(folder) or TrackingSettings()
        except (OSError, ValueError, yaml.YAMLError) as error:  # the driver wrote it: not likely
            say(f"{folder / SETTINGS_FILE}: {failure(error)}; the sweep goes on without trackers")
            return
        if settings.tensorboard:
            self.trackers["TensorBoard"] = EventFiles(folder)
        if settings.mlflow is not None and self._answers(settings.mlflow):
            report = functools.partial(self._failed, "MLflow")
            self.trackers["MLflow"] = MLflowRuns(
                settings.mlflow, folder, self.sweep, sweep_params(self.space), report
            )

    def on_trial_start(self, iteration: int, trials: list, trial: Trial, **info) -> None:
        params = trial.config["params"]  # the whole configuration: MLflow's params
        config = self.space.trial_config(params).to_flat() if "MLflow" in self.trackers else {}
        self._each("start", run_of(trial), config)

    def on_trial_result(self, iteration: int, trials: list, trial: Trial, result, **info) -> None:
        epoch = step(result)
        if epoch is not None:
            self._each("result", run_of(trial).key, epoch, curves(result))

    def on_trial_complete(self, iteration: int, trials: list, trial: Trial, **info) -> None:
        result = trial.last_result or {}
        status = result.get("trial_status", "completed")
        status = "stopped" if status == "running" else status  # its scheduler stopped it
        self._each("end", run_of(trial).key, status, result.get("failure_reason"))

    def on_trial_error(self, iteration: int, trials: list, trial: Trial, **info) -> None:
        self._each("end", run_of(trial).key, "failed", "its worker died")

    def on_experiment_end(self, trials: list, **info) -> None:
        for name in list(self.trackers):
            self._call(name, "close")

    # ---- one line per tracker that fails, and the sweep goes on ---------------------------

    def _each(self, method: str, *args) -> None:
        for name in list(self.trackers):
            self._call(name, method, *args)

    def _call(self, name: str, method: str, *args) -> None:
        tracker = self.trackers.get(name)
        if tracker is None:
            return
        try:
            getattr(tracker, method)(*args)
        except Exception as error:  # noqa: BLE001 - whatever it is, the sweep goes on
            self._failed(name, error)

    def _failed(self, name: str, error: BaseException) -> None:
        tracker = self.trackers.pop(name, None)
        if tracker is None:  # said already
            return
        say(f"{name}: {failure(error)}; the sweep goes on without it")
        tracker.abandon()

    def _answers(self, uri: str) -> bool:
        """A tracking server's address takes a connection (else one line, and no MLflow)."""
        parts = urlsplit(uri)
        if parts.scheme not in SERVER_SCHEMES:
            return True  # a folder or a database: the client writes it itself
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S):
                return True
        except OSError as error:
            reason = error.strerror or str(error) or type(error).__name__
            say(f"MLflow: {uri} does not answer ({reason}); the sweep goes on without it")
            return False


def run_of(trial: Trial) -> Run:
    """The run a Tune trial trains (`curves.Run`: its point and seed)."""
    return trial_run(trial.trial_id, trial.config["point"], trial.config["params"])


def sweep_params(space: SearchSpace) -> dict[str, Any]:
    """What the sweep's parent run records of its space."""
    return {
        "sampler": space.sampler.name,
        "num_samples": space.num_samples,
        "seeds_per_point": space.seeds_per_point,
        "objectives": ",".join(f"{k}:{v}" for k, v in space.objectives.items()),
        "searched": ",".join(p.name for p in space.params),
    }


def failure(error: BaseException) -> str:
    """One line for a tracker's error: a file's, named with its path; any other, as it says."""
    if isinstance(error, OSError) and error.strerror:
        where = f"cannot write {error.filename}: " if error.filename else ""
        return f"{where}{error.strerror}"
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]
