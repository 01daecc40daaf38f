"""The progress line a person waiting on a sweep reads: counts, trials done of the total, the
rate and the time left, on the one summary line after each trial."""

from __future__ import annotations

import re

from ray.tune.experiment import Trial

from tests.test_plugins import TINY_TASK
from tune_lowmem.search.baseline import INFEASIBLE_ID
from tune_lowmem.search.progress import ProgressPrinter
from tune_lowmem.space import SearchSpace
from tune_lowmem.store import TrialRecord, write_trial

RAW = {
    "name": "watched",
    "base": {"task": TINY_TASK, "device": "cpu"},
    "params": {"precision": {"type": "choice", "values": ["fp32", "bf16"]}},
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "num_samples": 20,
    "seeds_per_point": 2,
    "baseline": False,
}
SPACE = SearchSpace.from_dict(RAW)


def trials(done: int, running: int) -> list[Trial]:
    made = []
    for number in range(done + running):
        trial = Trial("tiny", config={"params": {}}, stub=True)
        trial.set_status(Trial.TERMINATED if number < done else Trial.RUNNING)
        made.append(trial)
    return made


def watching(tmp_path, monkeypatch, space=SPACE) -> tuple[list[float], ProgressPrinter]:
    """A printer set up as a driver starts, and the clock it reads (moved by the test)."""
    clock = [1000.0]
    monkeypatch.setattr("tune_lowmem.search.progress.time.monotonic", lambda: clock[0])
    printer = ProgressPrinter(space, "watched", lambda: tmp_path)
    printer.setup()
    return clock, printer


def test_the_line_says_done_of_total_rate_and_time_left(tmp_path, monkeypatch):
    clock, printer = watching(tmp_path, monkeypatch)
    done = SPACE.trial_config({"precision": "fp32", "seed": 0}).to_flat()
    write_trial(tmp_path, TrialRecord("watched", "t1", "completed", done), [])  # not screened
    clock[0] += 60  # the first trial ends a minute in
    first = printer.summary(trials(1, 2))
    assert "1 completed, 0 failed, 0 infeasible, 2 running, 0 pending" in first
    assert "1/40 done, 60/h, about 39 min left" in first  # 20 points x 2 seeds
    clock[0] += 540  # ten trials in ten minutes
    later = printer.summary(trials(10, 2))
    assert re.search(r"\| 10/40 done, 60/h, about 30 min left", later), later
    clock[0] += 3 * 3600
    assert printer.summary(trials(40, 0)).endswith("| 40/40 done, 13/h")  # nothing left to say


def test_a_resumed_driver_rates_only_what_it_ran(tmp_path, monkeypatch):
    clock, printer = watching(tmp_path, monkeypatch)
    clock[0] += 120  # 30 were done before the resume; one more ends two minutes in
    assert "31/40 done, 30/h, about 18 min left" in printer.summary(trials(31, 2))


def test_a_screened_point_counts_as_all_its_seeds(tmp_path, monkeypatch):
    clock, printer = watching(tmp_path, monkeypatch)
    config = SPACE.trial_config({"precision": "fp32", "seed": 0}).to_flat()
    reason = "predicted 9 MB > budget 1 MB"
    write_trial(
        tmp_path,
        TrialRecord("watched", "infeasible-00003", "infeasible", config, failure_reason=reason),
        [],
    )
    clock[0] += 60
    line = printer.summary(trials(1, 0))
    assert "1 infeasible" in line and "| 3/40 done" in line  # 2 seeds screened, 1 trained


def test_the_baseline_counts_its_seeds_and_over_the_budget_counts_as_infeasible(
    tmp_path, monkeypatch
):
    space = SearchSpace.from_dict({**RAW, "baseline": True})
    clock, printer = watching(tmp_path, monkeypatch, space)
    config = space.trial_config({"seed": 0}).to_flat()
    reason = "predicted 9 MB > budget 1 MB"
    record = TrialRecord("watched", INFEASIBLE_ID, "infeasible", config, failure_reason=reason)
    write_trial(tmp_path, record, [])
    clock[0] += 60
    line = printer.summary(trials(0, 0))
    assert "1 infeasible" in line and "| 2/42 done" in line  # (20 points + the baseline) x 2
