"""What a person watching a sweep reads: one line per event instead of Ray's tables.

[12:01:07] 1f2e3_00003 started: precision=bf16 microbatch.size=10 checkpoint=none ...
[12:01:31] 1f2e3_00003 epoch 2: val_accuracy=0.3120 train_loss=1.7311
[12:01:44] 1f2e3_00003 completed: val_accuracy=0.3460 memory.predicted_total_mb=7.2 (3 epochs, 36 s, \
0.31 s per update)
[12:01:44] trials: 4 completed, 1 failed, 0 infeasible, 2 running, 0 pending | 5/40 done, 61/h, \
about 34 min left | best: ...

The rate counts the trials done since this driver started (a resumed sweep: since the resume).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from ray.tune import Callback
from ray.tune.experiment import Trial

from .. import pareto, store
from ..analysis.counted import labelled
from ..outcome import MEASURED_UPDATE_S, column, is_outcome
from ..space import SearchSpace
from .baseline import INFEASIBLE_ID, is_baseline
from .screening import SCREENED_PREFIXES

BEST_SHOWN = 3  # points of the running Pareto front printed after each finished trial


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def _number(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return "none"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return str(value)


def describe(values: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_number(v)}" for k, v in values.items())


class ProgressPrinter(Callback):
    """Prints trial starts, epochs, outcomes, and after each outcome the counts and the best.
    `root` gives the store's root when asked: Tune pickles this callback into the sweep's
    folder, so it holds how to find the store (the sweep's place), not a path."""

    def __init__(self, space: SearchSpace, sweep: str, root: Callable[[], str | Path]):
        self.space, self.sweep, self.root = space, sweep, root
        self.started: float | None = None  # when this driver began (a resumed one: its own)
        self.done_before: int | None = None  # trials done by then

    def setup(self, **info) -> None:
        self.started, self.done_before = time.monotonic(), None

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info) -> None:
        what = "the baseline (every technique off), " if is_baseline(trial.config) else ""
        say(f"{trial.trial_id} started: {what}{describe(trial.config['params'])}")

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info
    ) -> None:
        if result.get("trial_status") == "running":
            shown = {
                k: result[k]
                for k in (*self.space.objectives, "train_loss")
                if result.get(k) is not None
            }
            say(f"{trial.trial_id} epoch {int(result.get('epoch') or 0)}: {describe(shown)}")

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info) -> None:
        result = trial.last_result or {}
        status = result.get("trial_status", "completed")
        if status == "completed":
            shown = {k: result.get(k) for k in self.space.objectives}
            seconds = result.get("train_seconds") or 0.0
            epochs = int(result.get("epoch") or 0)
            update = result.get(MEASURED_UPDATE_S)
            per_update = "" if update is None else f", {update:.3g} s per update"
            say(
                f"{trial.trial_id} completed: {describe(shown)} ({epochs} epochs, {seconds:.0f} s"
                f"{per_update})"
            )
        elif status == "running":  # its last result still running: the scheduler stopped it
            shown = {k: result.get(k) for k in self.space.objectives}
            say(f"{trial.trial_id} stopped early at epoch {result.get('epoch')}: {describe(shown)}")
        else:
            say(f"{trial.trial_id} {status}: {result.get('failure_reason')}")
        say(self.summary(trials, ending=trial))

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info) -> None:
        tries = self.space.max_failures + 1
        say(
            f"{trial.trial_id} failed: its worker died {tries} time(s), max_failures {self.space.max_failures}"
        )
        say(self.summary(trials, ending=trial))

    def summary(self, trials: list[Trial], ending: Trial | None = None) -> str:
        """Counts by outcome (`ending`: the trial being reported, whose status Tune sets after)."""
        counts = dict.fromkeys(("completed", "failed", "infeasible", "running", "pending"), 0)
        finished = []
        for trial in trials:
            if trial.status == Trial.ERROR:
                counts["failed"] += 1
            elif trial.status == Trial.TERMINATED or trial is ending:
                status = (trial.last_result or {}).get("trial_status", "completed")
                counts[status if status in counts else "failed"] += 1
                if status == "completed":
                    finished.append(trial.last_result)
            elif trial.status == Trial.RUNNING:
                counts["running"] += 1
            else:
                counts["pending"] += 1
        root = self.root() if callable(self.root) else self.root  # a path: pickled by an old sweep
        stored = store.trial_ids(root, self.sweep)
        prefixes = tuple(SCREENED_PREFIXES.values())
        screened = [i for i in stored if i.startswith(prefixes) or i == INFEASIBLE_ID]
        invalid = SCREENED_PREFIXES["failed"]
        counts["infeasible"] += sum(1 for i in screened if not i.startswith(invalid))
        counts["failed"] += sum(1 for i in screened if i.startswith(invalid))
        text = "trials: " + ", ".join(f"{n} {name}" for name, n in counts.items())
        text += " | " + self.pace(len(screened) * self.space.seeds_per_point, trials, ending)
        best = self.best(finished)
        return f"{text} | best: {best}" if best else text

    def pace(self, screened: int, trials: list[Trial], ending: Trial | None) -> str:
        """Trials done of the total, trials per hour, and the time left at that rate; a point
        screened out counts as all its seeds' trials."""
        finished = (Trial.TERMINATED, Trial.ERROR)
        done = screened + sum(1 for t in trials if t.status in finished or t is ending)
        total = self.space.planned_trials
        now = time.monotonic()
        if self.started is None:
            self.started = now
        if self.done_before is None:  # the first trial this driver saw end
            self.done_before = done - 1
        text = f"{done}/{total} done"
        if now - self.started < 1 or done <= self.done_before:
            return text
        per_s = (done - self.done_before) / (now - self.started)
        text = f"{text}, {per_s * 3600:.0f}/h"
        return text if done >= total else f"{text}, {_time_left((total - done) / per_s)}"

    def best(self, results: list[dict]) -> str:
        """The running front on the objectives, test metrics left out: nothing is chosen on test
        data, not even what a progress line calls best (no line when nothing else is left)."""
        objectives = {k: v for k, v in self.space.objectives.items() if not k.startswith("test_")}
        if not results or all(is_outcome(column(k)) for k in objectives):
            return ""
        values = pd.DataFrame(
            [{k: r.get(k, np.nan) for k in objectives} for r in results], dtype=float
        )
        front = pareto.pareto_front(values.drop_duplicates(), dict(objectives)).head(BEST_SHOWN)
        return "; ".join(describe(row) for row in front.to_dict("records"))


def _time_left(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute left"
    shown = f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
    return f"about {shown} left"


def front_table(front: pd.DataFrame) -> str:
    """The Pareto front as aligned text, one point a line, each memory column labelled stored or
    accounted (`analysis.counted`)."""
    if front.empty:
        return "  (no completed trial yet)"
    shown = front.astype(object).map(_number)
    shown.columns = [labelled(column) for column in shown.columns]
    return shown.to_string(index=False)
