"""The search benchmark's floor: the fewest epochs in which any sweep can reach a share of a
recorded table's best hypervolume (`benchmarks/search_replay.py`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tune_lowmem.search import replay

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture
def search_replay(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports learning_curves beside it
    return importlib.import_module("search_replay")


def test_the_floor_counts_front_trainings_once_each(search_replay):
    curves = {  # 3 epochs each; "exact" is "big"'s training at more memory (the same curve)
        "big": ([0.5, 0.8, 0.9], 10.0),
        "exact": ([0.5, 0.8, 0.9], 20.0),
        "small": ([0.3, 0.4, 0.5], 1.0),
        "dominated": ([0.2, 0.3, 0.4], 5.0),
        "floor": ([0.1, 0.1, 0.1], 30.0),  # the reference's accuracy
    }
    table = replay.Table(curves, {"name": list(curves)})
    best, reference = table.best_hypervolume(), table.reference()
    big_alone = replay.hypervolume([[0.9, 10.0]], reference) / best
    assert replay.hypervolume([[0.9, 10.0], [0.5, 1.0]], reference) == pytest.approx(best)
    above = (big_alone + 1) / 2
    assert big_alone < 0.9 and above - big_alone > 0.01  # targets apart at their two decimals
    fewest = search_replay.fewest_epochs(table, (big_alone - 1e-9, above, 1.0))
    # one training reaches what "big" holds alone; more needs "small" beside it, never the
    # dominated point nor "big"'s exact variant
    assert fewest == {f"{big_alone - 1e-9:.2f}": 3, f"{above:.2f}": 6, "1.00": 6}


def test_a_blind_start_costs_its_whole_schedule(search_replay):
    curves = {  # "dominated" is the reference's accuracy: it holds nothing
        "big": ([0.5, 0.8, 0.9], 10.0),
        "small": ([0.3, 0.4, 0.5], 1.0),
        "dominated": ([0.2, 0.3, 0.4], 5.0),
    }
    table = replay.Table(curves, {"name": list(curves)})
    small_alone = replay.hypervolume([[0.5, 1.0]], table.reference()) / table.best_hypervolume()
    big_alone = replay.hypervolume([[0.9, 10.0]], table.reference()) / table.best_hypervolume()
    assert big_alone < small_alone < 1 - 0.01
    blind = search_replay.blind_start_epochs(table, (small_alone - 1e-9, 1.0), workers=2)
    # 2 of the 3 trainings blind, each start-up 1 in 3: with both front points the last ends
    # after 3 + 2 epochs; with one of them one more training is needed, 3 x 3 epochs. "small"
    # alone is in 2 start-ups of 3.
    assert blind == {f"{small_alone - 1e-9:.2f}": [5, 5, 9], "1.00": [5, 9, 9]}
    # a sampler's own start-ups: both front points, or one of them and the dominated one
    both, one = [[0.9, 10.0], [0.5, 1.0]], [[0.9, 10.0], [0.4, 5.0]]
    own = search_replay.blind_start_epochs(table, (1.0,), 2, starts=[both, one, one])
    assert own == {"1.00": [5, 9, 9]}
