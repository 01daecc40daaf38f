"""Exactness for every sampler (no Ray): the searcher trains each training once, at its
least-memory variant, answers a training asked again from its result, survives a restart, and
leaves the known-memory sampler's sweeps as they were."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from optuna.trial import TrialState

from benchmarks import replay
from tune_lowmem import store
from tune_lowmem.config import ConfigError
from tune_lowmem.search import ScreenedSearcher, place, sweep_folder
from tune_lowmem.search.exact import training_key
from tune_lowmem.search.exactness import ANSWERED_BY, TRAINED_AS
from tune_lowmem.search.samplers import profiler_memory
from tune_lowmem.search.stopping.asha import STOPPED, STOPPED_POINTS
from tune_lowmem.search.trainable import sweep_rows
from tune_lowmem.space import SearchSpace

from .test_search import OBJECTIVES, TINY_BASE

CHECKPOINT = {"type": "choice", "values": ["none", "residual-1"]}  # exact: one training


def exact_space(sampler: str = "random", num_samples: int = 6, **fields) -> SearchSpace:
    params = {"precision": {"type": "choice", "values": ["fp32", "bf16"]}, "checkpoint": CHECKPOINT}
    return SearchSpace.from_dict(
        {
            "name": "unit",
            "base": TINY_BASE,
            "objectives": OBJECTIVES,
            "sampler": sampler,
            "num_samples": num_samples,
            "params": params,
            "baseline": False,
            **fields,
        }
    )


def searcher_of(space: SearchSpace, root: Path) -> ScreenedSearcher:
    sweep_folder(place.bind("unit", root), "unit").mkdir(parents=True, exist_ok=True)
    return ScreenedSearcher(space, "unit")


def hand_out_all(searcher: ScreenedSearcher) -> list[dict]:
    handed = []
    while (config := searcher.suggest(f"t{len(handed)}")) != "FINISHED":
        handed.append(config)
    return handed


def completed(accuracy: float, memory: float = 3.0) -> dict:
    return {
        "trial_status": "completed",
        "val_accuracy": accuracy,
        "memory.predicted_total_mb": memory,
    }


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_each_training_trains_once_at_its_least_memory_and_answers_the_others(sampler, tmp_path):
    """Six asks of two trainings (precision; checkpointing is exact): each training trains once,
    at the checkpointing the profiler predicts least memory for, and every other ask is told
    what the point that trained its training is told, once that one is."""
    space = exact_space(sampler)
    searcher = searcher_of(space, tmp_path / "store")
    handed = hand_out_all(searcher)
    keys = [training_key(c["params"]) for c in handed]
    assert len(set(keys)) == len(keys)  # no training twice
    memory = profiler_memory(space)
    for config in handed:
        params = {k: v for k, v in config["params"].items() if k != "seed"}
        variants = [{**params, "checkpoint": c} for c in CHECKPOINT["values"]]
        assert memory(params) == min(memory(v) for v in variants)
    trials = searcher.study.get_trials()
    assert len(trials) == 6  # every ask counts among num_samples
    answered = [t for t in trials if ANSWERED_BY in t.user_attrs]
    assert len(answered) == 6 - len(handed) > 0
    assert all(t.state == TrialState.RUNNING for t in answered)  # until their trainer is told

    for i, config in enumerate(handed):
        searcher.on_trial_complete(f"t{i}", completed(0.3 + 0.1 * i, 3.0 + i))
    trials = searcher.study.get_trials()
    assert all(t.state == TrialState.COMPLETE for t in trials)
    for trial in answered:
        assert trials[trial.number].values == trials[trial.user_attrs[ANSWERED_BY]].values
    for config in handed:  # a point asked at another variant keeps the sampler's params
        trial = trials[config["point"]]
        asked_as = {**trial.params, **trial.user_attrs.get(TRAINED_AS, {})}
        assert {**asked_as, "seed": 0} == config["params"]


def test_without_exactness_the_sampler_trains_two_variants_of_one_training(tmp_path):
    space = exact_space(exactness=False)
    handed = hand_out_all(searcher_of(space, tmp_path / "store"))
    assert len(handed) == 6
    keys = [training_key(c["params"]) for c in handed]
    assert len(set(keys)) < len(keys)
    assert len({str(c["params"]) for c in handed if keys.count(training_key(c["params"])) > 1}) > 1


def test_a_training_cut_short_by_a_stop_trains_again_when_asked_again(tmp_path):
    """Early stopping may cut a front point short: a later ask of its training trains it again
    (to its end), and the ask after that is answered by the one that ran again."""
    space = exact_space(num_samples=3, params={"checkpoint": CHECKPOINT})
    searcher = searcher_of(space, tmp_path / "store")
    first = searcher.suggest("t0")
    searcher.on_trial_complete("t0", {**completed(0.4), "trial_status": STOPPED})
    assert searcher.study.user_attrs[STOPPED_POINTS] == [0]
    again = searcher.suggest("t1")
    assert again["point"] == 1 and again["params"] == first["params"]
    assert searcher.suggest("t2") == "FINISHED"
    searcher.on_trial_complete("t1", completed(0.6))
    trials = searcher.study.get_trials()
    assert trials[2].user_attrs[ANSWERED_BY] == 1 and trials[2].values == trials[1].values


def store_completed(root: Path, space: SearchSpace, handed: dict, accuracy: float) -> None:
    config = space.trial_config(handed["params"]).to_flat()
    record = sweep_rows(space, "unit").row(
        "t0",
        "completed",
        config,
        {"val_accuracy": accuracy},
        {"memory.predicted_total_mb": 3.0},
        point=handed["point"],
    )
    store.write_trial(root, record)


@pytest.mark.parametrize("stored", [True, False], ids=["trainer stored", "trainer running"])
def test_answered_points_are_told_after_a_restart(stored, tmp_path):
    """A driver killed after its last asks, each answered by the one point that trains: the
    rebuilt searcher trains nothing again and tells the answered points what their trainer is
    told, from the store if it stored its row meanwhile, else when its trial ends."""
    root = tmp_path / "store"
    space = exact_space(num_samples=3, params={"checkpoint": CHECKPOINT})
    handed = hand_out_all(searcher_of(space, root))
    assert len(handed) == 1
    if stored:
        store_completed(root, space, handed[0], 0.55)

    restored = searcher_of(space, root)
    restored.rejoin({"t0": handed[0]})
    assert restored.suggest("t1") == "FINISHED"  # nothing is trained again
    if not stored:
        assert [t.state for t in restored.study.get_trials()] == [TrialState.RUNNING] * 3
        restored.on_trial_complete("t0", completed(0.55))
    trials = restored.study.get_trials()
    assert [t.values for t in trials] == [pytest.approx([0.55, 3.0])] * 3
    assert [t.user_attrs.get(ANSWERED_BY) for t in trials] == [None, 0, 0]


def test_a_space_turns_it_off_and_a_grid_trains_every_combination_unless_told():
    assert exact_space().uses_exactness() and not exact_space(exactness=False).uses_exactness()
    assert not exact_space("grid", num_samples=None).uses_exactness()  # every combination once
    assert exact_space("grid", num_samples=None, exactness=True).uses_exactness()
    for space in (exact_space(), exact_space(exactness=False)):
        assert SearchSpace.from_dict(space.to_dict()) == space
    with pytest.raises(ConfigError, match=r"^exactness: 'no' is not allowed; true or false is"):
        exact_space(exactness="no")


def exact_table(cheaper: str) -> replay.Table:
    """Four trainings of three epochs, each recorded once per checkpointing (one curve), the
    `cheaper` strategy at half the memory."""
    rows = []
    for i, precision in enumerate(["fp32", "bf16"]):
        for j, density in enumerate([1.0, 0.2]):
            start = 0.5 - 0.1 * (2 * i + j)
            for checkpoint in CHECKPOINT["values"]:
                rows.append(
                    {
                        "config.precision": precision,
                        "config.sparsity.density": density,
                        "config.checkpoint": checkpoint,
                        "curve": [start, start + 0.05, start + 0.1],
                        "memory.predicted_total_mb": (10.0 - 4 * i - 3 * j)
                        * (0.5 if checkpoint == cheaper else 1.0),
                    }
                )
    return replay.Table.from_frame(pd.DataFrame(rows))


def replayed(
    table: replay.Table, sampler: str, exactness: bool, monkeypatch, workers: int = 1, **fields
):
    """The history of a replayed sweep and the params it trained, in order."""
    space = SearchSpace.from_dict(
        replay.replay_space(table, TINY_BASE, sampler, 0, exactness=exactness, **fields)
    )
    trained = []
    suggest = replay.ScreenedSearcher.suggest

    def spy(self, trial_id):
        config = suggest(self, trial_id)
        if isinstance(config, dict):
            trained.append(config["params"])
        return config

    monkeypatch.setattr(replay.ScreenedSearcher, "suggest", spy)
    history = replay.replay(space, table, workers)
    monkeypatch.undo()
    return history, trained


def test_a_sweeps_first_asks_are_what_its_workers_start_blind(monkeypatch):
    """`first_asks` gives the trainings a sweep of that many trials at once starts with: the
    points it trains first, after exactness (a point that trains as one asked is not one)."""
    table = exact_table(cheaper="none")
    _, trained = replayed(table, "random", True, monkeypatch, workers=3, num_samples=12)
    space = SearchSpace.from_dict(
        replay.replay_space(table, TINY_BASE, "random", 0, exactness=True, num_samples=12)
    )
    first = replay.first_asks(space, table, 3)
    assert first == [{k: v for k, v in p.items() if k != "seed"} for p in trained[:3]]
    assert len({training_key(p) for p in first}) == 3


def test_a_replay_trains_each_training_at_the_tables_least_memory(monkeypatch):
    """In a replay the least memory is the table's (here checkpointing costs memory, as the
    profiler never says): a random sampler's 12 asks train each of the 4 trainings once,
    without checkpointing, in fewer epochs than without exactness, to the same front."""
    table = exact_table(cheaper="none")
    exact, trained = replayed(table, "random", True, monkeypatch, num_samples=12)
    assert len({training_key(p) for p in trained}) == len(trained) == 4
    assert {p["checkpoint"] for p in trained} == {"none"}
    assert exact[-1].epochs == 12
    assert exact[-1].hypervolume == pytest.approx(table.best_hypervolume())
    plain, trained = replayed(table, "random", False, monkeypatch, num_samples=12)
    assert len(trained) == 12 and plain[-1].epochs == 36


def test_the_known_memory_sampler_sweeps_as_without_exactness(monkeypatch):
    """known-memory asks each training once at its least-memory variant already: with exactness
    its replayed sweep trains the same points in the same order, and answers none."""
    table = exact_table(cheaper="residual-1")
    options = {"sampler_options": {"n_startup_trials": 2}, "num_samples": 4}
    with_it = replayed(table, "known-memory", True, monkeypatch, **options)
    without = replayed(table, "known-memory", False, monkeypatch, **options)
    assert with_it == without
    assert len(with_it[1]) == 4 and {p["checkpoint"] for p in with_it[1]} == {"residual-1"}
