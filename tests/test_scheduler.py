"""Multi-objective early stopping: its decisions on hand-made curves, its record surviving a
restart, its settings checked in the space, the hypervolume, margin and curve rules, and the
replay harness on a tiny table."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pandas as pd
import pytest
from optuna.trial import TrialState
from ray.tune.schedulers import TrialScheduler

from benchmarks import replay
from tune_lowmem.config import ConfigError
from tune_lowmem.search import place
from tune_lowmem.search.stopping import RULES, build_scheduler
from tune_lowmem.search.stopping.asha import RECORD, STOPPED_POINTS, MultiObjectiveASHA, projected
from tune_lowmem.search.stopping.curve import CurveStopping, extrapolate
from tune_lowmem.search.stopping.hypervolume import HypervolumeStopping
from tune_lowmem.search.stopping.margin import MarginStopping
from tune_lowmem.space import SearchSpace
from tune_lowmem.space.scheduler_settings import SCHEDULERS, SchedulerSettings

OBJECTIVES = {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"}
STOP, GO = TrialScheduler.STOP, TrialScheduler.CONTINUE
BASE = {
    "device": "cpu",
    "model": {"depth": 10, "width": 1},
    "schedule": {"epochs": 3, "batch_size": 20},
    "data": {"train_subset": 200, "val_size": 100, "test_subset": 100},
}
# (accuracy at epoch 1, predicted memory) of five trials, in the order they reach rung 1
RUNG_1 = {"a": (0.5, 10.0), "b": (0.4, 20.0), "c": (0.3, 5.0), "d": (0.2, 30.0), "e": (0.45, 15.0)}


def result(epoch: int, accuracy: float, memory: float, status: str = "running") -> dict:
    return {
        "epoch": epoch,
        "val_accuracy": accuracy,
        "memory.predicted_total_mb": memory,
        "trial_status": status,
    }


def scheduler(sweep: str | None = None, memory_band: float | None = None) -> MultiObjectiveASHA:
    """Whole-rung ranking unless a memory band is given."""
    settings = SchedulerSettings(grace_epochs=1, reduction_factor=3, max_epochs=9)
    return MultiObjectiveASHA(settings, OBJECTIVES, sweep, memory_band=memory_band)


def test_rungs_follow_grace_and_reduction_factor():
    assert SchedulerSettings(grace_epochs=1, reduction_factor=3, max_epochs=9).rungs() == [1, 3]
    assert SchedulerSettings(grace_epochs=2, reduction_factor=2, max_epochs=20).rungs() == [
        2,
        4,
        8,
        16,
    ]
    assert SchedulerSettings(grace_epochs=1, reduction_factor=1.5, max_epochs=4).rungs() == [
        1,
        2,
        3,
    ]


def test_each_rung_keeps_its_top_fronts_and_stops_the_rest():
    """a continues (alone); b is dominated by a (quota 1 of 2); c needs less memory than all
    (front 0); d is in front 2 with 3 better (quota 2 of 4); e is dominated by a: 2 better
    (a, c) is not fewer than the quota ceil(5/3) = 2."""
    mo_asha = scheduler()
    decisions = {t: mo_asha.decide(t, result(1, *v)) for t, v in RUNG_1.items()}
    assert decisions == {"a": GO, "b": STOP, "c": GO, "d": STOP, "e": STOP}
    assert mo_asha.stopped == {"b": 1, "d": 1, "e": 1}
    # no trial has finished: a stopped trial's projection is what it reached
    assert mo_asha.projected == {t: list(RUNG_1[t]) for t in "bde"}
    # between rungs and at the schedule's end nothing is decided; a stopped trial stays stopped
    assert mo_asha.decide("a", result(2, 0.1, 10.0)) == GO
    assert mo_asha.decide("b", result(2, 0.9, 1.0)) == STOP
    # rung 3: a is first there and goes on; c, far worse in accuracy and better in memory, too
    assert mo_asha.decide("a", result(3, 0.6, 10.0)) == GO
    assert mo_asha.decide("c", result(3, 0.2, 5.0)) == GO
    assert mo_asha.decide("c", result(9, 0.0, 5.0, "completed")) == GO
    # a result reported twice at a rung (a restarted trial) is not recorded or judged again
    assert mo_asha.decide("c", result(1, 0.0, 99.0)) == GO
    assert len(mo_asha.records[1]) == 5


def test_in_memory_bands_a_trial_meets_only_trials_of_similar_memory():
    """The cheap end, sparsely sampled, is ranked among itself: the whole-rung rule stops a
    cheap trial dominated by one cheaper trial because the expensive front outnumbers it; the
    band rule ranks it against its band only, and ranks nothing with fewer peers than the
    reduction factor."""
    rung = {  # an expensive front of four, then a cheap end that fills up
        "big1": (0.50, 100.0),
        "big2": (0.52, 120.0),
        "big3": (0.55, 140.0),
        "big4": (0.57, 160.0),
        "small1": (0.20, 2.0),
        "small2": (0.18, 2.1),
        "small3": (0.10, 2.4),
    }
    whole, banded = scheduler(), scheduler(memory_band=2.0)
    stopped_whole = {t for t, v in rung.items() if whole.decide(t, result(1, *v)) == STOP}
    stopped_band = {t for t, v in rung.items() if banded.decide(t, result(1, *v)) == STOP}
    assert stopped_whole == {"small2", "small3"}
    assert stopped_band == {"small3"}  # dominated by both of its two peers
    assert banded.peers(banded.records[1], "small1") == ["small1", "small2", "small3"]
    assert banded.peers(banded.records[1], "big1") == ["big1", "big2", "big3", "big4"]


def test_a_missing_value_ranks_last():
    mo_asha = scheduler()
    assert mo_asha.decide("a", result(1, 0.5, 10.0)) == GO
    assert mo_asha.decide("nan", result(1, None, 1.0)) == STOP


def test_decisions_survive_a_restart_from_an_older_snapshot(tmp_path):
    """Tune restores the scheduler pickled at launch (tuner.pkl), older than every decision:
    it reads the sweep folder's record, so no stopped trial goes on and no rung is judged twice."""
    place.bind("resumed", tmp_path)
    place.sweep_folder(tmp_path, "resumed").mkdir(parents=True)
    live = scheduler("resumed")
    snapshot = pickle.dumps(live)
    for trial, values in RUNG_1.items():
        live.decide(trial, result(1, *values))
    assert (place.sweep_folder(tmp_path, "resumed") / RECORD).is_file()
    restored = pickle.loads(snapshot)
    assert restored.stopped == live.stopped
    assert restored.decide("b", result(1, 0.9, 1.0)) == STOP  # restarted from scratch: stopped
    assert restored.decide("a", result(1, 0.0, 99.0)) == GO  # promoted once, not judged again
    assert restored.records == live.records
    # Tune's own save and restore round trip, into a scheduler with no sweep folder
    path = tmp_path / "scheduler-state.json"
    live.save(str(path))
    fresh = scheduler()
    fresh.restore(str(path))
    assert (fresh.stopped, fresh.records) == (live.stopped, live.records)
    assert fresh.decide("f", result(1, 0.1, 50.0)) == STOP  # judged against the restored rung


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"type": "asha"}, "scheduler.type: 'asha' is not allowed; allowed: mo-asha"),
        ({"type": "mo-asha", "grace_epochs": 3}, "scheduler.grace_epochs: 3 is not allowed"),
        ({"type": "mo-asha", "reduction_factor": 1}, "scheduler.reduction_factor: 1 is not"),
        ({"type": "mo-asha", "rungs": 2}, "scheduler.rungs: unknown key"),
    ],
)
def test_bad_scheduler_sections_are_refused_in_one_line(section, message):
    raw = {
        "name": "bad",
        "base": BASE,
        "params": {"precision": {"type": "choice", "values": ["fp32", "bf16"]}},
        "objectives": OBJECTIVES,
        "num_samples": 2,
        "scheduler": section,
    }
    with pytest.raises(ConfigError) as error:
        SearchSpace.from_dict(raw)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", SCHEDULERS)
def test_scheduler_section_round_trips_and_names_its_rule(kind):
    raw = {
        "name": "good",
        "base": BASE,
        "params": {"precision": {"type": "choice", "values": ["fp32", "bf16"]}},
        "objectives": OBJECTIVES,
        "num_samples": 2,
        "scheduler": {"type": kind, "grace_epochs": 1, "reduction_factor": 3},
    }
    space = SearchSpace.from_dict(raw)
    assert space.scheduler.rungs() == [1]
    assert SearchSpace.from_dict(space.to_dict()).scheduler == space.scheduler
    assert SearchSpace.from_dict({**raw, "scheduler": None}).scheduler is None
    assert type(build_scheduler(space.scheduler, space.objectives)) is RULES[kind]
    assert set(RULES) == set(SCHEDULERS)
    other = next(rule for name, rule in RULES.items() if name != kind)
    with pytest.raises(ValueError, match=f"^scheduler.type: '{kind}' is not '{other.TYPE}'"):
        other(space.scheduler, space.objectives)  # a rule never runs under another's name


def tiny_table() -> replay.Table:
    """Six points, three epochs: at epoch 1 a chain (more memory, less accuracy) whose end
    points are also the worst at the end."""
    rows = []
    for i, precision in enumerate(["fp32", "bf16"]):
        for j, density in enumerate([1.0, 0.5, 0.2]):
            start = 0.5 - 0.1 * (3 * i + j)
            rows.append(
                {
                    "config.precision": precision,
                    "config.sparsity.density": density,
                    "curve": [start, start + 0.05, start + 0.1],
                    "memory.predicted_total_mb": 10.0 * (1 + 3 * i + j),
                }
            )
    return replay.Table.from_frame(pd.DataFrame(rows))


def test_replay_hypervolume_counts_memory_ratios_from_the_nadir():
    """Halving memory adds the same volume at 40 MB as at 2 MB, and the table's worst point
    (least accuracy, most memory) adds none."""
    reference = [0.2, 80.0]
    assert replay.hypervolume([[0.5, 40.0], [0.3, 2.0]], reference) == pytest.approx(
        replay.hypervolume([[0.5, 40.0], [0.3, 4.0]], reference) + (0.3 - 0.2) * np.log10(2)
    )
    assert replay.hypervolume([[0.5, 20.0]], reference) - replay.hypervolume(
        [[0.5, 40.0]], reference
    ) == pytest.approx((0.5 - 0.2) * np.log10(2))
    table = tiny_table()
    assert table.reference() == [pytest.approx(0.1), pytest.approx(66.0)]
    assert replay.hypervolume([[0.1, 60.0]], table.reference()) == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_replay_drives_the_searcher_and_the_scheduler(seed, monkeypatch):
    """Every point once (grid); without the scheduler all 18 epochs train and the table's best
    hypervolume is reached; with it, stopped trials train one epoch and reach the searcher as
    Tune ends them (their last result still running)."""
    table = tiny_table()
    plain = SearchSpace.from_dict(replay.replay_space(table, BASE, "grid", seed))
    history = replay.replay(plain, table)
    assert history[-1].epochs == 18
    assert history[-1].hypervolume == pytest.approx(table.best_hypervolume())
    assert replay.epochs_to(history, 2 * table.best_hypervolume()) == float("inf")

    section = {"type": "mo-asha", "grace_epochs": 1, "reduction_factor": 3}
    stopping = SearchSpace.from_dict(
        replay.replay_space(table, BASE, "grid", seed, scheduler=section)
    )
    runs = []
    original = replay.ScreenedSearcher.on_trial_complete

    def spy(self, trial_id, result=None, error=False):
        runs.append(dict(result))
        original(self, trial_id, result=result, error=error)

    monkeypatch.setattr(replay.ScreenedSearcher, "on_trial_complete", spy)
    history = replay.replay(stopping, table)
    stopped = [r for r in runs if r["trial_status"] == "running"]
    assert stopped and all(r["epoch"] == 1 for r in stopped)
    assert history[-1].epochs == 3 * (len(runs) - len(stopped)) + len(stopped)
    assert history[-1].epochs < 18
    assert len(history) == len(runs) == 6


def test_replay_runs_its_workers_in_step():
    """Two workers, three epochs a trial: both first trials end at time 3 (epochs 5 and 6), and
    the trials started then do not train before the second one has reported its end."""
    table = tiny_table()
    space = SearchSpace.from_dict(replay.replay_space(table, BASE, "grid", 0))
    history = replay.replay(space, table, workers=2)
    assert [ended.epochs for ended in history] == [5, 6, 11, 12, 17, 18]


def test_replay_tells_a_stopped_point_its_projection(tmp_path):
    """Two workers: a trial is stopped at rung 1 only once the first two finished, so each
    stopped point is told its accuracy there moved by the finished curves' optimistic gain:
    every tiny-table curve gains 0.1 from epoch 1, so it is told its end, as a completed point
    is (told what it reached, it would be told 0.1 less)."""
    table = tiny_table()
    section = {"type": "mo-asha", "grace_epochs": 1, "reduction_factor": 3}
    space = SearchSpace.from_dict(replay.replay_space(table, BASE, "grid", 0, scheduler=section))
    place.bind(space.name, tmp_path)
    place.sweep_folder(tmp_path, space.name).mkdir(parents=True)
    searcher = replay.ScreenedSearcher(space, space.name)
    mo_asha = MultiObjectiveASHA(space.scheduler, space.objectives, space.name)
    replay.run_sweep(searcher, mo_asha, table, workers=2)
    trials = searcher.study.get_trials()
    assert len(trials) == 6 and all(t.state == TrialState.COMPLETE for t in trials)
    stopped_points = {searcher.assigned[t][0] for t in mo_asha.stopped}
    assert stopped_points and set(mo_asha.projected) == set(mo_asha.stopped)
    assert sorted(searcher.study.user_attrs[STOPPED_POINTS]) == sorted(stopped_points)
    for trial in trials:
        params = {k: trial.params[k] for k in table.params}
        curve, memory = table.curves[replay.key(params)]
        assert trial.values == pytest.approx([curve[-1], memory])


def test_a_sweep_under_ray_stores_its_stopped_trials(tmp_path):
    """The one Ray test: Tune runs the scheduler; a stopped trial is stored as stopped at its
    rung with the values it reached, its projection is told to the study, its point is listed
    as stopped there, and the front holds completed trials only. The sweep's baseline is
    neither judged at a rung nor judges: it trains to its end, and no rung records it."""
    import ray
    import yaml

    from tune_lowmem import store
    from tune_lowmem.search import launch, sweep_study
    from tune_lowmem.space import SearchSpace

    raw = {
        "name": "stopping",
        "base": {**BASE, "schedule": {"epochs": 2, "batch_size": 20}},
        "params": {"schedule.lr_multiplier": {"type": "choice", "values": [0.01, 0.1, 1.0, 4.0]}},
        "objectives": OBJECTIVES,
        "sampler": "grid",
        "max_concurrent": 1,
        "resume_checkpoint_s": 0,
        "scheduler": {"type": "mo-asha", "grace_epochs": 1, "reduction_factor": 100},
        "baseline": True,
    }
    path = tmp_path / "stopping.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = launch(SearchSpace.load(path), store_root=tmp_path / "store")
    finally:
        ray.shutdown()
    everything = outcome.trials.set_index("trial_id")
    (baseline,) = everything.index[everything["point"].isna()]
    assert everything.loc[baseline, ["status", "epochs_completed"]].tolist() == ["completed", 2]
    rows = everything.drop(baseline)
    decisions = json.loads(
        (place.sweep_folder(tmp_path / "store", "stopping") / RECORD).read_text()
    )
    assert len(rows) == 4 and len(decisions["records"]["1"]) == 4
    assert baseline not in decisions["records"]["1"] and baseline not in decisions["finals"]
    assert set(rows.index[rows["status"] == "stopped"]) == set(decisions["stopped"])
    assert set(decisions["projected"]) == set(decisions["stopped"])
    assert set(rows["status"]) <= {"completed", "stopped"} and decisions["stopped"]
    assert (rows.loc[list(decisions["stopped"]), "epochs_completed"] == 1).all()
    assert (rows.loc[rows["status"] == "completed", "epochs_completed"] == 2).all()
    study = sweep_study(tmp_path / "store", "stopping")
    assert len(study.trials) == 4  # the baseline is no trial of the sampler's
    told = {t.number: t.values[0] for t in study.trials}
    for trial_id, row in rows.iterrows():
        projection = decisions["projected"].get(trial_id, [row["metric.val_accuracy"]])
        assert told[int(row["point"])] == pytest.approx(projection[0])
    stopped_points = rows.loc[list(decisions["stopped"]), "point"].astype(int)
    assert sorted(study.user_attrs[STOPPED_POINTS]) == sorted(stopped_points)
    assert len(decisions["stopped_runs"]) == len(decisions["stopped"])  # Tune's trial.config
    completed = everything[everything["status"] == "completed"]["metric.val_accuracy"]
    assert set(outcome.front["val_accuracy"]) <= set(completed)
    assert store.STATUSES[-1] == "stopped"


# ---- HypervolumeStopping: stopped only when its optimistic final point is dominated ----
# (accuracy at epoch 1, final accuracy at epoch 9, memory): gains 0.20, 0.15, 0.25, so the
# optimistic gain is 0.25 + (0.25 - 0.15) / 2 = 0.30
FINISHED = {"a": (0.30, 0.50, 10.0), "b": (0.40, 0.55, 20.0), "c": (0.35, 0.60, 40.0)}


def hv_stopping(sweep: str | None = None) -> HypervolumeStopping:
    settings = SchedulerSettings("hypervolume", grace_epochs=1, reduction_factor=3, max_epochs=9)
    return HypervolumeStopping(settings, OBJECTIVES, sweep)


def finish(scheduler: MultiObjectiveASHA, order: str = "abc") -> None:
    for trial in order:
        first, final, memory = FINISHED[trial]
        assert scheduler.decide(trial, result(1, first, memory)) == GO
        assert scheduler.decide(trial, result(9, final, memory, "completed")) == GO


def decisions_at_rung_1(
    scheduler: MultiObjectiveASHA, trials: list[tuple[str, float | None, float]]
) -> dict[str, str]:
    """Each trial's decision when it reports (accuracy, memory) at epoch 1, in order."""
    return {
        trial: scheduler.decide(trial, result(1, accuracy, memory))
        for trial, accuracy, memory in trials
    }


def test_nothing_is_stopped_before_enough_trials_have_finished():
    early = hv_stopping()
    assert early.decide("a", result(1, 0.30, 10.0)) == GO
    assert early.decide("a", result(9, 0.50, 10.0, "completed")) == GO
    assert early.decide("b", result(1, 0.40, 20.0)) == GO
    assert early.decide("b", result(9, 0.55, 20.0, "completed")) == GO
    # two finished trials, the reduction factor asks for three: a hopeless trial goes on
    assert early.decide("hopeless", result(1, 0.0, 99.0)) == GO


def test_a_trial_is_stopped_only_when_its_optimistic_point_is_dominated():
    """d (0.15 + 0.30 at 30 MB) is dominated by b (0.55 at 20 MB); e (0.30 + 0.30 at 30 MB)
    would pass b, though with the largest seen gain alone (0.25) it would only tie it; f is
    far behind but needs less memory than any finished trial, so it could add the front's
    cheap end; a missing accuracy is the worst."""
    scheduler = hv_stopping()
    finish(scheduler)
    decisions = decisions_at_rung_1(
        scheduler, [("d", 0.15, 30.0), ("e", 0.30, 30.0), ("f", 0.05, 5.0), ("g", None, 50.0)]
    )
    assert decisions == {"d": STOP, "e": GO, "f": GO, "g": STOP}
    assert scheduler.stopped == {"d": 1, "g": 1}
    # what the sampler is told: each value moved by the optimistic gain, memory as it is
    assert scheduler.projected == {"d": [pytest.approx(0.45), 30.0], "g": [None, 50.0]}
    # a stopped trial stays stopped; a trial reaching the schedule's end is never stopped
    assert scheduler.decide("d", result(2, 0.9, 1.0)) == STOP
    assert scheduler.decide("e", result(9, 0.0, 30.0, "completed")) == GO


def test_finished_trials_survive_a_restart(tmp_path):
    place.bind("resumed", tmp_path)
    place.sweep_folder(tmp_path, "resumed").mkdir(parents=True)
    live = hv_stopping("resumed")
    snapshot = pickle.dumps(live)
    finish(live)
    restored = pickle.loads(snapshot)
    assert restored.finals == live.finals
    assert restored.decide("d", result(1, 0.15, 30.0)) == STOP
    assert projected("resumed", "d") == pytest.approx([0.45, 30.0])  # what the searcher reads
    assert projected("resumed", "a") is None


@pytest.mark.parametrize("kind", ["hypervolume", "margin", "curve"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_stops_trials_without_losing_the_front(seed, kind):
    """On the tiny table every curve gains 0.1 after epoch 1 and one point dominates the
    others: neither rule stops it, so the best hypervolume is reached, and each stops some of
    the dominated trials that reach epoch 1 after enough trials finished (one epoch each)."""
    table = tiny_table()
    section = {"type": kind, "grace_epochs": 1, "reduction_factor": 3}
    space = SearchSpace.from_dict(replay.replay_space(table, BASE, "grid", seed, scheduler=section))
    history = replay.replay(space, table)
    assert history[-1].hypervolume == pytest.approx(table.best_hypervolume())
    assert len(history) == 6
    assert history[-1].epochs < 18


# ---- MarginStopping: stopped when a trial at the rung of no more memory leads by a margin ----
# FINISHED moved 0.20, 0.15, 0.25 from rung 1 to the end: the margin is 0.25 - 0.15


def margin_stopping(sweep: str | None = None) -> MarginStopping:
    settings = SchedulerSettings("margin", grace_epochs=1, reduction_factor=3, max_epochs=9)
    return MarginStopping(settings, OBJECTIVES, sweep)


def test_margin_waits_for_two_finished_trials():
    early = margin_stopping()
    assert early.decide("a", result(1, 0.30, 10.0)) == GO
    assert early.decide("a", result(9, 0.50, 10.0, "completed")) == GO
    assert early.decide("hopeless", result(1, 0.0, 99.0)) == GO


def test_a_run_stopped_once_is_never_stopped_again(tmp_path):
    """The sampler asks a stopped run again only knowing it was cut short: the same params
    and seed (the exact params aside) go on where they were stopped before, also after the
    scheduler is rebuilt from its record; another seed of them is judged as any trial."""
    place.bind("again", tmp_path)
    place.sweep_folder(tmp_path, "again").mkdir(parents=True)
    run = {"precision": "fp32", "checkpoint": "none", "seed": 0}
    first = margin_stopping("again")
    finish(first)
    assert first.decide("d", result(1, 0.15, 30.0), run) == STOP
    rebuilt = margin_stopping("again")
    moved = {**run, "checkpoint": "residual-1"}  # exact: the same training
    assert rebuilt.decide("d-again", result(1, 0.15, 30.0), moved) == GO
    assert rebuilt.decide("d-seed-1", result(1, 0.15, 30.0), {**run, "seed": 1}) == STOP


def test_a_trial_is_stopped_when_one_of_no_more_memory_leads_it_by_the_margin():
    """The finished trials moved 0.15 to 0.25 from rung 1: a spread of 0.10 from 3 trials, a
    margin of 0.10 * (3 + 1) / (3 - 1) = 0.20. d trails b (less memory) by 0.25; j trails b by
    0.12, more than the spread seen but less than the margin; e trails b by 0.09; f needs less
    memory than any; g's accuracy is missing; h trails `running` (a trial that has not
    finished: the hypervolume rule, which compares with finished trials only, lets h go on) by
    0.25; i leads every trial of less memory."""
    scheduler = margin_stopping()
    finish(scheduler, "acb")  # after a and b finished, c at rung 1 trails b by the margin
    decisions = decisions_at_rung_1(
        scheduler,
        [
            ("d", 0.15, 30.0),
            ("e", 0.31, 30.0),
            ("j", 0.28, 35.0),
            ("f", 0.05, 5.0),
            ("g", None, 50.0),
            ("running", 0.60, 15.0),
            ("h", 0.35, 25.0),
            ("i", 0.61, 80.0),
        ],
    )
    assert decisions == {
        "d": STOP,
        "e": GO,
        "j": GO,
        "f": GO,
        "g": STOP,
        "running": GO,
        "h": STOP,
        "i": GO,
    }
    hypervolume = hv_stopping()
    finish(hypervolume)
    assert hypervolume.decide("h", result(1, 0.40, 25.0)) == GO


# ---- CurveStopping: the final values extrapolated from the trial's own curve ----


def curve_stopping(sweep: str | None = None, reduction_factor: float = 3) -> CurveStopping:
    settings = SchedulerSettings(
        "curve", grace_epochs=1, reduction_factor=reduction_factor, max_epochs=9
    )
    return CurveStopping(settings, OBJECTIVES, sweep)


def test_extrapolate_fits_a_line_and_adds_the_residuals_top():
    """Losses at the rung 1, 2, 3 ending at 0.5, 1.1, 1.5: the line y = 0.5 x + 0.033 (least
    squares) leaves residuals -0.033, +0.067, -0.033; the optimistic end of a trial at 2.5 is
    its prediction 1.283 less 0.033 less the range 0.1 / 2."""
    at_rung, at_end = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.1, 1.5])
    assert extrapolate(at_rung, at_end, 2.5) == pytest.approx(0.5 * 2.5 + 0.1 / 3 - 0.1 / 3 - 0.05)
    # never worse than the trial's value at the rung
    assert extrapolate(at_rung, at_end, -4.0) == -4.0
    # order reversing (a falling line) is not believed: slope 0, so the best end seen (0.5)
    # less the residuals' range (1.0) / 2
    assert extrapolate(at_rung, at_end[::-1], 2.0) == pytest.approx(0.5 - 0.5)
    # with no spread at the rung, the hypervolume rule's gain: the largest (0.5) plus the
    # range (0.2) / 2
    assert extrapolate(np.ones(3), np.array([0.5, 0.6, 0.7]), 1.2) == pytest.approx(1.2 - 0.6)
    # a missing value leaves its pair out; fewer than three pairs move nothing
    missing = np.array([1.0, np.inf, 3.0, 4.0])
    assert extrapolate(missing, np.array([0.5, 1.1, 1.5, 2.0]), 2.5) < 2.5
    assert extrapolate(at_rung[:2], at_end[:2], 2.5) == 2.5


def test_curve_rule_judges_a_trial_by_its_own_curve():
    """FINISHED's curves gain less the further ahead they are at rung 1 (a slope of 0.5): the
    hypervolume rule gives every trial the largest gain, 0.30; the curve rule gives d (0.20 at
    30 MB) a predicted 0.5625 > b's 0.55 at 20 MB, so d goes on, where the hypervolume rule,
    adding 0.30, stops it. When curves keep their order (IN_ORDER: gains 0.20, 0.20, 0.22),
    the curve rule stops k (0.38 at 30 MB: predicted 0.593 < b's 0.60), which the hypervolume
    rule's 0.23 keeps."""
    hypervolume, curve = hv_stopping(), curve_stopping()
    finish(hypervolume)
    finish(curve)
    assert hypervolume.decide("d", result(1, 0.20, 30.0)) == STOP
    assert curve.decide("d", result(1, 0.20, 30.0)) == GO
    in_order = {"a": (0.30, 0.50, 10.0), "b": (0.40, 0.60, 20.0), "c": (0.50, 0.72, 40.0)}
    hypervolume, curve = hv_stopping(), curve_stopping()
    for scheduler in (hypervolume, curve):
        for trial, (first, final, memory) in in_order.items():
            scheduler.decide(trial, result(1, first, memory))
            scheduler.decide(trial, result(9, final, memory, "completed"))
    assert hypervolume.decide("k", result(1, 0.38, 30.0)) == GO
    assert curve.decide("k", result(1, 0.38, 30.0)) == STOP
    assert curve.projected == {"k": [pytest.approx(0.5847 + 0.0033 + 0.005, abs=1e-3), 30.0]}


def test_curve_rule_waits_for_three_finished_trials_and_survives_a_restart(tmp_path):
    place.bind("curves", tmp_path)
    place.sweep_folder(tmp_path, "curves").mkdir(parents=True)
    early = curve_stopping("curves", reduction_factor=2)
    finish(early, "ab")
    assert early.decide("hopeless", result(1, 0.0, 99.0)) == GO  # two fit a line exactly
    finish(early, "c")
    rebuilt = curve_stopping("curves", reduction_factor=2)  # the fit from the sweep's record
    assert rebuilt.decide("d", result(1, 0.10, 30.0)) == STOP
    assert projected("curves", "d") == pytest.approx([0.5125, 30.0])
