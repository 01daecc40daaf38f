"""The replay runs a sweep as Ray Tune does: each training takes its recorded seconds and frees
its worker when it ends or is stopped; a searcher's ``None`` means "ask again later" and
``FINISHED`` ends the sweep once its trials have; compute and elapsed seconds are counted."""

from __future__ import annotations

import pandas as pd
import pytest
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from benchmarks import replay

# four trainings of 3 epochs: "long" takes 30 s, the others 9 s each
SECONDS = {"long": 30.0, "b": 9.0, "c": 9.0, "d": 9.0}
ACCURACY = {"long": 0.9, "b": 0.5, "c": 0.6, "d": 0.7}
MEMORY = {"long": 40.0, "b": 1.0, "c": 2.0, "d": 4.0}


def timed_table() -> replay.Table:
    frame = pd.DataFrame(
        {
            "config.name": list(SECONDS),
            "curve": [[a - 0.2, a - 0.1, a] for a in ACCURACY.values()],
            "memory.predicted_total_mb": list(MEMORY.values()),
            "train_seconds": list(SECONDS.values()),
        }
    )
    return replay.Table.from_frame(frame)


class InOrder(Searcher):
    """Hands out the table's points in a fixed order, then FINISHED."""

    def __init__(self, names: list[str]):
        super().__init__()
        self.names, self.told = list(names), []

    def suggest(self, trial_id: str):
        if not self.names:
            return Searcher.FINISHED
        return {"params": {"name": self.names.pop(0), "seed": 0}}

    def on_trial_complete(self, trial_id: str, result=None, error=False) -> None:
        self.told.append((trial_id, result["trial_status"], result["epoch"]))


def test_a_table_reads_each_trainings_seconds():
    table = timed_table()
    assert table.cost({"name": "long"}) == 30.0
    untimed = replay.Table(table.curves, table.params)
    assert untimed.cost({"name": "long"}) == 3.0  # no seconds recorded: one an epoch


def test_each_training_frees_its_worker_when_it_ends():
    """Two workers: "b" ends at 9 s and "c" starts then, "d" at 18 s, while "long" runs to 30 s;
    compute counts the part "long" has run at every end."""
    searcher = InOrder(["long", "b", "c", "d"])
    history = replay.run_sweep(searcher, None, timed_table(), workers=2)
    assert [h.elapsed for h in history] == [9.0, 18.0, 27.0, 30.0]
    assert [h.compute for h in history] == [18.0, 36.0, 54.0, 57.0]
    assert [h.epochs for h in history] == [3, 7, 11, 12]  # "long" reports at 10, 20, 30 s
    assert [name for name, *_ in searcher.told] == [f"replay_{i:05d}" for i in (1, 2, 3, 0)]


def test_a_stopped_trial_frees_its_worker_at_its_stop():
    class StopLong:
        def decide(self, trial_id, result, params):
            return TrialScheduler.STOP if params["name"] == "long" else TrialScheduler.CONTINUE

    searcher = InOrder(["long", "b", "c", "d"])
    history = replay.run_sweep(searcher, StopLong(), timed_table(), workers=2)
    assert ("replay_00000", "running", 1) in searcher.told
    assert [h.elapsed for h in history] == [9.0, 10.0, 18.0, 19.0]  # "d" starts at 10 s
    assert history[-1].compute == 10.0 + 3 * 9.0
    assert history[-1].hypervolume < timed_table().best_hypervolume()  # "long" never counted


def test_none_means_ask_again_later_and_finished_ends_the_sweep():
    """Ray's ConcurrencyLimiter answers None while its one trial runs: the second worker asks
    again at every report, so every point trains, one at a time (elapsed is compute)."""
    limited = ConcurrencyLimiter(InOrder(["long", "b", "c", "d"]), max_concurrent=1)
    history = replay.run_sweep(limited, None, timed_table(), workers=2)
    assert [h.elapsed for h in history] == [30.0, 39.0, 48.0, 57.0]
    assert [h.compute for h in history] == [h.elapsed for h in history]
    assert history[-1].hypervolume == pytest.approx(timed_table().best_hypervolume())


def test_a_searcher_that_waits_on_nothing_is_an_error():
    class Never(Searcher):
        def suggest(self, trial_id):
            return None

    with pytest.raises(RuntimeError, match="asked later with no trial running"):
        replay.run_sweep(Never(), None, timed_table(), workers=2)


def test_reached_gives_the_costs_at_a_target():
    history = replay.run_sweep(InOrder(["long", "b", "c", "d"]), None, timed_table(), 2)
    best = timed_table().best_hypervolume()
    at_end = replay.reached(history, 0.999 * best)
    assert at_end == history[-1] and replay.epochs_to(history, 0.999 * best) == 12
    assert replay.reached(history, 2 * best) is None
