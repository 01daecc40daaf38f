"""Whole sweeps on a local 2-CPU Ray: the store against Tune and Optuna, budgets, failures, a killed driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray
import yaml
from optuna.trial import TrialState

from tests.ray_cluster import wait_for_trials_to_end
from tune_lowmem import pareto, store
from tune_lowmem.config import ConfigError
from tune_lowmem.outcome import PREDICTED_UPDATE_S, time_columns
from tune_lowmem.search import ScreenedSearcher, launch, place, resume, sweep_folder
from tune_lowmem.search import driver as search_driver
from tune_lowmem.search import sweep_study as study
from tune_lowmem.search.screening import screen
from tune_lowmem.search.stopping.asha import RECORD, STOPPED, STOPPED_POINTS, write_json
from tune_lowmem.search.trackers.event_files import FOLDER as EVENT_FILES
from tune_lowmem.search.trainable import sweep_rows
from tune_lowmem.space import SearchSpace

TINY_BASE = {
    "device": "cpu",
    "model": {"depth": 10, "width": 1},
    "schedule": {"epochs": 1, "batch_size": 20},
    "data": {"train_subset": 200, "val_size": 100, "test_subset": 100},
}
OBJECTIVES = {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"}
CLI = str(Path(sys.executable).with_name("tune-lowmem"))


def write_space(folder: Path, **fields) -> Path:
    """A sweep's space file; no baseline unless `fields` ask for one (it is tested apart)."""
    space = {
        "base": TINY_BASE,
        "objectives": OBJECTIVES,
        "max_concurrent": 2,
        "baseline": False,
        **fields,
    }
    path = folder / f"{fields['name']}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def test_searcher_screens_points_runs_seeds_and_survives_pickling(tmp_path):
    """The searcher alone (no Tune): over-budget and invalid points are stored and told, never handed out."""
    space = SearchSpace.from_dict(
        {
            "name": "unit",
            "base": TINY_BASE,
            "objectives": OBJECTIVES,
            "sampler": "grid",
            "seeds_per_point": 2,
            "memory_budget_mb": 10.0,
            "baseline": False,
            "params": {
                "microbatch.size": {"type": "choice", "values": [None, 4]},  # none: over budget
                "schedule.batch_size": {"type": "choice", "values": [20, 25]},
            },  # 4 does not divide 25
        }
    )
    root = place.bind("unit", tmp_path / "store")
    sweep_folder(root, "unit").mkdir(parents=True)
    searcher = ScreenedSearcher(space, "unit")
    handed = [searcher.suggest(f"t{i}") for i in range(3)]
    assert handed[2] == "FINISHED"
    point = {"microbatch.size": 4, "schedule.batch_size": 20}
    assert handed[0]["params"] == {**point, "seed": 0} and handed[1]["params"] == {
        **point,
        "seed": 1,
    }
    rows = store.read_trials(root, "unit").set_index("trial_id")
    assert sorted(rows["status"]) == ["failed", "infeasible", "infeasible"]
    infeasible = rows[rows["status"] == "infeasible"]  # dense: stored = accounted
    assert (
        infeasible["memory.predicted_stored_total_mb"] == infeasible["memory.predicted_total_mb"]
    ).all()
    assert (
        infeasible["memory.paper_csr_total_mb"] == infeasible["memory.predicted_total_mb"]
    ).all()
    (invalid,) = [i for i in rows.index if i.startswith("invalid-")]
    assert rows.loc[invalid, "failure_reason"] == (
        "invalid config: microbatch.size: 4 is not allowed; a divisor of schedule.batch_size 25 is required"
    )

    checkpoint = tmp_path / "searcher.pkl"
    searcher.save(str(checkpoint))  # what Tune does every snapshot; the study stays in the journal
    restored = ScreenedSearcher(space, "unit")
    restored.restore(str(checkpoint))
    assert restored.suggest("t1") == handed[1]
    restored.on_trial_complete(
        "t0", {"trial_status": "completed", "val_accuracy": 0.2, "memory.predicted_total_mb": 4.0}
    )
    restored.on_trial_complete(
        "t0", {"trial_status": "completed", "val_accuracy": 0.9, "memory.predicted_total_mb": 4.0}
    )
    restored.on_trial_complete(
        "t1", {"trial_status": "completed", "val_accuracy": 0.4, "memory.predicted_total_mb": 4.0}
    )
    trials = study(root, "unit").trials
    (told,) = [t for t in trials if t.params == point]
    assert told.state == TrialState.COMPLETE and told.values == pytest.approx([0.3, 4.0])
    assert told.constraints["memory_over_budget_mb"] < 0
    assert [t.state for t in trials if t.params["microbatch.size"] == 4 and t is not told] == [
        TrialState.FAIL
    ]


LR_SPACE = SearchSpace.from_dict(
    {
        "name": "unit",
        "base": TINY_BASE,
        "objectives": OBJECTIVES,
        "sampler": "random",
        "num_samples": 3,
        "baseline": False,
        "params": {"schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0}},
    }
)


def lr_searcher(root: Path) -> ScreenedSearcher:
    sweep_folder(place.bind("unit", root), "unit").mkdir(parents=True, exist_ok=True)
    return ScreenedSearcher(LR_SPACE, "unit")


def snapshot_after_first_point(root: Path, snapshot: Path) -> tuple[ScreenedSearcher, dict]:
    """A searcher that handed out one point and was snapshotted, as Tune does at its period."""
    searcher = lr_searcher(root)
    first = searcher.suggest("t0")
    searcher.save(str(snapshot))
    return searcher, first


def store_completed(
    root: Path, trial_id: str, handed: dict, val_accuracy: float, status: str = "completed"
) -> None:
    config = LR_SPACE.trial_config(handed["params"]).to_flat()
    store.write_trial(
        root,
        sweep_rows(LR_SPACE, "unit").row(
            trial_id,
            status,
            config,
            {"val_accuracy": val_accuracy},
            {"memory.predicted_total_mb": 3.0},
            point=handed["point"],
        ),
    )


def test_a_searcher_snapshot_older_than_tunes_trials_is_rejoined(tmp_path):
    """A driver killed between Tune's two files: its trials name points its searcher snapshot lacks."""
    root, snapshot = tmp_path / "store", tmp_path / "searcher.pkl"
    searcher, first = snapshot_after_first_point(root, snapshot)
    second = searcher.suggest("t1")
    store_completed(root, "t0", first, 0.5)

    restored = lr_searcher(root)
    restored.restore(str(snapshot))
    restored.rejoin({"t0": first, "t1": second})
    third = restored.suggest("t2")
    assert third["point"] == 2 and restored.suggest("t3") == "FINISHED"  # three points, not four
    lrs = [c["params"]["schedule.lr_multiplier"] for c in (first, second, third)]
    assert len(set(lrs)) == 3  # the rebuilt sampler did not start its draws over
    restored.on_trial_complete(
        "t1", {"trial_status": "completed", "val_accuracy": 0.7, "memory.predicted_total_mb": 3.0}
    )
    told = {t.number: t for t in study(root, "unit").trials}
    assert told[0].state == TrialState.COMPLETE and told[0].values == pytest.approx(
        [0.5, 3.0]
    )  # from the store
    assert told[1].state == TrialState.COMPLETE and told[1].values == pytest.approx([0.7, 3.0])
    assert told[2].state == TrialState.RUNNING


def test_a_stopped_trial_stored_before_a_restart_is_told_its_projection(tmp_path):
    """A driver killed after two trials were stopped and stored: the rebuilt searcher tells a
    point the projection its rule wrote with the stop (the store keeps what it reached), and
    one the record has no projection for (a sweep of an earlier version) what it reached."""
    root, snapshot = tmp_path / "store", tmp_path / "searcher.pkl"
    searcher, first = snapshot_after_first_point(root, snapshot)
    second = searcher.suggest("t1")
    store_completed(root, "t0", first, 0.5, status=STOPPED)
    store_completed(root, "t1", second, 0.4, status=STOPPED)
    write_json(sweep_folder(root, "unit") / RECORD, {"projected": {"t0": [0.65, 3.0]}})

    restored = lr_searcher(root)
    restored.restore(str(snapshot))
    restored.rejoin({"t0": first, "t1": second})
    told = {t.number: t.values for t in study(root, "unit").trials if t.values}
    assert told == {0: pytest.approx([0.65, 3.0]), 1: pytest.approx([0.4, 3.0])}
    assert study(root, "unit").user_attrs[STOPPED_POINTS] == [0, 1]


def test_points_tune_never_saved_run_after_the_restart_unless_stored(tmp_path):
    """A driver killed after asking Optuna, before Tune saved the trials: a point whose trial
    stored its row in the meantime is told from the store, the other runs again; none is lost."""
    root, snapshot = tmp_path / "store", tmp_path / "searcher.pkl"
    searcher, first = snapshot_after_first_point(root, snapshot)
    lost, finished = searcher.suggest("t1"), searcher.suggest("t2")
    store_completed(root, "t2", finished, 0.6)

    restored = lr_searcher(root)
    restored.restore(str(snapshot))
    restored.rejoin({"t0": first})
    assert restored.suggest("t3") == lost
    assert restored.suggest("t4") == "FINISHED"
    told = {t.number: t for t in study(root, "unit").trials}
    assert (
        len(told) == 3
        and told[2].state == TrialState.COMPLETE
        and told[2].values == pytest.approx([0.6, 3.0])
    )
    assert told[1].state == TrialState.RUNNING


def baseline_space(**fields) -> SearchSpace:
    """Two points of two seeds over a base that microbatches: its baseline does not."""
    return SearchSpace.from_dict(
        {
            "name": "unit",
            "base": {**TINY_BASE, "microbatch.size": 5},
            "objectives": OBJECTIVES,
            "sampler": "random",
            "num_samples": 2,
            "seeds_per_point": 2,
            "params": {"schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0}},
            **fields,
        }
    )


def store_handed(root: Path, space: SearchSpace, trial_id: str, handed: dict, status: str):
    """A trial's row as the trainable stores it (the baseline's: no point)."""
    config = space.trial_config(handed["params"]).to_flat()
    row = sweep_rows(space, "unit").row(
        trial_id, status, config, {"val_accuracy": 0.5}, point=handed["point"]
    )
    store.write_trial(root, row)


def test_the_baseline_trains_once_per_seed_outside_the_sampler(tmp_path):
    """The base with every technique off, handed out first with each seed, with no point: the
    sampler asks num_samples points beside it and is never told it; a restarted searcher hands
    out only the seeds neither Tune's trials nor the store hold (a lost one again)."""
    space, root, snapshot = baseline_space(), tmp_path / "store", tmp_path / "searcher.pkl"
    sweep_folder(place.bind("unit", root), "unit").mkdir(parents=True)
    searcher = ScreenedSearcher(space, "unit")
    handed = [searcher.suggest(f"t{i}") for i in range(6)]
    assert handed[:2] == [
        {"point": None, "params": {"microbatch.size": None, "seed": seed}} for seed in (0, 1)
    ]
    assert space.trial_config(handed[0]["params"]).microbatch.size is None  # technique off
    assert [(h["point"], h["params"]["seed"]) for h in handed[2:]] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert searcher.suggest("t6") == "FINISHED"
    searcher.on_trial_complete("t0", {"trial_status": "completed", "val_accuracy": 0.9})
    assert len(study(root, "unit").trials) == 2  # the sampler's points alone
    assert study(root, "unit").trials[0].state == TrialState.RUNNING

    searcher.save(str(snapshot))  # Tune's snapshot knows t0..t5; t1 then dies before storing
    store_handed(root, space, "t0", handed[0], "completed")
    restored = ScreenedSearcher(space, "unit")
    restored.restore(str(snapshot))
    restored.rejoin({})
    assert restored.baseline_open == []  # t1 is held by Tune's trial: not handed out again
    fresh = ScreenedSearcher(baseline_space(), "unit")  # a snapshot that lost t0 and t1
    assert fresh.baseline_open == [1]  # t0's seed is stored: only t1's trains again
    assert fresh.suggest("t7") == handed[1]


def test_a_baseline_over_the_budget_is_said_stored_and_not_trained(tmp_path, capsys):
    space = baseline_space(memory_budget_mb=10.0)  # microbatch 5 fits, whole batches do not
    root = tmp_path / "store"
    sweep_folder(place.bind("unit", root), "unit").mkdir(parents=True)
    first = ScreenedSearcher(space, "unit").suggest("t0")
    assert first["point"] == 0  # no baseline handed out
    (row,) = store.read_trials(root, "unit").to_dict("records")
    assert row["trial_id"] == "baseline-infeasible" and row["status"] == "infeasible"
    assert pd.isna(row["point"]) and "over memory_budget_mb 10" in row["failure_reason"]
    assert row["config.microbatch.size"] is None or pd.isna(row["config.microbatch.size"])
    assert "the baseline (every technique off) is not trained: predicted" in capsys.readouterr().out
    assert ScreenedSearcher(space, "unit").baseline_open == []  # a resumed sweep: said once
    none = baseline_space(baseline=False)
    assert none.planned_trials == 4 and space.planned_trials == 6
    assert ScreenedSearcher(none, "unit").baseline_open == []


TIMED = {**OBJECTIVES, PREDICTED_UPDATE_S: "minimize"}


def timed_space(**fields) -> SearchSpace:
    """Whole batches of 20 or microbatches of 4 (more calls an update: predicted slower), with
    the predicted update time an objective."""
    return SearchSpace.from_dict(
        {
            "name": "unit",
            "base": TINY_BASE,
            "objectives": TIMED,
            "sampler": "grid",
            "baseline": False,
            "params": {"microbatch.size": {"type": "choice", "values": [None, 4]}},
            **fields,
        }
    )


@pytest.mark.parametrize("budget", ["1.5x", "between"])
def test_a_point_over_the_time_budget_is_stored_told_and_not_trained(tmp_path, budget):
    """A `time_budget` screens like `memory_budget_mb`: the point predicted slower than it is
    stored infeasible with the reason and its predicted seconds, told its predictions, its
    constraint set, never handed out; the one under it trains. The budget in seconds, or as a
    ratio to the baseline's predicted update (here the whole-batch point's own)."""
    whole, micro = ({"microbatch.size": size, "seed": 0} for size in (None, 4))
    seconds = {n: screen(timed_space(), p).time for n, p in (("whole", whole), ("micro", micro))}
    assert seconds["micro"].update_seconds > 1.5 * seconds["whole"].update_seconds
    between = (seconds["whole"].update_seconds + seconds["micro"].update_seconds) / 2
    space = timed_space(time_budget=between if budget == "between" else budget)
    root = tmp_path / "store"
    sweep_folder(place.bind("unit", root), "unit").mkdir(parents=True)
    searcher = ScreenedSearcher(space, "unit")
    handed = [searcher.suggest(f"t{i}") for i in range(2)]
    assert handed[0]["params"] == whole and handed[1] == "FINISHED"
    (row,) = store.read_trials(root, "unit").to_dict("records")
    assert row["status"] == "infeasible" and row["trial_id"].startswith("infeasible-")
    assert f"over time_budget {space.time_budget}" in row["failure_reason"]
    assert row["config.microbatch.size"] == 4
    predicted = time_columns(seconds["micro"])
    for name, value in predicted.items():
        assert row[name] == pytest.approx(value)
    trials = study(root, "unit").trials
    (slow,) = [t for t in trials if t.state == TrialState.COMPLETE]  # told; the other trains
    (fast,) = [t for t in trials if t.state == TrialState.RUNNING]
    assert slow.values[2] == pytest.approx(predicted[PREDICTED_UPDATE_S])
    budget_s = between if budget == "between" else 1.5 * seconds["whole"].update_seconds
    excess = predicted[PREDICTED_UPDATE_S] - budget_s
    assert slow.constraints == {"time_over_budget_s": pytest.approx(excess)}
    assert fast.constraints["time_over_budget_s"] < 0


def test_a_time_budget_is_a_positive_number_or_a_ratio():
    for bad in (0, -1, "fast", "0x", "2 x", True):
        with pytest.raises(ConfigError, match="^time_budget: .* is not allowed; a positive"):
            timed_space(time_budget=bad)
    assert timed_space(time_budget="2x").time_budget == "2x"
    assert timed_space(time_budget=3).time_budget == 3.0
    assert SearchSpace.from_dict(timed_space(time_budget="2x").to_dict()).time_budget == "2x"


def test_sweep_store_matches_tune_and_optuna(local_ray, tmp_path):
    path = write_space(
        tmp_path,
        name="multi",
        sampler="nsga2",
        sampler_options={"population_size": 2},
        num_samples=4,
        exactness=False,  # every ask trains: its microbatch sizes train alike (test_exactness.py)
        params={
            "precision": {"type": "choice", "values": ["fp32", "bf16"]},
            "microbatch.size": {"type": "choice", "values": [None, 5, 10]},
            "schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0},
        },
    )
    root = tmp_path / "store"
    outcome = launch(SearchSpace.load(path), store_root=root)
    rows = outcome.trials.set_index("trial_id")
    assert len(outcome.results) == 4 and not outcome.results.errors
    assert sorted(rows.index) == sorted(r.metrics["trial_id"] for r in outcome.results)
    for result in outcome.results:
        row, metrics = rows.loc[result.metrics["trial_id"]], result.metrics
        assert row["status"] == "completed" == metrics["trial_status"]
        assert row["sampler"] == "nsga2"
        assert row["metric.val_accuracy"] == pytest.approx(metrics["val_accuracy"])
        assert row["metric.test_accuracy"] == pytest.approx(metrics["test_accuracy"])
        assert row["memory.predicted_total_mb"] == pytest.approx(
            metrics["memory.predicted_total_mb"]
        )
        assert row["memory.measured_total_mb"] == pytest.approx(metrics["memory.measured_total_mb"])
        for name, value in result.config["params"].items():
            stored = row[f"config.{name}"]
            assert pd.isna(stored) if value is None else stored == value
        assert len(store.read_epochs(root, "multi", result.metrics["trial_id"])) == 1
    told = sorted(t.values for t in study(root, "multi").trials if t.state == TrialState.COMPLETE)
    stored = sorted(
        [r["metric.val_accuracy"], r["memory.predicted_total_mb"]] for _, r in rows.iterrows()
    )
    assert np.allclose(told, stored)
    points = rows.groupby("seed_group")[["metric.val_accuracy", "memory.predicted_total_mb"]].mean()
    on_front = pareto.non_dominated_mask(points.to_numpy(float), list(OBJECTIVES.values()))
    assert sorted(outcome.front["val_accuracy"]) == pytest.approx(
        sorted(points["metric.val_accuracy"][on_front])
    )


def test_budget_screens_points_and_failures_do_not_stop_the_sweep(local_ray, tmp_path):
    path = write_space(
        tmp_path,
        name="budget",
        sampler="grid",
        seeds_per_point=2,
        memory_budget_mb=10.0,
        params={
            "microbatch.size": {"type": "choice", "values": [None, 5]},  # none: ~13 MB, 5: ~4 MB
            "schedule.lr_multiplier": {"type": "choice", "values": [1.0, 1.0e6]},
        },  # 1e6: NaN loss
    )
    root = tmp_path / "store"
    outcome = launch(SearchSpace.load(path), store_root=root)
    rows = outcome.trials
    assert sorted(rows["status"]) == ["completed"] * 2 + ["failed"] * 2 + ["infeasible"] * 2
    assert set(rows["sampler"]) == {"grid"}  # screened and failed rows name their sampler too

    infeasible = rows[rows["status"] == "infeasible"]
    assert infeasible["trial_id"].str.startswith("infeasible-").all()
    assert infeasible["config.microbatch.size"].isna().all()
    assert (infeasible["memory.predicted_total_mb"] > 10.0).all()
    assert infeasible["failure_reason"].str.contains("over memory_budget_mb 10").all()
    assert (infeasible["epochs_completed"] == 0).all()
    tune_ids = {r.metrics["trial_id"] for r in outcome.results}
    assert len(tune_ids) == 4 and not tune_ids & set(
        infeasible["trial_id"]
    )  # never reached a worker
    assert all(r.config["params"]["microbatch.size"] == 5 for r in outcome.results)
    folders = {p.name for p in sweep_folder(root, "budget").iterdir() if p.is_dir()}
    assert folders == {*tune_ids, EVENT_FILES}  # a folder per trial, and the trials' event files
    for trial_id in infeasible["trial_id"]:
        assert store.read_epochs(root, "budget", trial_id).empty

    failed = rows[rows["status"] == "failed"]
    assert (failed["config.schedule.lr_multiplier"] == 1e6).all()
    assert failed["failure_reason"].str.startswith("TrainingDiverged: ").all()
    completed = rows[rows["status"] == "completed"]
    assert sorted(completed["config.seed"]) == [0, 1] and completed["seed_group"].nunique() == 1

    trials = study(root, "budget").trials
    assert len(trials) == 4
    by_state = {state: [t for t in trials if t.state == state] for state in TrialState}
    assert len(by_state[TrialState.FAIL]) == 1  # the diverging point, both seeds failed
    assert by_state[TrialState.FAIL][0].params["schedule.lr_multiplier"] == 1e6
    screened = [t for t in by_state[TrialState.COMPLETE] if t.params["microbatch.size"] is None]
    assert len(screened) == 2 and all(t.constraints["memory_over_budget_mb"] > 0 for t in screened)
    (good,) = [t for t in by_state[TrialState.COMPLETE] if t.params["microbatch.size"] == 5]
    assert good.constraints["memory_over_budget_mb"] <= 0
    assert good.values[0] == pytest.approx(completed["metric.val_accuracy"].mean())
    assert good.values[1] == pytest.approx(completed["memory.predicted_total_mb"].mean())
    assert len(outcome.front) == 1 and outcome.front["seeds"].iloc[0] == 2


def wait_for_rows(
    root: Path, sweep: str, count: int, process: subprocess.Popen, log: Path, timeout=240
):
    deadline = time.monotonic() + timeout
    while len(store.trial_ids(root, sweep)) < count:
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.25)


def launch_then_kill(path: Path, root: Path, address: str, sweep: str, rows: int) -> None:
    """Launch the sweep's driver, SIGKILL it once `rows` trials are stored."""
    log = root.with_name(f"{sweep}-launch.log")
    with open(log, "w") as handle:
        driver = subprocess.Popen(
            [CLI, "launch", str(path), "--store", str(root), "--address", address],
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_rows(root, sweep, rows, driver, log)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    wait_for_trials_to_end(os.getpid(), sweep)  # the local Ray runs under this process


class DriverKilled(Exception):
    """Stands for the SIGKILL that ends a driver as its sweep starts."""


def test_a_sweep_killed_before_tunes_first_snapshot_resumes(local_ray, tmp_path, monkeypatch):
    """Killed as it started: Tune's tuner file is written, no snapshot of its trials yet."""
    path = write_space(
        tmp_path,
        name="early",
        sampler="random",
        num_samples=2,
        params={"schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0}},
    )
    root = tmp_path / "store"
    made = search_driver._tuner

    def killed_once_made(*args):
        made(*args)
        raise DriverKilled

    monkeypatch.setattr(search_driver, "_tuner", killed_once_made)
    with pytest.raises(DriverKilled):
        launch(SearchSpace.load(path), store_root=root)
    monkeypatch.undo()
    assert ray.tune.Tuner.can_restore(str(sweep_folder(root, "early")))

    outcome = resume("early", store_root=root)
    assert len(outcome.trials) == 2 and (outcome.trials["status"] == "completed").all()
    assert [t.state for t in study(root, "early").trials] == [TrialState.COMPLETE] * 2


def reporting_processes(root: Path, sweep: str) -> dict[str, int]:
    """Each trial's process as the trial itself last reported it: the ``pid`` that Tune adds to
    every result, from the trial's ``result.json``."""
    processes = {}
    for path in sweep_folder(root, sweep).glob("*/result.json"):
        lines = path.read_text().splitlines()
        if lines and lines[-1].endswith("}"):  # a line being written is read at the next look
            processes[path.parent.name] = json.loads(lines[-1])["pid"]
    return processes


def kill_a_trial_in_flight(root: Path, sweep: str, seconds: float = 180) -> str | None:
    """SIGKILL the process of a trial that has reported an epoch and is not stored, and say
    which trial it was. The process is stopped first and killed only if its trial is still not
    stored then, so the trial cannot finish between the look and the kill (a trial stores its row
    before it reports its last epoch, and a reused worker starts its next trial only after)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for trial_id, pid in reporting_processes(root, sweep).items():
            if trial_id in store.trial_ids(root, sweep):
                continue
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:  # its worker gone: the trial is no longer in flight
                continue
            if trial_id in store.trial_ids(root, sweep):  # stored in the moment before the stop
                os.kill(pid, signal.SIGCONT)
                continue
            os.kill(pid, signal.SIGKILL)
            return trial_id
        time.sleep(0.02)
    return None


def test_a_trial_whose_worker_dies_is_stored_failed_and_the_sweep_goes_on(local_ray, tmp_path):
    """What the OS's out-of-memory killer does to a trial: its process vanishes mid-epoch. A
    resume keeps its failed row: it is not trained again under a new trial id."""
    path = write_space(
        tmp_path,
        name="died",
        sampler="random",
        num_samples=2,
        max_concurrent=1,
        max_failures=0,
        # trials of several seconds: each result reaches the driver's result.json while the trial
        # still trains (at 10 epochs of 200 images, one fault-loop run here saw none in time)
        base={
            **TINY_BASE,
            "schedule": {"epochs": 20, "batch_size": 20},
            "data": {**TINY_BASE["data"], "train_subset": 400},
        },
        params={"schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0}},
    )
    root = tmp_path / "store"
    killed: list[str | None] = []
    killer = threading.Thread(target=lambda: killed.append(kill_a_trial_in_flight(root, "died")))
    killer.start()
    outcome = launch(SearchSpace.load(path), store_root=root)
    killer.join()
    rows = outcome.trials.set_index("trial_id")
    assert killed[0] is not None, f"no trial was caught in flight: {rows['status'].to_dict()}"
    assert len(rows) == 2 and rows["status"].to_dict() == {
        trial_id: "failed" if trial_id == killed[0] else "completed" for trial_id in rows.index
    }, f"killed {killed[0]} in flight"
    (reason,) = rows.loc[rows["status"] == "failed", "failure_reason"]
    assert reason.startswith("worker failed 1 times: ")
    assert sorted(t.state.name for t in study(root, "died").trials) == ["COMPLETE", "FAIL"]

    resumed = resume("died", store_root=root).trials  # the errored trial reports its row again
    assert resumed.set_index("trial_id")["status"].to_dict() == rows["status"].to_dict()


def test_killed_driver_then_resume_stores_every_trial_once(local_ray, tmp_path):
    """A driver SIGKILLed mid-sweep, then resumed: every (point, seed) is stored once and no trial
    done before the kill trains again. The sweep is `sampler: known-memory` in full (Ray Tune, the
    journal, the profiler's memory): under a budget no point is screened infeasible (the sampler
    never proposes one). Its conditional params are tested without Ray (test_known_memory.py)."""
    path = write_space(
        tmp_path,
        name="known",
        sampler="known-memory",
        sampler_options={"n_startup_trials": 2, "n_candidates": 32},
        num_samples=5,
        memory_budget_mb=10.0,
        base={**TINY_BASE, "schedule": {"epochs": 2, "batch_size": 20}},
        params={
            "microbatch.size": {"type": "choice", "values": [None, 5, 10]},  # none: ~13 MB
            "checkpoint": {"type": "choice", "values": ["none", "residual-1"]},
            "schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0},
        },
    )
    root = tmp_path / "store"
    launch_then_kill(path, root, local_ray, "known", rows=2)
    before = store.read_trials(root, "known").set_index("trial_id")
    assert 2 <= len(before) < 5, "the driver was to be killed mid-sweep"
    epoch_files = {
        i: (root / "epochs" / "sweep=known" / f"{i}.parquet").stat().st_mtime_ns
        for i in before.index
    }

    outcome = resume("known", store_root=root)
    rows = outcome.trials.set_index("trial_id")
    assert len(rows) == 5 and rows.index.is_unique
    assert (rows["status"] == "completed").all()  # none infeasible: none was proposed
    assert {r.metrics["trial_id"] for r in outcome.results} <= set(rows.index)  # none extra
    assert not rows.duplicated(["point", "config.seed"]).any()  # every (point, seed) once
    for trial_id, row in before.iterrows():  # a trial done before the kill was not trained again
        assert rows.loc[trial_id, "finished_at"] == row["finished_at"]
        assert (
            root / "epochs" / "sweep=known" / f"{trial_id}.parquet"
        ).stat().st_mtime_ns == epoch_files[trial_id]
    for trial_id in rows.index:
        assert len(store.read_epochs(root, "known", trial_id)) == 2
    assert (rows["memory.predicted_total_mb"] <= 10.0).all()
    assert set(rows["sampler"]) == {"known-memory"}
    trials = [t for t in study(root, "known").trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 5
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 5


def test_an_unpickled_errors_reason_is_its_last_line_not_a_file():
    """Tune keeps a lost node's RpcError only as a text trace (error.txt, one block a failure):
    the reason is the latest failure's message; a pickled error is taken as it is."""

    class Errored:  # the two accessors of Ray Tune's Trial that the driver reads
        def __init__(self, pickled, trace):
            self.pickled, self.trace = pickled, trace

        def get_pickled_error(self):
            return self.pickled

        def get_error(self):
            return self.trace

    lost = "The actor aeeb is unavailable: RpcError: recvmsg:Connection reset by peer"
    trace = f"Failure # 1 (occurred at 2026-12-04_15-12-12)\n{lost} 1\n\nFailure # 2 (occurred at 2026-12-04_15-12-13)\n{lost} 2\n"
    assert search_driver.trial_error(Errored(None, trace)) == f"{lost} 2"
    assert search_driver.trial_error(Errored(None, None)) == "unknown error"
    pickled = MemoryError("can't allocate memory")
    assert search_driver.trial_error(Errored(pickled, trace)) is pickled


def test_tune_s_settings_hold_while_the_sweep_runs_only(monkeypatch):
    """A sweep's Tune settings leave the process as they found it: a user's own Tuner after a
    sweep in the same process keeps Tune's JSON and CSV results, and a setting the user chose
    is theirs throughout."""
    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", raising=False)
    monkeypatch.setenv("RAY_AIR_NEW_OUTPUT", "1")
    with search_driver.tune_environment():
        assert os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] == "1"
        assert os.environ["RAY_AIR_NEW_OUTPUT"] == "1"
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ
    assert os.environ["RAY_AIR_NEW_OUTPUT"] == "1"
