"""Replay sweeps against a table of recorded learning curves, through the sweep's own code.

Why: whether a sampler or early stopping spends less per front can only be told from many
sweeps, and real ones cost hours. A table holds, for every point of a grid, the validation
metric after every epoch, the predicted memory and the seconds its training took
(`benchmarks/learning_curves.py` records one). A replayed sweep runs the real
`ScreenedSearcher` (its journal, its sampler, its screening) and the real early-stopping
scheduler the space names (`stopping`), with the space's exactness (`exactness`, which, like a
known-memory sampler, reads the table's memory): the searcher's ``suggest`` hands out points,
each epoch of a point's recorded curve is fed to the scheduler's ``decide`` (what its
``on_trial_result`` runs) as the result a trial would report, and a trial's end reaches the
searcher's ``on_trial_complete`` as Tune would send it. A sampler that weighs cost (`cost`,
`search.samplers`) is given each point's predicted seconds of training (`Table.predicted`, the
project's time prediction of the table's points, computed apart), never the seconds recorded,
which are the clock's.

Only Ray's trials are absent, and the sweep runs as Tune runs one (`run_sweep`): `workers`
trials at once on a clock of seconds, each epoch of a training taking its share of the
training's recorded seconds (a table without them: one second an epoch, every trial in step),
the epoch that ends first reporting next. A trial that ends, completed or stopped, frees its
worker then, and every free worker asks the searcher for a trial: a suggestion starts at once;
``None`` means "ask again later" (Tune's Searcher contract; e.g. Ray's ConcurrencyLimiter at its
limit), so the worker asks again when the next trial reports; ``Searcher.FINISHED`` means no
more, and the sweep ends when its last trial does.

A sweep's costs after every trial that ended (`Ended`): the epochs trained; the compute, the
worker-seconds spent (every epoch trained, and the part of those in progress that has run: what
a cluster bills when the sweep stops there); and the elapsed seconds since it started. Its gain
is the hypervolume of the points trained to the end (their final values; a stopped trial's
values are partial and count for nothing), on the metric and the logarithm of memory, from the
table's nadir.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher

from tune_lowmem import pareto
from tune_lowmem.outcome import MAXIMIZE, MEMORY_OBJECTIVE, MINIMIZE
from tune_lowmem.search import place
from tune_lowmem.search.searcher import ScreenedSearcher
from tune_lowmem.search.stopping import build_scheduler
from tune_lowmem.space import SearchSpace

METRIC = "val_accuracy"
CONFIG = "config."
SECONDS = "train_seconds"  # a table's column: the seconds a point's training took


@dataclass
class Table:
    """Recorded curves: params key -> (curve of the metric per epoch, predicted memory), the
    seconds each point's training took (None: every epoch one second), and the seconds each
    was predicted to take before training (None: not predicted)."""

    curves: dict[str, tuple[list[float], float]]
    params: dict[str, list[Any]]  # each param's values, in the table's order
    seconds: dict[str, float] | None = None
    predicted: dict[str, float] | None = None

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Table:
        names = [c.removeprefix(CONFIG) for c in frame if c.startswith(CONFIG)]
        columns = {n: [_plain(v) for v in frame[CONFIG + n]] for n in names}
        for values in columns.values():  # Parquet keeps an integer column with nulls as floats
            if None in values and all(v is None or float(v).is_integer() for v in values):
                values[:] = [None if v is None else int(v) for v in values]
        params = {n: list(dict.fromkeys(values)) for n, values in columns.items()}
        curves, seconds = {}, {}
        for i, row in enumerate(frame.to_dict("records")):
            point = key({n: columns[n][i] for n in names})
            curves[point] = ([float(v) for v in row["curve"]], float(row[MEMORY_OBJECTIVE]))
            if SECONDS in row:
                seconds[point] = float(row[SECONDS])
        if len(curves) != np.prod([len(v) for v in params.values()]):
            raise ValueError(f"the table's {len(curves)} points are not a full grid of {params}")
        return cls(curves, params, seconds if SECONDS in frame else None)

    def memory(self, params: Mapping[str, Any]) -> float | None:
        """A point's predicted memory as the table recorded it (None: not in the table)."""
        recorded = self.curves.get(key(params))
        return None if recorded is None else recorded[1]

    def predicted_cost(self, params: Mapping[str, Any]) -> float | None:
        """A point's predicted seconds of training, as a cost-weighing sampler is given them
        (None: not in the table); ValueError where the table has none."""
        if self.predicted is None:
            raise ValueError("the table has no predicted seconds for a sampler that weighs cost")
        return self.predicted.get(key(params))

    def cost(self, params: Mapping[str, Any]) -> float:
        """The seconds a point's training took, as the table recorded them (its exact variants
        share them: the table trains each training once, without the exact techniques)."""
        return self.seconds_of(key(params))

    def seconds_of(self, point: str) -> float:
        """`cost` of a point by its `key` (a table without seconds: one an epoch)."""
        return float(self.epochs()) if self.seconds is None else self.seconds[point]

    def epochs(self) -> int:
        """The schedule's length: every recorded curve has one value per epoch."""
        return len(next(iter(self.curves.values()))[0])

    def finals(self) -> list[list[float]]:
        return [[curve[-1], memory] for curve, memory in self.curves.values()]

    def reference(self) -> list[float]:
        """The hypervolume's reference point: the table's nadir (its least final metric, 1.1 x
        its largest memory), so that a point counts for what it adds over the table's worst
        rather than over chance accuracy."""
        finals = np.array(self.finals())
        return [float(finals[:, 0].min()), 1.1 * float(finals[:, 1].max())]

    def best_hypervolume(self) -> float:
        return hypervolume(self.finals(), self.reference())


def _plain(value: Any) -> Any:
    """A table cell as the space samples it (NaN, numpy scalars: None, Python numbers)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True)


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """Of (metric, memory) points, on the metric and the logarithm of memory: memory savings are
    ratios (the paper's 60.7x), so halving memory counts the same at 100 MB as at 2 MB."""
    if not points:
        return 0.0
    logged = [[metric, np.log10(memory)] for metric, memory in points]
    return pareto.hypervolume(logged, [MAXIMIZE, MINIMIZE], [reference[0], np.log10(reference[1])])


def replay_space(
    table: Table,
    base: Mapping[str, Any],
    sampler: str,
    seed: int,
    orders: Mapping[str, Sequence[Any]] | None = None,
    **extra,
) -> dict:
    """The search space (as `SearchSpace.from_dict` reads it) over the table's grid; `orders`:
    params whose values are declared ordered, in their order (numbers are ordered already)."""
    orders = orders or {}
    for name, order in orders.items():
        if sorted(map(str, order)) != sorted(map(str, table.params[name])):
            raise ValueError(f"{name}: the order {order} is not the table's {table.params[name]}")
    params = {
        n: {"type": "choice", "values": list(orders[n]), "ordered": True}
        if n in orders
        else {"type": "choice", "values": v}
        for n, v in table.params.items()
    }
    return {
        "name": "replay",
        "base": dict(base),
        "params": params,
        "objectives": {METRIC: str(MAXIMIZE), MEMORY_OBJECTIVE: str(MINIMIZE)},
        "sampler": sampler,
        "sampler_seed": seed,
        "baseline": False,  # a replay measures its sampler: no reference trained beside it
        **extra,
    }


@dataclass
class Running:
    trial_id: str
    curve: list[float]
    memory: float
    start: float  # the time it started, in seconds
    epoch_seconds: float  # each of its epochs
    params: dict[str, Any]  # as the searcher gave them (with the seed)
    done: int = 0  # epochs reported

    def next_report(self) -> float:
        """When its next epoch ends."""
        return self.start + (self.done + 1) * self.epoch_seconds

    def result(self) -> dict[str, Any]:
        final = self.done == len(self.curve)
        return {
            "epoch": self.done,
            METRIC: self.curve[self.done - 1],
            MEMORY_OBJECTIVE: self.memory,
            "trial_status": "completed" if final else "running",
        }


class Ended(NamedTuple):
    """A sweep when one of its trials ended: what it had spent, and what it had found."""

    epochs: int  # epochs trained, every trial's
    compute: float  # worker-seconds: the epochs trained and the part run of those in progress
    elapsed: float  # seconds since the sweep started
    hypervolume: float  # of the points trained to the end


def replay(
    space: SearchSpace,
    table: Table,
    workers: int = 1,
    memory_band: float | None = None,
    until: float = float("inf"),
) -> list[Ended]:
    """One sweep: its costs and the hypervolume of the points trained to the end after every
    trial that ended (completed or stopped), cut short once the hypervolume reaches `until`. The rule the space's scheduler section names (`stopping.build_scheduler`) stops
    trials; `memory_band` is mo-asha's band (None: every trial at a rung is compared with every
    other)."""
    with tempfile.TemporaryDirectory() as folder:
        searcher = table_searcher(space, table, folder)
        scheduler = None
        if space.scheduler is not None:
            band = {} if memory_band is None else {"memory_band": memory_band}
            scheduler = build_scheduler(space.scheduler, space.objectives, space.name, **band)
        return run_sweep(searcher, scheduler, table, workers, until)


def table_searcher(space: SearchSpace, table: Table, folder: str) -> ScreenedSearcher:
    """The sweep's searcher, its sweep folder in `folder`, reading every memory from the
    table: a known-memory sampler's, and exactness's least-memory variants; a cost-weighing
    sampler's predicted seconds too (`Table.predicted`)."""
    place.bind(space.name, folder)
    place.sweep_folder(folder, space.name).mkdir(parents=True)
    searcher = ScreenedSearcher(space, space.name)
    if "memory" in space.sampler.needs:
        searcher.study.sampler.memory = table.memory
    if "cost" in space.sampler.needs:
        searcher.study.sampler.cost = table.predicted_cost
    if searcher.exactness is not None:
        searcher.exactness.memory = table.memory
    return searcher


def first_asks(space: SearchSpace, table: Table, count: int) -> list[dict[str, Any]]:
    """The first `count` points the sweep's searcher asks with no result told: what a sweep of
    `count` trials at once starts with, blind to the learned objective."""
    with tempfile.TemporaryDirectory() as folder:
        searcher = table_searcher(space, table, folder)
        asked = [searcher.suggest(f"replay_{i:05d}") for i in range(count)]
    return [trained_params(point) for point in asked if point not in (None, Searcher.FINISHED)]


def trained_params(suggested: Mapping[str, Any]) -> dict[str, Any]:
    """A suggested trial's point as the table keys it: its params without the seed."""
    return {k: v for k, v in suggested["params"].items() if k != "seed"}


def run_sweep(
    searcher: Searcher, scheduler, table: Table, workers: int, until: float = float("inf")
) -> list[Ended]:
    """The sweep on its clock (see the module): the state after every trial that ended."""
    running: list[Running] = []
    finished: list[list[float]] = []
    history: list[Ended] = []
    epochs, asks, now, spent, finishing = 0, 0, 0.0, 0.0, False
    reference = table.reference()
    while True:
        while not finishing and len(running) < workers:  # every free worker asks
            trial_id = f"replay_{asks:05d}"
            suggested = searcher.suggest(trial_id)
            asks += 1
            if suggested is None:  # ask again later: when a trial reports
                break
            if suggested == Searcher.FINISHED:
                finishing = True
                break
            params = trained_params(suggested)
            curve, memory = table.curves[key(params)]
            seconds = table.cost(params) / len(curve)
            running.append(Running(trial_id, curve, memory, now, seconds, suggested["params"]))
        if history and history[-1].hypervolume >= until:
            return history
        if not running:
            if finishing:
                return history
            raise RuntimeError(
                "the searcher asks to be asked later with no trial running: nothing would ever "
                "ask it again"
            )
        trial = min(running, key=Running.next_report)  # of equal times, the first started
        now = trial.next_report()
        trial.done += 1
        epochs += 1
        result = trial.result()
        decision = TrialScheduler.CONTINUE
        if scheduler is not None:
            decision = scheduler.decide(trial.trial_id, result, trial.params)
        if result["trial_status"] == "running" and decision == TrialScheduler.CONTINUE:
            continue
        running.remove(trial)
        spent += trial.done * trial.epoch_seconds
        searcher.on_trial_complete(trial.trial_id, result=result)
        if result["trial_status"] == "completed":
            finished.append([result[METRIC], trial.memory])
        compute = spent + sum(now - other.start for other in running)
        history.append(Ended(epochs, compute, now, hypervolume(finished, reference)))


def reached(history: list[Ended], target: float) -> Ended | None:
    """The sweep when its hypervolume first reached `target` (None: never)."""
    return next((ended for ended in history if ended.hypervolume >= target), None)


def epochs_to(history: list[Ended], target: float) -> float:
    """Epochs trained when the hypervolume first reached `target` (inf: never)."""
    ended = reached(history, target)
    return float("inf") if ended is None else float(ended.epochs)
