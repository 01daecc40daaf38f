"""Known-memory's cost-weighing parts: the improvement per predicted second of training, and the
start-up from the space's least-memory training spread over memory and time; each off by its
option, each changing the ask where a test can see it."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest

from benchmarks import replay
from tune_lowmem.config import ConfigError
from tune_lowmem.search.samplers import build_sampler, profiler_cost
from tune_lowmem.search.samplers.known_memory import KnownMemorySampler
from tune_lowmem.search.screening import screen

from .test_known_memory import memory, run_study, table_space


def seconds(params) -> float:
    """A stand-in for the predicted seconds: dense trainings 100 times cheaper."""
    return 1.0 if params["sparsity.density"] == 1.0 else 100.0


def sampler(seed: int = 0, cost=seconds, **options) -> KnownMemorySampler:
    space, _ = table_space()
    options = {"n_candidates": 64, "n_startup_trials": 3, **options}
    return KnownMemorySampler(space, memory=memory, cost=cost, seed=seed, **options)


def flat_improvement(*_):
    """Every candidate the same expected improvement."""
    return lambda which, log_known: np.ones(len(which))


@pytest.mark.parametrize("seed", range(4))
def test_of_equal_improvements_cost_aware_asks_the_cheaper(seed):
    space, _ = table_space()
    study = run_study(space, sampler(seed=seed), 5)
    trials = study.get_trials()
    on = sampler(seed=seed, cost_aware=True)
    on.improvement = flat_improvement
    assert on.choose(trials, len(trials))["sparsity.density"] == 1.0


def test_without_cost_aware_equal_improvements_are_a_draw():
    space, _ = table_space()
    asked = set()
    for seed in range(6):
        trials = run_study(space, sampler(seed=seed), 5).get_trials()
        off = sampler(seed=seed)
        off.improvement = flat_improvement
        asked.add(off.choose(trials, len(trials))["sparsity.density"])
    assert asked - {1.0}  # a costlier training asked too


def test_the_improvement_per_second_is_divided_here_and_subtracted_from_a_log():
    gains, spent = np.array([2.0, 6.0]), np.array([4.0, 3.0])
    assert sampler().per_second(gains, spent).tolist() == [0.5, 2.0]
    qlognehvi = pytest.importorskip("tune_lowmem.search.samplers.qlognehvi")
    pytest.importorskip("botorch")
    logged = qlognehvi.QLogNEHVISampler.per_second(None, np.log(gains), spent)
    assert np.exp(logged) == pytest.approx([0.5, 2.0])


def every_point(space):
    """Every point of the table space's choices (the learning rate fixed: memory ignores it)."""
    names = [p.name for p in space.params if p.kind == "choice"]
    values = [p.values for p in space.params if p.kind == "choice"]
    for combination in itertools.product(*values):
        fixed = {**dict(zip(names, combination)), "schedule.lr_multiplier": 1.0}
        yield space.sample(optuna.trial.FixedTrial(fixed))


def test_the_start_up_asks_the_least_memory_training_first_when_on():
    space, _ = table_space()
    least = min(memory(p) for p in every_point(space))
    firsts = {seed: sampler(seed=seed, least_memory_start=True).choose([], 0) for seed in range(4)}
    assert all(memory(point) == least for point in firsts.values())
    off = [memory(sampler(seed=seed).choose([], 0)) for seed in range(4)]
    assert any(m > least for m in off)  # today's start-up: a random training first


def test_the_start_up_spreads_over_time_as_well_as_memory():
    """Asked: one dense bf16 point (2.4 MB, 1 s). Of a stochastic-rounding one (the same memory,
    100 s) and a dense fp32 one (twice the memory, 1 s), the start-up over memory alone asks the
    fp32 one, over memory and time the slow one."""
    asked = {"precision": "bf16", "precision_update": "nearest", "sparsity.density": 1.0}
    slow = {**asked, "precision_update": "stochastic"}
    dense = {"precision": "fp32", "sparsity.density": 1.0}

    def stochastic_is_slow(params) -> float:
        return 100.0 if params.get("precision_update") == "stochastic" else 1.0

    trial = optuna.trial.create_trial(
        params={**asked, "schedule.lr_multiplier": 1.0},
        distributions=sampler().distributions,
        values=[0.5, memory(asked)],
    )
    options = [[{**p, "schedule.lr_multiplier": 1.0}] for p in (slow, dense)]
    chosen = {
        on: sampler(cost=stochastic_is_slow, n_predicted=2, least_memory_start=on).spread(
            options, [trial]
        )
        for on in (False, True)
    }
    assert chosen[False]["precision"] == "fp32"
    assert chosen[True]["precision_update"] == "stochastic"


def test_a_sampler_rebuilt_with_both_parts_asks_the_same_point():
    space, _ = table_space()
    both = {"cost_aware": True, "least_memory_start": True}
    trials = run_study(space, sampler(seed=3, **both), 6).get_trials()
    chosen = [sampler(seed=3, **both).choose(trials, len(trials)) for _ in range(2)]
    assert chosen[0] == chosen[1]


@pytest.mark.parametrize("option", ["cost_aware", "least_memory_start"])
def test_a_part_set_to_no_boolean_is_a_one_line_error(option):
    with pytest.raises(ConfigError, match=rf"^sampler_options.{option}: 'yes' .*true or false"):
        table_space(sampler_options={option: "yes"})


def test_a_sweeps_sampler_gets_the_predicted_epoch_seconds_times_the_epochs():
    space, _ = table_space(sampler_options={"cost_aware": True})
    built = build_sampler(space)
    point = {"precision": "fp32", "sparsity.density": 1.0, "schedule.lr_multiplier": 1.0}
    screening = screen(space, point)
    expected = screening.time.epoch_seconds * screening.config.schedule.epochs
    assert built.cost(point) == pytest.approx(expected)
    cost = profiler_cost(space)
    assert cost(point) == pytest.approx(expected)


def test_the_replay_gives_the_tables_predicted_seconds_never_the_recorded_ones(tmp_path):
    space, _ = table_space(sampler_options={"cost_aware": True})
    frame_points = list(every_point(space))
    curves = {replay.key(p): ([0.5], memory(p)) for p in frame_points}
    table = replay.Table(curves, {}, seconds={k: 7.0 for k in curves})
    searcher = replay.table_searcher(space, table, str(tmp_path / "a"))
    with pytest.raises(ValueError, match="no predicted seconds"):
        searcher.study.sampler.cost(frame_points[0])
    table.predicted = {k: 3.0 for k in curves}
    searcher = replay.table_searcher(space, table, str(tmp_path / "b"))
    assert searcher.study.sampler.cost(frame_points[0]) == 3.0


def test_a_training_is_priced_at_the_variant_it_trains_as_not_the_one_weighed():
    """Training A is weighed at its fast fp32 variant (1 s) but trains as its least-memory bf16
    one (100 s); training B takes 10 s. Of equal improvements, cost-aware asks B."""
    fast = {"precision": "fp32", "sparsity.density": 1.0, "schedule.lr_multiplier": 1.0}
    least = {**fast, "precision": "bf16", "precision_update": "nearest"}
    other = {**fast, "sparsity.density": 0.3}
    priced = {"fp32-1.0": 1.0, "bf16-1.0": 100.0, "fp32-0.3": 10.0}

    def cost(params) -> float:
        return priced[f"{params['precision']}-{params['sparsity.density']}"]

    on = sampler(cost=cost, cost_aware=True, n_predicted=2)
    on.improvement = flat_improvement
    # A's fast variant guessed first (the least guessed memory), so A is weighed at it
    on.guessed_log_memory = lambda options, asked: [
        np.array([[0.0, 0.0], [1.0, 0.0]]),
        np.array([[0.0, 0.0]]),
    ]
    assert memory(least) < memory(fast)
    chosen = on.best_improvement([[fast, least], [other]], [], [], [], [])
    assert chosen == other
