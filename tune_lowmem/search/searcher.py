"""The searcher: Ray Tune's public `Searcher` driving Optuna's public ask and tell on the journal.

Points and seeds: the sampler proposes a point once; a feasible point runs as
``seeds_per_point`` Tune trials (seeds 0..k-1, one store row each, sharing a ``seed_group``), and
the sampler is told the mean over the seeds that completed. `num_samples` counts points.

Screening: each point asked is screened (`screening.screen`) before Tune sees it; its predicted
memory and update time over the space's budgets are set as the trial's constraints
(``Trial.set_constraint``, `screening.budget_excess`: NSGA-II, TPE and GP rank a violation below
every feasible point). A point over a budget (or not a valid config) is stored at once under
the id ``infeasible-<n>`` (``invalid-<n>``), told with dominated values, and another point is
asked for, so it never occupies a worker.

The baseline (`baseline`, a space's ``baseline``): the base with every technique off, handed
out once per seed before the sampler's first point, outside the sampler (no Optuna trial, never
told); over the budget, stored as infeasible and not trained.

Exactness (`exactness`, a space's ``exactness``): a point asked trains as the least-memory
variant of its training, and a point whose training an earlier point trains is not trained: it
is told what the earlier one is told, when that one is.

Representation (`representation`, decided when the study is created and kept in it): an
ordered choice is asked of Optuna's samplers as its rank, and the choices exactness decides are
not asked; the journal's points are read back through it.

Surviving the driver: the journal is written as points are asked and told; the store is written
by the trials themselves as they end; Tune snapshots its trials, then this searcher (only which
Tune trial holds which point and seed), at its own period (`tune_state`). After a restart the searcher rebuilds everything else
from those three records (`rejoin`), so a snapshot older than Tune's trials loses nothing: every
point runs once per seed, a point asked but never given to a trial runs after the restart, and
every trial lands in the store once. Nothing saved names a path: the sweep's storage root comes
from `place`, bound by the driver.
"""

from __future__ import annotations

import logging
import pickle
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.storages import JournalStorage
from optuna.trial import FixedTrial, FrozenTrial, TrialState
from ray.tune.search import Searcher

from .. import store
from ..outcome import is_outcome, result_from_row
from ..space import SearchSpace, worst_value
from . import baseline, journal, place
from .exactness import Exactness, answered_by, trained_params
from .progress import say
from .representation import Representation
from .samplers import build_sampler
from .screening import SCREENED_PREFIXES, Screening, budget_excess, screen, write_screened
from .stopping.asha import STOPPED, STOPPED_POINTS, projected
from .tune_state import tune_trials

STOPPED_STATUSES = (STOPPED, "running")  # running at its end: stopped early
TOLD_STATUSES = ("completed", *STOPPED_STATUSES)
SAVED = ("space", "sweep", "assigned")  # what a snapshot holds; the rest is rebuilt by rejoin
log = logging.getLogger(__name__)


def objective_names(space: SearchSpace) -> list[str]:
    """The objectives as Optuna's metric names: as the space names them, the outcome ones by
    their store column (``memory.predicted_total_mb``), the others by their own
    (``val_accuracy``)."""
    return list(space.objectives)


@dataclass
class Point:
    """A feasible point: its params, and what each of its seeds gave (None: did not complete)."""

    params: dict[str, Any]
    given: set[int] = field(default_factory=set)  # seeds given to Tune trials (or found stored)
    outcomes: dict[int, list[float] | None] = field(default_factory=dict)
    stopped: bool = False  # a seed was stopped early: its values are projected


class ScreenedSearcher(Searcher):
    """Screens each point by predicted memory and runs it once per seed (see the module)."""

    def __init__(self, space: SearchSpace, sweep: str):
        super().__init__()
        self.space, self.sweep = space, sweep
        self.assigned: dict[str, tuple[int, int]] = {}  # Tune trial id -> (point, seed)
        self.connect({})  # a resumed sweep that Tune cannot restore starts from the journal

    def __getstate__(self) -> dict[str, Any]:
        """What Tune pickles (tuner.pkl, the searcher snapshots): no study, no path."""
        rebuilt = (
            "journal",
            "study",
            "points",
            "open",
            "unscreened",
            "asked",
            "exactness",
            "waiting",
            "representation",
            "baseline_open",
            "baseline_checked",
        )
        return {k: v for k, v in self.__dict__.items() if k not in rebuilt}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.connect(tune_trials(place.sweep_folder(place.root(self.sweep), self.sweep)))

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.__getstate__(), handle)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as handle:
            self.__setstate__(pickle.load(handle))

    def connect(self, tune_trials: Mapping[str, Mapping[str, Any]]) -> None:
        """Open the sweep's study in its journal (creating it, with its metric names, at the
        sweep's start) and rebuild the state from it."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress lines say what happens
        path = place.sweep_folder(place.root(self.sweep), self.sweep) / journal.JOURNAL
        self.journal = journal.open_journal(path)
        self.study = optuna.create_study(
            study_name=self.sweep,
            storage=JournalStorage(self.journal),
            load_if_exists=True,
            directions=list(self.space.objectives.values()),
        )
        if self.study.metric_names is None:
            with warnings.catch_warnings():  # experimental since Optuna 3.2, and public
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study.set_metric_names(objective_names(self.space))
        self.rejoin(tune_trials)

    def rejoin(self, tune_trials: Mapping[str, Mapping[str, Any]]) -> None:
        """Rebuild the points, their seeds and outcomes from what was written as it happened:
        the journal (every point asked, with its params, and told), Tune's trials (trial id ->
        the config this searcher gave it) with this searcher's own assignments, and the store's
        rows (each names its point and seed). Points told neither way are told now; an asked
        point that no trial holds or stored is screened again and handed out first; a point
        answered by an earlier one (`exactness`) is told once that one is; the sampler is
        reseeded past the points asked."""
        trials = self.study.get_trials(deepcopy=False)
        self.representation = Representation.of_study(self.study, self.space)
        self.study.sampler = build_sampler(self.space, seed_offset=len(trials))
        self.exactness = Exactness(self.space) if self.space.uses_exactness() else None
        self.waiting: dict[int, list[int]] = {}  # point -> the points its result answers, untold
        asked = {t.number: params for t in trials if (params := self.trained(t)) is not None}
        running = {t.number for t in trials if t.state == TrialState.RUNNING}
        for number in sorted(running - set(asked)):  # the driver died while the sampler chose
            self.tell(number, None)
        self.asked = len(asked)
        answered = {n: earlier for n in asked if (earlier := answered_by(trials[n])) is not None}
        if self.exactness is not None:
            for number in sorted(set(asked) - set(answered)):
                self.exactness.trains(number, asked[number])
        self.assigned.update((i, (c["point"], c["params"]["seed"])) for i, c in tune_trials.items())
        rows = store.read_trials(place.root(self.sweep), self.sweep)
        stored = self.stored_outcomes(rows)
        self.points: dict[int, Point] = {}
        for number, seed in [*self.assigned.values(), *stored]:
            if number is not None:  # None: the baseline's (`baseline_seeds`)
                self.points.setdefault(number, Point(asked[number])).given.add(seed)
        self.baseline_open = self.baseline_seeds(rows)
        self.baseline_checked = False  # against the budget, by this driver
        for (number, seed), (trial_id, result) in stored.items():
            self.record(self.points[number], seed, trial_id, result, False)
        self.unscreened = sorted((running & set(asked)) - set(self.points) - set(answered))
        for number in sorted(running & set(answered)):
            self.answer_from(number, answered[number])
        live = sorted(running & set(self.points))
        self.open = [number for number in live if self.free_seed(self.points[number]) is not None]
        for number in live:
            self.tell_if_done(number)

    def trained(self, trial: FrozenTrial) -> dict[str, Any] | None:
        """What a point trains with: the variant its ask chose (`exactness`), else its params as
        sampled; None when the sampling was cut short."""
        asked = self.sampled(trial.params)
        return None if asked is None else trained_params(trial, asked)

    def sampled(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """A point as the space samples it, replayed from the values the journal recorded (read
        through the study's `representation`); None when the sampling was cut short (a value the
        space asks for is missing)."""
        try:
            return self.space.sample(
                self.representation.asking(FixedTrial(dict(params)), self.space)
            )
        except ValueError:
            return None

    def stored_outcomes(
        self, rows: pd.DataFrame
    ) -> dict[tuple[int, int], tuple[str, dict[str, Any]]]:
        """(point, seed) -> the trial id and result of every trained trial's row in the store
        (`rows`, the sweep's)."""
        if rows.empty or "point" not in rows:
            return {}
        screened = rows["trial_id"].str.startswith(tuple(SCREENED_PREFIXES.values()))
        trained = rows[rows["point"].notna() & ~screened].to_dict("records")
        return {
            (int(row["point"]), int(row["config.seed"])): (
                row["trial_id"],
                result_from_row(row, self.space.objectives),
            )
            for row in trained
        }

    def baseline_seeds(self, rows: pd.DataFrame) -> list[int]:
        """The baseline's seeds still to train: none given to a Tune trial or stored in `rows`
        (the sweep's; a baseline row has no point); none at all when the space trains no
        baseline or it was stored over the budget."""
        if not self.space.baseline:
            return []
        given = {seed for number, seed in self.assigned.values() if number is None}
        if not rows.empty and "point" in rows:
            mine = rows[rows["point"].isna()]
            if (mine["trial_id"] == baseline.INFEASIBLE_ID).any():
                return []
            given |= set(mine["config.seed"].dropna().astype(int))
        return [seed for seed in range(self.space.seeds_per_point) if seed not in given]

    def next_baseline_seed(self) -> int | None:
        """The baseline's next seed to hand out (None: none left); screened by the budget at
        the first, and left out, said and stored as infeasible, when over it."""
        if self.baseline_open and not self.baseline_checked:
            self.baseline_checked = True
            params = baseline.baseline_params(self.space)
            screening = screen(self.space, params)
            if not screening.feasible:
                self.baseline_open.clear()
                write_screened(
                    place.root(self.sweep),
                    self.sweep,
                    baseline.INFEASIBLE_ID,
                    self.space,
                    None,
                    params,
                    screening,
                )
                say(f"the baseline (every technique off) is not trained: {screening.reason}")
        return self.baseline_open.pop(0) if self.baseline_open else None

    def free_seed(self, point: Point) -> int | None:
        return min(set(range(self.space.seeds_per_point)) - point.given, default=None)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if trial_id not in self.assigned and (seed := self.next_baseline_seed()) is not None:
            self.assigned[trial_id] = (None, seed)
        if trial_id not in self.assigned:
            if not self.open:
                number = self.next_point()
                if number is None:
                    return Searcher.FINISHED
                self.open.append(number)
            number = self.open[0]
            point = self.points[number]
            seed = self.free_seed(point)
            self.assigned[trial_id] = (number, seed)
            point.given.add(seed)
            if self.free_seed(point) is None:
                self.open.pop(0)
        number, seed = self.assigned[trial_id]
        if number is None:
            return {"point": None, "params": {**baseline.baseline_params(self.space), "seed": seed}}
        return {"point": number, "params": {**self.points[number].params, "seed": seed}}

    def next_point(self) -> int | None:
        """The next feasible point, asked before a restart or anew; store and tell the others."""
        while self.unscreened or self.asked < self.space.num_samples:
            if self.unscreened:
                number = self.unscreened.pop(0)  # its constraint, if it had none, stays unset
                params = self.trained(self.study.get_trials(deepcopy=False)[number])
                screening = screen(self.space, params)
            else:
                number, params, screening, earlier = self.ask()
                if earlier is not None:
                    say(f"point {number} trains as point {earlier}: answered by it, not trained")
                    self.answer_from(number, earlier)
                    continue
            if screening.feasible:
                self.points[number] = Point(params)
                return number
            self.answer_screened(number, params, screening)
        return None

    def ask(self) -> tuple[int, dict[str, Any], Screening, int | None]:
        """A new point from the sampler: the params it trains with (`exactness`), screened, with
        its constraint set, and the earlier point that answers it (None: it trains); in one write
        to the journal, so that a point there always has all its params, what exactness made of
        it and its constraint."""
        with self.journal.one_write():
            trial = self.study.ask()
            params = self.space.sample(self.representation.asking(trial, self.space))
            earlier = None
            if self.exactness is not None:
                stopped = self.study.user_attrs.get(STOPPED_POINTS, [])
                params, earlier = self.exactness.ask(trial, params, stopped)
            screening = screen(self.space, params)
            if screening.predicted is not None:
                excess = budget_excess(self.space, screening.predicted, screening.time)
                for constraint, value in excess.items():
                    trial.set_constraint(constraint, value)
        self.asked += 1
        return trial.number, params, screening, earlier

    def answer_from(self, number: int, earlier: int) -> None:
        """Tell point `number` what point `earlier`, which trains its training, was told; once
        it is told, if it is not yet (`tell`)."""
        trial = self.study.get_trials(deepcopy=False)[earlier]
        if trial.state == TrialState.RUNNING:
            self.waiting.setdefault(earlier, []).append(number)
        else:
            self.tell(number, trial.values if trial.state == TrialState.COMPLETE else None)

    def answer_screened(self, number: int, params: dict[str, Any], screening: Screening) -> None:
        trial_id = f"{SCREENED_PREFIXES[screening.status]}{number:05d}"
        write_screened(
            place.root(self.sweep), self.sweep, trial_id, self.space, number, params, screening
        )
        say(f"{trial_id} {screening.status}, not trained: {screening.reason}")
        if screening.status == "failed":
            self.tell(number, None)
            return
        self.tell(number, self.dominated(screening.columns()))

    def dominated(self, outcome: dict[str, Any]) -> list[float]:
        """An infeasible point's values: its memory and time where known, the worst value of the
        rest."""
        values = []
        for name, direction in self.space.objectives.items():
            known = outcome.get(name) if is_outcome(name) else None
            task = self.space.base["task"]
            values.append(worst_value(name, direction, task) if known is None else float(known))
        return values

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """No pruning: a point's value is the mean over its seeds, known when they all end."""

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if trial_id not in self.assigned:
            return
        number, seed = self.assigned[trial_id]
        if number is None:  # the baseline: nothing to tell the sampler
            return
        point = self.points[number]
        if seed in point.outcomes:
            return
        self.record(point, seed, trial_id, result, error)
        self.tell_if_done(number)

    def record(
        self, point: Point, seed: int, trial_id: str, result: dict | None, error: bool
    ) -> None:
        point.outcomes[seed] = self.values(trial_id, result, error)
        status = result.get("trial_status") if result and not error else None
        point.stopped |= status in STOPPED_STATUSES

    def tell_if_done(self, number: int) -> None:
        """Tell Optuna a point's mean over its seeds once every seed has an outcome."""
        point = self.points[number]
        outcomes = point.outcomes
        if len(outcomes) == self.space.seeds_per_point:
            if point.stopped:  # listed before the tell: a sampler reads it
                self.list_stopped(number)
            done = [v for v in outcomes.values() if v is not None]
            self.tell(number, np.mean(done, axis=0).tolist() if done else None)

    def list_stopped(self, number: int) -> None:
        """Add a point to the study's `STOPPED_POINTS` (once: a resumed sweep tells it again)."""
        stopped = self.study.user_attrs.get(STOPPED_POINTS, [])
        if number not in stopped:
            self.study.set_user_attr(STOPPED_POINTS, [*stopped, number])

    def values(self, trial_id: str, result: dict | None, error: bool) -> list[float] | None:
        """A seed's outcome. A trial that ended with its last result still ``running`` (stored
        as ``stopped``) was stopped by the early-stopping scheduler (`scheduler`): it is told
        the projection the rule wrote with the stop, else (no rule's record has one) the values
        it reached."""
        if not error and result and result.get("trial_status") == "infeasible":  # out of memory
            return self.dominated(result)
        if error or not result or result.get("trial_status") not in TOLD_STATUSES:
            return None
        projection = None
        if result["trial_status"] in STOPPED_STATUSES:
            projection = projected(self.sweep, trial_id)
        values = projection or [result.get(name) for name in self.space.objectives]
        if any(v is None or not np.isfinite(v) for v in values):
            return None
        return [float(v) for v in values]

    def tell(self, number: int, values: list[float] | None) -> None:
        state = TrialState.COMPLETE if values is not None else TrialState.FAIL
        try:
            self.study.tell(number, values, state=state)
        except (
            optuna.exceptions.UpdateFinishedTrialError,
            RuntimeError,
            ValueError,
        ) as error:  # told before a resume
            log.debug("point %d already told: %s", number, error)
        for answered in self.waiting.pop(number, []):
            self.tell(answered, values)
