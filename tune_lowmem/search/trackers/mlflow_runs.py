"""Each trial as an MLflow run, nested under one parent run per sweep (the optional ``mlflow``
extra: MLflow's client, `mlflow-skinny`, is enough; the server is the user's).

In the experiment ``$MLFLOW_EXPERIMENT_NAME`` (default ``tune-lowmem``) the sweep is a parent
run named for it; each training (a point and seed, `curves.Run`) is a child run
(``mlflow.parentRunId``) named as its TensorBoard run, whose params are its whole configuration
(the flat `TrialConfig`, as ``--set`` takes it), whose metrics are its curves at each epoch
(`curves`: the metrics, the learning rate, the predicted and measured memory and time), whose
tags name its point, seed and trial (``tune_lowmem.*``), and whose end says its outcome: the
run FINISHED (completed, or stopped early) or FAILED, the tag ``tune_lowmem.status`` the
store's status, ``tune_lowmem.failure_reason`` why.

The run ids are kept in the sweep's folder (``mlflow.yaml``, with the URI they belong to), so a
resumed sweep continues the same runs: a training that runs again logs into its run, from the
epoch after the last one it had logged (MLflow keeps every value logged; the store and
TensorBoard hold the last attempt's). The calls go to the server from one thread of their own,
in order, so the driver never waits on the network; the first one that fails is reported once
(`Trackers`) and the sweep goes on without MLflow.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ...analysis.query import yaml_value
from ..progress import say
from .curves import Run

# YAML, not JSON: Tune copies a restored sweep's .json and .pkl files to its staging folder and
# writes them back over the sweep's folder later, which would bring back an older list of runs
RUNS_FILE = "mlflow.yaml"
EXPERIMENT = "tune-lowmem"  # the experiment, unless $MLFLOW_EXPERIMENT_NAME names another
CLOSE_TIMEOUT_S = 60.0  # how long the sweep's end waits for the calls still queued
# MLflow's client retries a failed request for minutes by default; a sweep's thread gives up
# sooner, says so once, and goes on. Nor does it print a line per run it ends: the sweep's
# progress lines are the driver's output. A user's own settings win.
CLIENT_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
ENDED = {"completed": "FINISHED", "stopped": "FINISHED"}  # any other outcome: FAILED
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag for a nested run
KIND = {"mlflow.experimentKind": "custom_model_development"}  # its UI then lists runs first
TRIAL_TAG = "tune_lowmem.trial_id"


class MLflowRuns:
    """The sweep's MLflow runs (see the module docstring). `failed` is told the first error;
    nothing more is sent after it."""

    def __init__(
        self,
        uri: str,
        folder: Path,
        sweep: str,
        sweep_params: Mapping[str, Any],
        failed: Callable[[BaseException], None],
    ):
        self.uri, self.folder, self.sweep = uri, folder, sweep
        self.sweep_params = dict(sweep_params)
        self.failed = failed
        self.broken = False
        self.client = None
        self.resumed = False  # the folder held this URI's ids: an earlier driver's runs go on
        self.ids: dict[str, Any] = {}
        self.last_logged: dict[str, int] = {}  # run -> the last epoch logged into it
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._work, name="tune-lowmem-mlflow", daemon=True)
        self.thread.start()
        self.calls.put(self._open)

    # ---- what the driver calls: queued, never waited on ------------------------------------

    def start(self, run: Run, config: Mapping[str, Any]) -> None:
        self.calls.put(lambda: self._start(run, dict(config)))

    def result(self, key: str, epoch: int, curves: Mapping[str, float]) -> None:
        stamp = int(time.time() * 1000)
        self.calls.put(lambda: self._result(key, epoch, dict(curves), stamp))

    def end(self, key: str, status: str, reason: str | None = None) -> None:
        self.calls.put(lambda: self._end(key, status, reason))

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """End the parent run and wait for the calls still queued; raise if they outlast
        `timeout` seconds (they are then dropped with the process)."""
        self.calls.put(self._finish)
        self.calls.put(None)
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(
                f"{self.uri} did not take the sweep's last calls within {timeout:.0f} s"
            )

    def abandon(self) -> None:
        """Send nothing more (after a failure): the thread drops what is queued and ends."""
        self.broken = True
        self.calls.put(None)

    # ---- the thread ----------------------------------------------------------------------------

    def _work(self) -> None:
        while (call := self.calls.get()) is not None:
            if self.broken:
                continue
            try:
                call()
            except Exception as error:  # noqa: BLE001 - the server's, said once, then skipped
                self.broken = True
                self.failed(error)

    def _open(self) -> None:
        """The client, the experiment and the sweep's parent run: the one the folder's ids name
        for this URI (an earlier driver's), else a new one."""
        for key, value in CLIENT_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        saved = self._saved()
        if saved.get("uri") == self.uri:
            self.ids, self.resumed = saved, True
            self.client.update_run(self.ids["parent"], status="RUNNING")
            return
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
        found = self.client.get_experiment_by_name(name)
        experiment = (
            found.experiment_id if found else self.client.create_experiment(name, tags=KIND)
        )
        self.ids = {"uri": self.uri, "experiment_id": experiment, "parent": None, "runs": {}}
        tags = {"tune_lowmem.sweep": self.sweep, "tune_lowmem.folder": str(self.folder)}
        parent, _ = self._run(self.sweep, tags, {})
        self.ids["parent"] = parent
        self._save()
        self._log_params(parent, self.sweep_params)
        say(f"MLflow: the sweep's runs go to {self.uri}, experiment {name}, parent run {parent}")

    def _start(self, run: Run, config: dict) -> None:
        held = self.ids["runs"].get(run.key)
        if held is not None:  # logged by an earlier attempt: the same run goes on
            self.client.update_run(held, status="RUNNING")
            self.client.set_tag(held, TRIAL_TAG, run.trial_id)  # the trial that trains it now
            self._ensure_params(held, config)
            return
        identity = {PARENT_TAG: self.ids["parent"], "tune_lowmem.run": run.key}
        tags = {"tune_lowmem.sweep": self.sweep, TRIAL_TAG: run.trial_id}
        made, new = self._run(run.name, identity, tags)
        if new:
            self._log_params(made, config)
            self.last_logged[run.key] = 0
        else:
            self._ensure_params(made, config)
        self.ids["runs"][run.key] = made
        self._save()

    def _ensure_params(self, run: str, config: dict) -> None:
        """Log a continued run's params where an earlier driver was killed before it did."""
        if not self.client.get_run(run).data.params:
            self._log_params(run, config)

    def _run(self, name: str, identity: dict[str, str], tags: dict[str, str]) -> tuple[str, bool]:
        """The run with the tags `identity` and `tags`, and whether it is new: in a resumed
        sweep, the one the server already holds with `identity`, if any (its driver was killed
        before it saved the id), else a new one."""
        if self.resumed:
            query = " and ".join(f"tags.`{key}` = '{value}'" for key, value in identity.items())
            held = self.client.search_runs([self.ids["experiment_id"]], query, max_results=1)
            if held:
                run = held[0].info.run_id
                self.client.update_run(run, status="RUNNING")
                for key, value in tags.items():
                    self.client.set_tag(run, key, value)
                return run, False
        made = self.client.create_run(
            self.ids["experiment_id"], run_name=name, tags={**identity, **tags}
        )
        return made.info.run_id, True

    def _result(self, key: str, epoch: int, curves: dict, stamp: int) -> None:
        from mlflow.entities import Metric

        run = self.ids["runs"].get(key)
        if run is None or not curves:
            return
        if key not in self.last_logged:  # a run an earlier driver logged into
            history = self.client.get_metric_history(run, next(iter(curves)))
            self.last_logged[key] = max((m.step for m in history), default=0)
        if epoch <= self.last_logged[key]:
            return
        metrics = [Metric(name, value, stamp, epoch) for name, value in curves.items()]
        self.client.log_batch(run, metrics=metrics, synchronous=True)
        self.last_logged[key] = epoch

    def _end(self, key: str, status: str, reason: str | None) -> None:
        run = self.ids["runs"].get(key)
        if run is None:
            return
        self.client.set_tag(run, "tune_lowmem.status", status)
        if reason:
            self.client.set_tag(run, "tune_lowmem.failure_reason", reason)
        self.client.set_terminated(run, ENDED.get(status, "FAILED"))

    def _finish(self) -> None:
        if self.ids:
            self.client.set_terminated(self.ids["parent"], "FINISHED")

    def _log_params(self, run: str, values: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(key, yaml_value(value)) for key, value in values.items()]
        self.client.log_batch(run, params=params, synchronous=True)

    def _saved(self) -> dict[str, Any]:
        with contextlib.suppress(FileNotFoundError, yaml.YAMLError):
            return yaml.safe_load((self.folder / RUNS_FILE).read_text()) or {}
        return {}

    def _save(self) -> None:
        """The ids, replaced whole (a driver killed while writing leaves the old file)."""
        path = self.folder / RUNS_FILE
        partial = path.with_name(f"{path.name}.partial")
        partial.write_text(yaml.safe_dump(self.ids, sort_keys=False))
        os.replace(partial, path)
