"""The known-memory and qlognehvi samplers with the predicted update time a known objective
beside the memory: the profiler's predictions are what they weigh a candidate by, their
hypervolume improvement over several known objectives is the mean gain, and they ask."""

from __future__ import annotations

import itertools
import json

import numpy as np
import optuna
import pytest
from scipy.stats import norm

from tune_lowmem.outcome import PREDICTED_UPDATE_S
from tune_lowmem.search.samplers import build_sampler
from tune_lowmem.search.samplers.known_memory import (
    KnownMemorySampler,
    dominance_front,
    expected_improvement,
    expected_improvement_known,
    front_points,
)
from tune_lowmem.search.screening import screen
from tune_lowmem.space import SearchSpace

from .test_known_memory import accuracy, memory, table_space
from .test_search import TINY_BASE

MEMORY = "memory.predicted_total_mb"
TIMED = {"val_accuracy": "maximize", MEMORY: "minimize", PREDICTED_UPDATE_S: "minimize"}


def seconds(params) -> float:
    """A stand-in update time: sparse layers and bf16 cost time where they save memory."""
    return (1.5 if params["precision"] == "bf16" else 1.0) * (1.2 - params["sparsity.density"])


def hypervolume(points, floor, ceiling) -> float:
    """The volume the (value, known...) points dominate above `floor` (values maximised) and
    below `ceiling` (known objectives minimised), by inclusion and exclusion of their boxes."""
    total = 0.0
    for size in range(1, len(points) + 1):
        for chosen in itertools.combinations(points, size):
            height = min(p[0] for p in chosen) - floor
            sides = [c - max(p[d + 1] for p in chosen) for d, c in enumerate(ceiling)]
            total += (-1) ** (size + 1) * max(height, 0.0) * np.prod(np.clip(sides, 0.0, None))
    return total


@pytest.mark.parametrize("candidate", [(0.15, 0.5), (0.55, 0.15), (0.75, 0.75), (1.3, 0.1)])
def test_the_improvement_over_two_known_objectives_is_the_mean_hypervolume_gain(candidate):
    """Closed form against the gain of a drawn value integrated over its normal density, the
    gain computed by inclusion and exclusion (no cells)."""
    values = np.array([0.5, 0.7, 0.6, 0.9])
    known = np.array([[0.2, 0.8], [0.6, 0.4], [0.7, 0.9], [0.9, 0.2]])  # the third dominated
    assert dominance_front(values, known) == [0, 1, 3]
    front = [(values[i], *known[i]) for i in dominance_front(values, known)]
    floor, ceiling = 0.3, np.array([1.2, 1.1])
    before = hypervolume(front, floor, ceiling)
    for mean, std in [(0.8, 0.05), (0.6, 0.2), (0.4, 0.01)]:
        (closed,) = expected_improvement_known(
            np.array([mean]),
            np.array([std]),
            np.array([candidate]),
            (values, known),
            (floor, ceiling),
        )
        drawn = np.linspace(mean - 8 * std, mean + 8 * std, 4001)
        gains = [hypervolume([*front, (y, *candidate)], floor, ceiling) - before for y in drawn]
        expected = np.trapezoid(np.array(gains) * norm.pdf(drawn, mean, std), drawn)
        assert closed == pytest.approx(expected, rel=1e-3, abs=1e-6)


def test_with_one_known_objective_it_is_the_one_dimensional_improvement():
    rng = np.random.default_rng(0)
    values, log_memory = rng.uniform(0, 1, 12), rng.uniform(0, 1, 12)
    mean, std, at = rng.uniform(0, 1, 40), rng.uniform(0.01, 0.3, 40), rng.uniform(-0.2, 1.3, 40)
    one = expected_improvement(mean, std, at, front_points(values, log_memory), (0.1, 1.2))
    many = expected_improvement_known(
        mean, std, at[:, None], (values, log_memory[:, None]), (0.1, np.array([1.2]))
    )
    assert many == pytest.approx(one)


@pytest.mark.parametrize("sampler", ["known-memory", "qlognehvi"])
def test_the_known_values_of_a_candidate_are_the_profilers_predictions(sampler):
    """With (val_accuracy, memory, predicted update time), the sampler is built with both known
    ones and reads a candidate's memory and time as the screening predicts them."""
    if sampler == "qlognehvi":
        pytest.importorskip("botorch")
    space = SearchSpace.from_dict(
        {
            "name": "timed",
            "base": TINY_BASE,
            "objectives": TIMED,
            "sampler": sampler,
            "num_samples": 4,
            "params": {"microbatch.size": {"type": "choice", "values": [None, 4]}},
        }
    )
    built = build_sampler(space)
    assert built.knowns == (MEMORY, PREDICTED_UPDATE_S) and built.learned == "val_accuracy"
    for size in (None, 4):
        predicted = screen(space, {"microbatch.size": size}).columns()
        known = built.known_of({"microbatch.size": size})
        assert known.tolist() == pytest.approx([predicted[MEMORY], predicted[PREDICTED_UPDATE_S]])
    assert built.known_of({"microbatch.size": 4})[1] > built.known_of({"microbatch.size": None})[1]


@pytest.mark.parametrize("sampler", ["known-memory", "qlognehvi"])
def test_it_asks_new_feasible_points_weighing_memory_and_time(sampler):
    """A study told (accuracy, memory, time): every ask a point not asked before and within the
    budget (where the known values are None), past the start-up points too."""
    if sampler == "qlognehvi":
        pytest.importorskip("botorch")
    space, _ = table_space(objectives=TIMED, sampler=sampler)
    asked = []

    def known(params):
        asked.append(dict(params))
        return None if memory(params) > 3.0 else (memory(params), seconds(params))

    built = build_sampler(space)
    built.memory = known
    study = optuna.create_study(directions=list(TIMED.values()), sampler=built)
    for _ in range(8):
        trial = study.ask()
        params = space.sample(trial)
        study.tell(trial, [accuracy(params), memory(params), seconds(params)])
    told = [t.params for t in study.get_trials()]
    assert all(memory(p) <= 3.0 for p in told)
    assert any(memory(p) > 3.0 for p in asked)  # such points were among the candidates
    assert len({json.dumps(p, sort_keys=True) for p in told}) == 8  # never asked again
    assert isinstance(built, KnownMemorySampler)
