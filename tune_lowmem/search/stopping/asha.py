"""Multi-objective early stopping: asynchronous successive halving on a Pareto ranking.

Why: a sweep's cost is its trials times their epochs, and Ray Tune's ASHA ranks on one metric.
Here the memory objective (``memory.predicted_total_mb``) is known before a trial starts and is
in every result, so at a rung a trial's accuracy so far is compared with the trials of no more
memory. The design follows Syne Tune's ``MOASHA`` (stopping variant): rungs at
``grace_epochs * reduction_factor**k`` epochs below the schedule's last; when a trial reaches a
rung its objective values there are recorded, the rung's records are sorted into non-dominated
fronts (`pareto.non_dominated_sort`), and the trial goes on if the records in strictly better
fronts than its own number fewer than ``ceil(n / reduction_factor)`` (its front is kept whole:
the rung's Pareto front always goes on); otherwise it is stopped. A trial that reaches the
schedule's end is never stopped.

Seeds: each seed of a point is its own Tune trial and is judged on its own values, against every
trial (every seed) recorded at the rung.

What the searcher is told of a stopped trial, as a complete trial (`ScreenedSearcher.values`):
its projection (`projection`), the values it reported at the rung moved by the largest gain to
the end that the finished trials' curves suggest (the largest of their n gains plus their
range / (n - 1); a memory never moves), or those values as reported while fewer than two trials
finished. Optuna's multi-objective samplers take complete or failed trials only, and a failed
one would tell them nothing of a point shown to be dominated; told its accuracy at the rung, a
model of accuracy takes the point (and its neighbours) for as bad as its first epochs, where
a curve that learns late, cut short, is far below its end. The projection is written with the
stop (``projected`` in the record) for the searcher to read (`projected`). The point is listed
in the study's user attr ``stopped_points`` (`STOPPED_POINTS`), so a sampler may ask it
again; a run (params and seed, its exact params aside) stopped once is never stopped again.
The store keeps what was measured, with status ``stopped`` and the epoch reached
(`RecordStopped`); the Pareto front reads completed trials only.

Surviving the driver: every decision is written (atomically) to ``scheduler.json`` in the sweep
folder before it is returned, and a scheduler unpickled by Tune's restore reads that file: a
stopped trial that Tune's older snapshot still holds as running is stopped again at its first
result, and a rung decided once is never recorded or decided again.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from ray.tune import Callback
from ray.tune.result import AUTO_RESULT_KEYS
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from ... import pareto, store
from ...outcome import split
from ...space.scheduler_settings import SchedulerSettings
from .. import place
from ..baseline import is_baseline
from ..exact import training_key

# `memory_band`: a trial is compared with trials of at most this factor more or less memory
# (None: with the whole rung, the default until the band is measured to pay on real sweeps)
MEMORY_BAND = 2.0
RECORD = "scheduler.json"  # the decisions, in the sweep folder
STOPPED = "stopped"  # the store status (and reported trial_status) of a stopped trial
STOPPED_POINTS = "stopped_points"  # the study's user attr: the points a stop cut short


class MultiObjectiveASHA(FIFOScheduler):
    """Stops trials that fall outside a rung's top fronts (see the module).

    `objectives` maps each reported metric to maximize or minimize. With `sweep` the decisions
    are kept in that sweep's folder (found through `place`, so nothing pickled names a path);
    without, in memory only (the replay benchmark)."""

    _supports_buffered_results = False  # every epoch's result, so no rung is skipped
    TYPE = "mo-asha"  # the ``scheduler.type`` that names this rule (`stopping.RULES`)

    def __init__(
        self,
        settings: SchedulerSettings,
        objectives: Mapping[str, str],
        sweep: str | None = None,
        time_attr: str = "epoch",
        memory_band: float | None = None,
    ):
        super().__init__()
        if settings.type != self.TYPE:  # a section naming another rule is built by its class
            raise ValueError(
                f"scheduler.type: {settings.type!r} is not {self.TYPE!r}; build it with "
                "search.stopping.build_scheduler"
            )
        self.settings, self.objectives = settings, dict(objectives)
        self.sweep, self.time_attr = sweep, time_attr
        memory = [i for i, name in enumerate(self.objectives) if name.startswith("memory.")]
        # the objective that bands the rung: a memory one, unless no band is asked for
        self.banded = memory[0] if memory and memory_band is not None else None
        self.memory_band = memory_band
        self.records: dict[int, dict[str, list[float | None]]] = {r: {} for r in settings.rungs()}
        self.stopped: dict[str, int] = {}  # trial id -> the rung it was stopped at
        self.stopped_runs: set[str] = set()  # `training_key` of every run stopped (with its seed)
        self.finals: dict[str, list[float | None]] = {}  # trial id -> its values at the end
        self.projected: dict[str, list[float | None]] = {}  # stopped trial id -> its projection
        self.load()

    # ---- decisions ----------------------------------------------------------------------

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if is_baseline(trial.config):  # the sweep's reference: trained to its end, no rung's peer
            return TrialScheduler.CONTINUE
        return self.decide(trial.trial_id, result, trial.config.get("params"))

    def decide(
        self, trial_id: str, result: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> str:
        """CONTINUE or STOP for a trial's result (Tune's trial not needed: the replay calls it).
        A run (`params`, with its seed) stopped once is never stopped again: the sampler asked
        it again knowing it was cut short (`KnownMemorySampler.asked_again`)."""
        if trial_id in self.stopped or result.get("trial_status") == STOPPED:
            return TrialScheduler.STOP
        epoch = result.get(self.time_attr)
        if epoch is not None and epoch >= self.settings.max_epochs:
            if trial_id not in self.finals:
                self.finals[trial_id] = self.values_of(result)
                self.save_record()
            return TrialScheduler.CONTINUE
        if epoch not in self.records or trial_id in self.records[epoch]:
            return TrialScheduler.CONTINUE
        rung = self.records[epoch]
        rung[trial_id] = self.values_of(result)
        run = training_key(params) if params is not None else None
        if run not in self.stopped_runs and not self.goes_on(rung, trial_id):
            self.stopped[trial_id] = epoch
            self.projected[trial_id] = self.projection(rung, trial_id)
            if run is not None:
                self.stopped_runs.add(run)
        self.save_record()
        return TrialScheduler.STOP if trial_id in self.stopped else TrialScheduler.CONTINUE

    def values_of(self, result: Mapping[str, Any]) -> list[float | None]:
        """A result's objective values, in the objectives' order (None: missing or not finite)."""
        return [_number(result.get(name)) for name in self.objectives]

    def goes_on(self, rung: Mapping[str, list[float | None]], trial_id: str) -> bool:
        """Fewer than ceil(n / factor) of the n records it is compared with (those of similar
        memory, see `peers`) lie in better fronts than its own; fewer than `reduction_factor`
        such records rank nothing yet."""
        ids = self.peers(rung, trial_id)
        if self.banded is not None and len(ids) < self.settings.reduction_factor:
            return True
        values = [[math.nan if v is None else v for v in rung[i]] for i in ids]
        ranks = pareto.non_dominated_sort(values, list(self.objectives.values()))
        own = ranks[ids.index(trial_id)]
        return int((ranks < own).sum()) < math.ceil(len(ids) / self.settings.reduction_factor)

    def peers(self, rung: Mapping[str, list[float | None]], trial_id: str) -> list[str]:
        """The rung's records within a factor `memory_band` of the trial's memory (all of them
        without a band or a memory value): a cheap trial that learns slowly (a small
        microbatch's batch norm) is judged against trials that save as much, so the cheap end
        of the front is not stopped for lagging behind trials it does not compete with."""
        own = rung[trial_id][self.banded] if self.banded is not None else None
        if own is None or own <= 0:
            return list(rung)
        reach = math.log(self.memory_band)
        return [
            i
            for i, values in rung.items()
            if (memory := values[self.banded]) is not None
            and memory > 0
            and abs(math.log(memory / own)) <= reach
        ]

    # ---- what the finished trials' curves tell ---------------------------------------------

    def finished_at(self, rung: Mapping[str, list[float | None]]) -> list[str]:
        """The trials recorded at the rung that reached the schedule's end."""
        return [t for t in self.finals if t in rung]

    def at_rung_and_end(
        self, rung: Mapping[str, list[float | None]], finished: list[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The `finished` trials' values at the rung and at their end, as losses, a row each."""
        return (
            self.losses([rung[t] for t in finished]),
            self.losses([self.finals[t] for t in finished]),
        )

    def moved(self, rung: Mapping[str, list[float | None]]) -> np.ndarray | None:
        """How far each finished trial recorded at the rung moved from there to its end, per
        objective, as losses (a missing value: not moved); None with fewer than two."""
        finished = self.finished_at(rung)
        if len(finished) < 2:
            return None
        at_rung, at_end = self.at_rung_and_end(rung, finished)
        moved = at_rung - at_end
        return np.where(np.isfinite(moved), moved, 0.0)

    def optimistic(
        self, rung: Mapping[str, list[float | None]], trial_id: str
    ) -> np.ndarray | None:
        """A trial's values at the rung, as losses, moved by the largest gain to the end that
        the n finished trials' moves (`moved`) suggest, per objective: the largest of them plus
        their range / (n - 1), the unbiased estimate of the top of a uniform spread from n draws
        (the largest of a few draws understates it); never less than none. None with fewer than
        two finished trials."""
        moved = self.moved(rung)
        if moved is None:
            return None
        top, bottom = moved.max(axis=0), moved.min(axis=0)
        gain = np.maximum(top + (top - bottom) / (len(moved) - 1), 0.0)
        return self.losses([rung[trial_id]])[0] - gain

    def projection(self, rung: Mapping[str, list[float | None]], trial_id: str) -> list:
        """A trial's optimistic values (`optimistic`; as reported with fewer than two finished
        trials; a missing value stays missing): what a stopped trial's point is told (see the
        module)."""
        guess = self.optimistic(rung, trial_id)
        if guess is None:
            return list(rung[trial_id])
        values = pareto.as_losses([guess], list(self.objectives.values()))[0]
        return [None if math.isinf(v) else float(v) for v in values]  # losses back to values

    def losses(self, values: list[list[float | None]]) -> np.ndarray:
        """Values as losses (lower is better); a missing value is the worst (inf)."""
        rows = [[math.nan if v is None else v for v in row] for row in values]
        loss = pareto.as_losses(rows, list(self.objectives.values()))
        return np.where(np.isnan(loss), math.inf, loss)

    # ---- the record in the sweep folder, and Tune's save and restore ----------------------

    def record_path(self) -> Path | None:
        return None if self.sweep is None else record_file(self.sweep)

    def state(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_dict(),
            "records": {
                str(rung): dict(rung_records) for rung, rung_records in self.records.items()
            },
            "stopped": dict(self.stopped),
            "stopped_runs": sorted(self.stopped_runs),
            "finals": dict(self.finals),
            "projected": dict(self.projected),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """A record written before finals or projections were kept reads as none of them."""
        for rung, rung_records in state.get("records", {}).items():
            self.records.setdefault(int(rung), {}).update(rung_records)
        self.stopped.update(state.get("stopped", {}))
        self.stopped_runs.update(state.get("stopped_runs", []))
        self.finals.update(state.get("finals", {}))
        self.projected.update(state.get("projected", {}))

    def save_record(self) -> None:
        """The decisions so far, replacing the file in one rename (a kill leaves old or new)."""
        path = self.record_path()
        if path is not None:
            write_json(path, self.state())

    def load(self) -> None:
        path = self.record_path()
        if path is not None and path.is_file():
            self.set_state(json.loads(path.read_text()))

    def save(self, checkpoint_path: str) -> None:
        write_json(Path(checkpoint_path), self.state())

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(json.loads(Path(checkpoint_path).read_text()))
        self.load()  # the sweep's record is never older than Tune's snapshot

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.load()

    def debug_string(self) -> str:
        return f"{type(self).__name__}: rungs {self.settings.rungs()}, {len(self.stopped)} stopped"


def record_file(sweep: str) -> Path:
    """The sweep's record of its scheduler's decisions."""
    return place.sweep_folder(place.root(sweep), sweep) / RECORD


def projected(sweep: str, trial_id: str) -> list[float | None] | None:
    """The projection the sweep's rule wrote when it stopped `trial_id` (None: no record, or
    one written before projections were kept)."""
    path = record_file(sweep)
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("projected", {}).get(trial_id)


def write_json(path: Path, data: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "w") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(path)
    except OSError as error:
        raise store.WriteFailed(path, error) from error


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


class RecordStopped(Callback):
    """Stores a trial the scheduler stopped: status ``stopped``, its last epoch's metrics, the
    epoch it reached. (A function trainable is not told it was stopped; Tune ends its actor.)"""

    def __init__(self, space, sweep: str):
        self.space, self.sweep = space, sweep

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        from ..trainable import sweep_rows

        result = trial.last_result or {}
        if result.get("trial_status") != "running":  # ended on its own: it stored its row
            return
        root = place.root(self.sweep)
        if trial.trial_id in store.trial_ids(root, self.sweep):
            return
        reported, outcome = split(result)
        tune_keys = {*AUTO_RESULT_KEYS, "done", "trial_id", "node_id", "trial_status"}
        metrics = {k: v for k, v in reported.items() if k not in tune_keys}
        now = datetime.now(UTC)
        record = sweep_rows(self.space, self.sweep).row(
            trial.trial_id,
            STOPPED,
            self.space.trial_config(trial.config["params"]).to_flat(),
            metrics,
            outcome,
            point=trial.config["point"],
            epochs_completed=int(result.get("epoch", 0)),
            started_at=now - timedelta(seconds=float(result.get("time_total_s", 0.0))),
            finished_at=now,
            node_id=result.get("node_id"),
        )
        store.write_trial(root, record)
