"""The Pareto functions against hand-worked cases, and against Optuna where it has an answer."""

from __future__ import annotations

import itertools
import math
import warnings

import matplotlib
import numpy as np
import optuna
import pandas as pd
import pytest

from tune_lowmem.config import ConfigError
from tune_lowmem.pareto import (
    _hv_2d,
    _hv_wfg,
    aggregate_seeds,
    best_under_budget,
    hypervolume,
    hypervolume_history,
    non_dominated_mask,
    non_dominated_sort,
    pareto_front,
)

MIN2 = ["minimize", "minimize"]
NAN = math.nan


@pytest.mark.parametrize(
    ("values", "directions", "expected"),
    [
        ([[1, 2], [1, 2], [2, 1]], MIN2, [True, True, True]),  # equal points are all on the front
        ([[1, 2], [1, 2], [2, 3]], MIN2, [True, True, False]),
        ([[5, 5]], MIN2, [True]),  # a single point
        ([[0, 0], [1, 2], [3, 1], [2, 2], [0, 1]], MIN2, [True, False, False, False, False]),
        # memory (min) against accuracy (max)
        (
            [[100, 0.9], [50, 0.8], [60, 0.7], [100, 0.95]],
            ["minimize", "maximize"],
            [False, True, False, True],
        ),
        ([[NAN, 0], [1, 1], [2, 2]], MIN2, [False, True, False]),  # NaN is never on the front ...
        ([[0, NAN], [1, 1]], MIN2, [False, True]),  # ... and dominates nothing
        ([[1, 2, 3], [3, 2, 1], [2, 2, 2], [3, 3, 3]], ["minimize"] * 3, [True, True, True, False]),
    ],
)
def test_non_dominated_mask_hand_cases(values, directions, expected):
    assert non_dominated_mask(values, directions).tolist() == expected


def test_non_dominated_mask_agrees_with_optuna_best_trials():
    rng = np.random.default_rng(0)
    directions = ["minimize", "maximize", "minimize"]
    values = rng.integers(0, 5, size=(60, 3)).astype(float)  # small range: many ties and duplicates
    study = optuna.create_study(directions=directions)
    study.add_trials(
        optuna.trial.create_trial(values=list(v), params={}, distributions={}) for v in values
    )
    expected = sorted(t.number for t in study.best_trials)
    assert np.flatnonzero(non_dominated_mask(values, directions)).tolist() == expected


def test_non_dominated_sort_peels_fronts_and_ranks_nan_last():
    values = [[1, 4], [2, 2], [4, 1], [2, 3], [3, 3], [4, 4], [NAN, 1]]
    assert non_dominated_sort(values, MIN2).tolist() == [0, 0, 0, 1, 2, 3, 4]
    assert non_dominated_sort([[3.0]], ["maximize"]).tolist() == [0]
    assert non_dominated_sort(np.empty((0, 2)), MIN2).tolist() == []


def test_non_dominated_sort_ranks_by_the_definition():
    rng = np.random.default_rng(2)
    values = rng.integers(0, 6, size=(80, 3)).astype(float)
    ranks = non_dominated_sort(values, ["minimize"] * 3)

    def dominates(a, b):
        return np.all(a <= b) and np.any(a < b)

    for point, rank in zip(values, ranks):
        same_or_worse = values[ranks >= rank]
        assert not any(dominates(other, point) for other in same_or_worse)
        if rank > 0:
            assert any(dominates(other, point) for other in values[ranks == rank - 1])


def test_hypervolume_of_known_rectangles():
    assert hypervolume([[1, 1]], MIN2, [3, 4]) == 6
    # two boxes of 3 and 6 overlapping in 2: 7
    assert hypervolume([[1, 3], [2, 1]], MIN2, [4, 4]) == 7
    # outside the reference, on its boundary, dominated, duplicated or NaN: nothing added
    assert (
        hypervolume([[1, 3], [2, 1], [5, 0], [1, 4], [3, 3], [2, 1], [NAN, 0]], MIN2, [4, 4]) == 7
    )
    assert hypervolume([[5, 5]], MIN2, [4, 4]) == 0
    # memory (min) 4 MB at accuracy (max) 0.5 against the reference (10 MB, accuracy 0): 6 * 0.5
    assert hypervolume([[4, 0.5]], ["minimize", "maximize"], [10, 0]) == pytest.approx(3.0)


def test_hypervolume_3d_hand_case():
    # a = (1,1,2) and c = (1,2,1) boxes of 4 each overlapping in 2; b = (2,2,1) is dominated by c
    assert hypervolume([[1, 1, 2], [2, 2, 1], [1, 2, 1]], ["minimize"] * 3, [3, 3, 3]) == 6
    assert hypervolume([[0, 0, 0]], ["minimize"] * 3, [1, 2, 3]) == 6
    assert hypervolume([[1, 3, 2]], ["minimize", "maximize", "minimize"], [2, 0, 4]) == 6


def union_of_boxes(points: np.ndarray, reference: np.ndarray) -> float:
    """Inclusion-exclusion over every subset of boxes: slow, obviously right, for small n."""
    total = 0.0
    for size in range(1, len(points) + 1):
        for subset in itertools.combinations(points, size):
            corner = np.max(subset, axis=0)
            total += (-1) ** (size + 1) * float(np.prod(np.clip(reference - corner, 0, None)))
    return total


@pytest.mark.parametrize("dims", [2, 3, 4])
def test_exact_hypervolumes_agree_with_inclusion_exclusion(dims):
    rng = np.random.default_rng(dims)
    reference = np.ones(dims)
    for _ in range(20):
        points = rng.random((int(rng.integers(1, 8)), dims))
        expected = union_of_boxes(points, reference)
        assert _hv_wfg(points, reference) == pytest.approx(expected)
        assert hypervolume(points, ["minimize"] * dims, reference) == pytest.approx(expected)
        if dims == 2:
            assert _hv_2d(points, reference) == pytest.approx(expected)


def test_hypervolume_history_hand_case():
    values = [[3, 3], [5, 1], [1, 3], [2, 1], [NAN, 0], [3, 3]]
    assert hypervolume_history(values, MIN2, [4, 4]).tolist() == [1, 1, 3, 7, 7, 7]


def test_hypervolume_history_is_monotone_and_matches_optuna():
    matplotlib.use("Agg")
    from optuna.visualization.matplotlib import plot_hypervolume_history

    rng = np.random.default_rng(1)
    directions = ["maximize", "minimize", "minimize"]
    values = rng.random((40, 3))
    reference = [0.0, 1.0, 1.0]
    history = hypervolume_history(values, directions, reference)
    assert np.all(np.diff(history) >= 0) and history[-1] > 0
    assert history[-1] == pytest.approx(hypervolume(values, directions, reference))

    study = optuna.create_study(directions=directions)
    study.add_trials(
        optuna.trial.create_trial(values=list(v), params={}, distributions={}) for v in values
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ax = plot_hypervolume_history(study, reference)
    np.testing.assert_allclose(history, ax.lines[0].get_ydata())


def test_aggregate_seeds_hand_computed_interval():
    df = pd.DataFrame(
        {
            "group": ["a", "a", "a", "b", "c", "c", "c"],
            "acc": [0.90, 0.92, 0.94, 0.80, 0.5, NAN, 0.7],
            "mb": pd.array([10, 10, 10, 20, 30, 30, pd.NA], dtype="Int64"),
        }
    )
    out = aggregate_seeds(df, "group", ["acc", "mb"]).set_index("group")
    assert out.loc["a", "acc.mean"] == pytest.approx(0.92)
    assert out.loc["a", "acc.std"] == pytest.approx(0.02)
    assert out.loc["a", "acc.ci95"] == pytest.approx(1.96 * 0.02 / math.sqrt(3))  # 0.022632
    assert out.loc["c", "acc.count"] == 2 and out.loc["c", "acc.ci95"] == pytest.approx(0.196)
    assert out.loc["b", "acc.count"] == 1 and math.isnan(out.loc["b", "acc.ci95"])  # n = 1: unknown
    assert out.loc["a", "mb.mean"] == 10 and out.loc["a", "mb.ci95"] == 0
    assert out.loc["c", "mb.count"] == 2


@pytest.fixture
def trials():
    return pd.DataFrame(
        {
            "name": ["big", "small", "mid", "worse", "nan", "tie"],
            "memory": [400.0, 50.0, 120.0, 130.0, 10.0, 120.0],
            "accuracy": [0.95, 0.80, 0.90, 0.85, NAN, 0.90],
        },
        index=[10, 11, 12, 13, 14, 15],
    )


def test_pareto_front_rows_sorted_by_memory(trials):
    front = pareto_front(trials, {"accuracy": "maximize", "memory": "minimize"})
    assert front["name"].tolist() == ["small", "mid", "tie", "big"]
    assert front.index.tolist() == [11, 12, 15, 10]  # the rows themselves, index kept
    only_accuracy = pareto_front(trials, {"accuracy": "maximize"})
    assert only_accuracy["name"].tolist() == ["big"]


def test_best_under_budget(trials):
    assert best_under_budget(trials, "memory", 125, "accuracy")["name"] == "mid"
    assert best_under_budget(trials, "memory", 1000, "accuracy")["name"] == "big"
    assert best_under_budget(trials, "memory", 50, "accuracy")["name"] == "small"  # <= budget
    assert best_under_budget(trials, "memory", 20, "accuracy") is None  # only a NaN accuracy fits
    tied = trials.assign(memory=[400.0, 50.0, 125.0, 130.0, 10.0, 120.0])
    assert best_under_budget(tied, "memory", 200, "accuracy")["name"] == "tie"  # less memory wins


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: non_dominated_mask([[1, 2]], ["minimize", "max"]), "directions"),
        (lambda: non_dominated_mask([[1, 2]], ["minimize"]), "directions"),
        (lambda: non_dominated_mask([1, 2], MIN2), "values"),
        (lambda: hypervolume([[1, 2]], MIN2, [1, math.inf]), "reference_point"),
        (lambda: pareto_front(pd.DataFrame({"a": [1]}), {"a": "up"}), "objectives.a"),
        (lambda: pareto_front(pd.DataFrame({"a": [1]}), {"b": "minimize"}), "objectives"),
        (lambda: aggregate_seeds(pd.DataFrame({"a": [1]}), "seed_group", ["a"]), "group_col"),
        (lambda: aggregate_seeds(pd.DataFrame({"a": [1]}), "a", ["acc"]), "metric_cols"),
        (lambda: best_under_budget(pd.DataFrame({"m": [1], "a": [1]}), "m", "10", "a"), "budget"),
    ],
)
def test_bad_input_names_its_field(call, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        call()
