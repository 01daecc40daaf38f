"""The known-memory sampler: its expected improvement against sampling, and its asks in a plain
Optuna study (budget, conditions, no repeats, the same ask after a restart)."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest

from benchmarks import replay
from tune_lowmem.config import ConfigError
from tune_lowmem.search.samplers import build_sampler, known_memory, memory_key, profiler_memory
from tune_lowmem.search.samplers.gaussian_process import GaussianProcess
from tune_lowmem.search.samplers.known_memory import (
    KnownMemorySampler,
    RandomDraw,
    expected_improvement,
    front_indices,
    front_points,
    near_front,
)
from tune_lowmem.search.stopping.asha import STOPPED_POINTS
from tune_lowmem.space import SearchSpace
from tune_lowmem.space.params import Param

from .test_search import OBJECTIVES
from .test_search import TINY_BASE as BASE


def improvement_by_sampling(mean, std, log_memory, points, reference, rng):
    """Monte Carlo of the same expectation: hypervolume with the drawn point minus without."""
    values = rng.normal(mean, std, 200_000)
    floor, ceiling = reference
    before = sum_of_steps(points, floor, ceiling)
    grid = np.linspace(log_memory, ceiling, 2001)[:-1] + (ceiling - log_memory) / 4000
    heights = np.array([max([floor] + [v for m, v in points if m <= t]) for t in grid])
    levels, counts = np.unique(heights, return_counts=True)  # the front's few steps
    gains = np.array([np.maximum(values - height, 0.0).mean() for height in levels])
    return float((gains * counts).sum() * (ceiling - log_memory) / 2000), before


def sum_of_steps(points, floor, ceiling):
    return sum(
        (right - m) * (v - floor)
        for (m, v), right in zip(points, [m for m, _ in points[1:]] + [ceiling])
    )


@pytest.mark.parametrize("log_memory", [0.1, 0.55, 0.95])
def test_expected_improvement_is_the_mean_hypervolume_gain(log_memory):
    front = front_points(np.array([0.5, 0.7, 0.6, 0.9]), np.array([0.2, 0.6, 0.7, 0.9]))
    assert front == [(0.2, 0.5), (0.6, 0.7), (0.9, 0.9)]  # (0.7, 0.6) is dominated
    reference = (0.3, 1.2)
    rng = np.random.default_rng(0)
    for mean, std in [(0.8, 0.05), (0.6, 0.2), (0.4, 0.01)]:
        (closed,) = expected_improvement(
            np.array([mean]), np.array([std]), np.array([log_memory]), front, reference
        )
        sampled, _ = improvement_by_sampling(mean, std, log_memory, front, reference, rng)
        assert closed == pytest.approx(sampled, rel=0.02, abs=2e-4)
    # at or past the reference's memory nothing is gained
    assert expected_improvement(
        np.array([1.0]), np.array([0.1]), np.array([1.2]), front, reference
    )[0] == pytest.approx(0.0)


def table_space(**fields) -> tuple[SearchSpace, dict]:
    """A space with a conditional param, and a memory per point (a stand-in for the profiler
    in these unit tests; the sweep test in test_search.py uses the profiler itself)."""
    params = {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "precision_update": {"type": "choice", "values": ["nearest", "stochastic"]},
        "sparsity.density": {"type": "choice", "values": [0.1, 0.3, 1.0]},
        "schedule.lr_multiplier": {"type": "loguniform", "low": 0.25, "high": 4.0},
    }
    raw = {
        "name": "km",
        "base": BASE,
        "params": params,
        "conditions": {"precision_update": "precision == bf16"},
        "objectives": OBJECTIVES,
        "sampler": "known-memory",
        "sampler_options": {"n_startup_trials": 3, "n_candidates": 64},
        "num_samples": 12,
        **fields,
    }
    return SearchSpace.from_dict(raw), raw


def memory(params) -> float:
    bf16 = params["precision"] == "bf16"
    return (2.0 if bf16 else 4.0) * (0.2 + params["sparsity.density"])


def accuracy(params) -> float:
    return (
        0.5 * params["sparsity.density"] ** 0.3
        - 0.05 * np.log(params["schedule.lr_multiplier"]) ** 2
    )


def run_study(space: SearchSpace, sampler: KnownMemorySampler, points: int):
    study = optuna.create_study(directions=list(OBJECTIVES.values()), sampler=sampler)
    for _ in range(points):
        trial = study.ask()
        params = space.sample(trial)
        study.tell(trial, [accuracy(params), memory(params)])
    return study


def test_asks_honour_the_budget_the_conditions_and_never_repeat():
    space, _ = table_space()
    asked = []

    def budgeted(params):
        asked.append(dict(params))
        value = memory(params)
        return None if value > 3.0 else value  # over a 3 MB budget: infeasible

    study = run_study(
        space, KnownMemorySampler(space, seed=0, n_candidates=64, memory=budgeted), 10
    )
    trials = study.get_trials()
    assert all(memory(t.params) <= 3.0 for t in trials)  # no trial spent on an infeasible point
    assert any(memory(p) > 3.0 for p in asked)  # such points were among the candidates
    for t in trials:  # the conditional param exactly where its condition holds
        assert ("precision_update" in t.params) == (t.params["precision"] == "bf16")


def test_a_sampler_rebuilt_on_the_study_asks_the_same_point():
    """Its model is rebuilt from the study at every ask: two samplers of one seed on one study
    (a resumed sweep rebuilds its sampler on the journal) choose the same point."""
    space, _ = table_space()
    study = run_study(space, KnownMemorySampler(space, seed=3, memory=memory), 6)
    trials = study.get_trials()
    chosen = [
        KnownMemorySampler(space, seed=3, memory=memory).choose(trials, len(trials))
        for _ in range(2)
    ]
    assert chosen[0] == chosen[1]
    assert chosen[0] not in [t.params for t in trials]


GRID_VALUES = {
    "precision": ["fp32", "bf16"],
    "sparsity.density": [0.1, 0.2, 0.3, 0.5, 0.7, 1.0],
    "schedule.lr_multiplier": [0.25, 0.5, 1.0, 2.0, 4.0],
}


def trials_to_front(sampler_name: str, seed: int, points: int = 16) -> int:
    """Points a sweep of `sampler_name` asks on a small grid until its told points hold 95% of
    the whole grid's hypervolume (points + 1: never); a sampler that knows the memory asks no
    point twice."""
    space = SearchSpace.from_dict(
        {
            "name": "grid",
            "base": BASE,
            "params": {n: {"type": "choice", "values": v} for n, v in GRID_VALUES.items()},
            "objectives": OBJECTIVES,
            "num_samples": points,
            "sampler": sampler_name,
            "sampler_seed": seed,
        }
    )
    grid = [dict(zip(GRID_VALUES, values)) for values in itertools.product(*GRID_VALUES.values())]
    reference = [min(accuracy(p) for p in grid), 1.1 * max(memory(p) for p in grid)]
    best = replay.hypervolume([[accuracy(p), memory(p)] for p in grid], reference)
    sampler = build_sampler(space)
    if isinstance(sampler, KnownMemorySampler):
        sampler.memory = memory
    study = run_study(space, sampler, points)
    asked = [tuple(sorted(t.params.items())) for t in study.get_trials()]
    if isinstance(sampler, KnownMemorySampler):
        assert len(set(asked)) == len(asked)  # no point twice
    done = []
    for n, t in enumerate(study.get_trials(), 1):
        done.append(t.values)
        if replay.hypervolume(done, reference) >= 0.95 * best:
            return n
    return points + 1


def test_it_finds_the_front_on_a_recorded_grid_faster_than_random():
    """On a small grid the sampler reaches 95% of the whole grid's hypervolume in fewer points
    than random sampling (median of 5 seeds), and never asks a point twice."""
    known = np.median([trials_to_front("known-memory", s) for s in range(5)])
    random = np.median([trials_to_front("random", s) for s in range(5)])
    assert known < random


def test_the_space_refuses_it_without_one_predicted_memory_and_one_other_objective():
    """Its declared need (a known objective) refuses a space the profiler predicts no objective
    of; the sampler itself refuses any but one objective that training tells."""
    measured = {"val_accuracy": "maximize", "memory.measured_total_mb": "minimize"}
    with pytest.raises(ConfigError, match="^objectives: sampler known-memory needs an objective"):
        build_sampler(table_space(objectives=measured)[0])
    both = {"memory.predicted_total_mb": "minimize", "memory.predicted_activation_mb": "minimize"}
    learned = {**measured, "memory.predicted_total_mb": "minimize"}
    for objectives in (both, learned):
        with pytest.raises(
            ConfigError, match="^objectives: sampler known-memory needs one objective that training"
        ):
            build_sampler(table_space(objectives=objectives)[0])
    with pytest.raises(ConfigError, match="sampler_options.population_size: not an option"):
        build_sampler(table_space(sampler_options={"population_size": 4})[0])


def test_of_points_that_train_alike_it_asks_only_the_least_memory_one_once():
    """Checkpointing is exact (the same training, less memory): the sampler asks each training
    once, always at its least-memory strategy; a lossy fused step is a training of its own."""
    saving = {"none": 1.0, "residual-1": 0.6, "residual-2*": 0.8}
    space = SearchSpace.from_dict(
        {
            "name": "exact",
            "base": BASE,
            "params": {
                "checkpoint": {"type": "choice", "values": list(saving)},
                "fused_step": {"type": "choice", "values": ["none", "exact", "heavy-ball"]},
                "precision": {"type": "choice", "values": ["fp32", "bf16"]},
                "sparsity.density": {"type": "choice", "values": [0.1, 0.3, 1.0]},
                "schedule.lr_multiplier": {"type": "choice", "values": [0.5, 1.0]},
            },
            "objectives": OBJECTIVES,
            "num_samples": 12,
        }
    )

    def exact_memory(params):
        lossy = 0.9 if params["fused_step"] == "heavy-ball" else 1.0
        return memory(params) * saving[params["checkpoint"]] * lossy

    study = optuna.create_study(directions=list(OBJECTIVES.values()))
    study.sampler = KnownMemorySampler(space, seed=0, memory=exact_memory)
    for _ in range(12):
        trial = study.ask()
        params = space.sample(trial)
        study.tell(trial, [accuracy(params), exact_memory(params)])
    asked = [t.params for t in study.get_trials()]
    assert all(p["checkpoint"] == "residual-1" for p in asked)
    assert all(p["fused_step"] in ("none", "heavy-ball") for p in asked)  # exact: no saving
    trainings = [
        (
            p["fused_step"] == "heavy-ball",
            p["precision"],
            p["sparsity.density"],
            p["schedule.lr_multiplier"],
        )
        for p in asked
    ]
    assert len(set(trainings)) == len(trainings)


def test_an_ask_predicts_the_memory_of_a_few_trainings_only():
    """Predicting memory is the ask's cost (a profiler dry run per shape): past its start, an ask
    weighs every candidate by the learned model but predicts the memory of `n_predicted`
    trainings only, not of its 64 candidates."""
    space, _ = table_space()
    predicted = []

    def counted(params):
        predicted.append(dict(params))
        return memory(params)

    sampler = KnownMemorySampler(space, seed=0, n_candidates=64, n_predicted=2, memory=counted)
    study = run_study(space, sampler, 6)
    before = len(predicted)
    trial = study.ask()
    space.sample(trial)
    assert 1 <= len(predicted) - before <= 2
    assert len(study.get_trials()) == 7


def test_memory_predicted_once_per_shape_chooses_as_predicting_every_point():
    """The profiler's memory is cached per shape key (a learning rate or a rewiring knob does not
    change it): the values are those of a prediction for every point, and so are the choices."""
    space = SearchSpace.from_dict(
        {
            "name": "shapes",
            "base": BASE,
            "params": {
                "precision": {"type": "choice", "values": ["fp32", "bf16"]},
                "checkpoint": {"type": "choice", "values": ["none", "residual-1"]},
                "sparsity.density": {"type": "choice", "values": [0.5, 1.0]},
                "schedule.lr_multiplier": {"type": "loguniform", "low": 0.25, "high": 4.0},
                "sparsity.period_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0},
            },
            "conditions": {"sparsity.period_multiplier": "sparsity.density < 1"},
            "objectives": OBJECTIVES,
            "num_samples": 6,
        }
    )
    cached = profiler_memory(space)  # of its objective memory.predicted_total_mb

    def uncached(params):  # a fresh cache for every point: a prediction per point
        return profiler_memory(space)(params)

    base = {"precision": "bf16", "checkpoint": "none", "sparsity.density": 0.5}
    points = [
        {**base, "schedule.lr_multiplier": lr, "sparsity.period_multiplier": period}
        for lr, period in [(0.5, 1.0), (2.0, 0.7), (1.0, 1.9)]
    ]
    assert len({memory_key(space, p) for p in points}) == 1
    points += [{**points[0], "checkpoint": "residual-1"}, {**points[0], "precision": "fp32"}]
    values = [cached(p) for p in points]
    assert values == [uncached(p) for p in points] and len(set(values)) == 3
    chosen = []
    for memory_of in (cached, uncached):
        sampler = KnownMemorySampler(space, seed=1, n_startup_trials=2, memory=memory_of)
        study = optuna.create_study(directions=list(OBJECTIVES.values()), sampler=sampler)
        for _ in range(4):
            trial = study.ask()
            params = space.sample(trial)
            study.tell(trial, [accuracy({"sparsity.density": 1.0, **params}), memory_of(params)])
        chosen.append([t.params for t in study.get_trials()])
    assert chosen[0] == chosen[1]


def test_once_every_training_was_asked_a_stopped_one_is_asked_once_more():
    """A stop may cut a front point short: when nothing untried is left, the trainings that
    only a stopped trial tried (the study's `STOPPED_POINTS`) are asked again, each once."""
    space = SearchSpace.from_dict(
        {
            "name": "again",
            "base": BASE,
            "params": {
                "precision": {"type": "choice", "values": ["fp32", "bf16"]},
                "sparsity.density": {"type": "choice", "values": [0.1, 0.3, 1.0]},
                "schedule.lr_multiplier": {"type": "choice", "values": [1.0]},
            },
            "objectives": OBJECTIVES,
            "num_samples": 12,
        }
    )
    study = run_study(
        space, KnownMemorySampler(space, seed=0, n_startup_trials=2, memory=memory), 6
    )
    sampler, trials = study.sampler, study.get_trials()
    assert len({(t.params["precision"], t.params["sparsity.density"]) for t in trials}) == 6
    assert sampler.choose(trials, 6) is None  # every training asked, none stopped
    study.set_user_attr(STOPPED_POINTS, [2, 4])
    again = []
    for _ in range(2):
        trial = study.ask()
        again.append((trial, space.sample(trial)))
    assert [trial.number for trial, _ in again] == [6, 7]
    assert sorted(str(params) for _, params in again) == sorted(
        str(trials[n].params) for n in (2, 4)
    )
    for trial, params in again:
        study.tell(trial, [accuracy(params), memory(params)])
    assert sampler.choose(study.get_trials(), 8, {2, 4}) is None  # each asked once more only


def told_study(space: SearchSpace, sampler: KnownMemorySampler, points: int) -> optuna.Study:
    """A study of `points` random points of `space`, told at once (seed 0)."""
    study = optuna.create_study(directions=list(OBJECTIVES.values()), sampler=sampler)
    draw = RandomDraw(np.random.default_rng(0))
    history = []
    for _ in range(points):
        params = space.sample(draw)
        history.append(
            optuna.trial.create_trial(
                params=params,
                distributions={name: sampler.distributions[name] for name in params},
                values=[accuracy(params), memory(params)],
            )
        )
    study.add_trials(history)
    return study


def test_past_n_modelled_each_model_learns_a_bounded_subset_holding_the_front(monkeypatch):
    """An exact Gaussian process's fit grows as n^3: past `n_modelled` trials an ask fits each
    model on a bounded subset, which holds the whole front and the most recent trials."""
    space, _ = table_space()
    sampler = KnownMemorySampler(space, seed=0, n_candidates=64, n_modelled=8, memory=memory)
    study = told_study(space, sampler, 40)
    trials = study.get_trials()
    fitted = []
    fit = GaussianProcess.fit
    monkeypatch.setattr(
        GaussianProcess, "fit", lambda inputs, *a: fitted.append(len(inputs)) or fit(inputs, *a)
    )
    space.sample(study.ask())
    assert len(fitted) == 2 and max(fitted) <= 8  # accuracy, then the memory it guesses
    kept = sampler.modelled(trials, 8)
    values = np.array([accuracy(t.params) for t in trials])
    front = front_indices(values, np.log10([memory(t.params) for t in trials]))
    assert len(front) <= 4 and len(kept) == 8
    assert {trials[i].number for i in front} | {38, 39} <= {t.number for t in kept}
    assert sampler.modelled(trials[:8], 4) == trials[:8]  # up to n_modelled: every trial


def test_an_asks_work_does_not_grow_with_the_study(monkeypatch):
    """Past `n_modelled`, an ask reads what it needs of each finished trial once, not at every
    ask (`known_memory.per_finished_trial`): a second ask keys as many points with 40 trials
    told as with 160, its candidates only."""
    space, _ = table_space()
    keyed = []
    key = known_memory.training_key
    monkeypatch.setattr(known_memory, "training_key", lambda p: keyed.append(1) or key(p))
    second = {}
    for points in (40, 160):
        sampler = KnownMemorySampler(space, seed=0, n_candidates=64, n_modelled=8, memory=memory)
        trials = told_study(space, sampler, points).get_trials(deepcopy=False)
        sampler.choose(trials, points)
        keyed.clear()
        sampler.choose(trials, points)
        second[points] = len(keyed)
    assert second[40] == second[160] > 0


def test_below_n_modelled_an_ask_is_that_of_a_model_of_every_trial():
    """The cap changes nothing up to `n_modelled` trials: the same points as without one (the
    last ask at the cap itself)."""
    space, _ = table_space()
    asked = [
        [
            t.params
            for t in run_study(
                space,
                KnownMemorySampler(space, seed=2, n_candidates=64, n_modelled=cap, memory=memory),
                8,
            ).get_trials()
        ]
        for cap in (7, 10**6)
    ]
    assert asked[0] == asked[1]


def test_near_front_takes_layers_front_first_and_spreads_the_last_one():
    values = np.array([0.1, 0.5, 0.9, 0.4, 0.8, 0.05])
    log_memory = np.array([0.0, 0.5, 1.0, 0.6, 1.1, 0.1])
    assert near_front(values, log_memory, 3) == [0, 1, 2]  # the front, by memory
    assert near_front(values, log_memory, 5) == [0, 1, 2, 5, 4]  # then the next layer's ends
    assert near_front(values, log_memory, 9) == [0, 1, 2, 5, 3, 4]


def test_the_accuracy_model_reads_each_choices_order():
    """Numbers by value (log-spaced when positive), a declared order by rank, an unordered
    choice (or numbers declared unordered) one-hot."""
    density = Param("sparsity.density", "choice", values=(1.0, 0.1, 0.01))
    assert known_memory.encode_param(density, 0.1) == [pytest.approx(0.5)]
    microbatch = Param("microbatch.size", "choice", values=(None, 10, 4), ordered=True)
    assert [known_memory.encode_param(microbatch, v) for v in (None, 10, 4)] == [
        [0.0],
        [0.5],
        [1.0],
    ]
    unordered = Param("sparsity.density", "choice", values=(1.0, 0.1), ordered=False)
    assert known_memory.encode_param(unordered, 0.1) == [0.0, 1.0]
