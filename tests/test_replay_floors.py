"""The search benchmark's floors (`benchmarks/replay_floors.py`): the least a sweep can spend to
reach a share of a recorded table's best hypervolume, in epochs and in seconds, worked by hand
and against an exhaustive search; and no replayed sweep beats the floor of its own first asks."""

from __future__ import annotations

import importlib
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import replay
from tune_lowmem.space import SearchSpace

from .test_search import TINY_BASE

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture
def floors(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("replay_floors")


def test_the_floor_counts_front_trainings_once_each(floors):
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
    fewest = floors.fewest_epochs(table, (big_alone - 1e-9, above, 1.0))
    # one training reaches what "big" holds alone; more needs "small" beside it, never the
    # dominated point nor "big"'s exact variant
    assert fewest == {f"{big_alone - 1e-9:.2f}": 3, f"{above:.2f}": 6, "1.00": 6}


def test_a_blind_start_costs_its_whole_schedule(floors):
    curves = {  # "dominated" is the reference's accuracy: it holds nothing
        "big": ([0.5, 0.8, 0.9], 10.0),
        "small": ([0.3, 0.4, 0.5], 1.0),
        "dominated": ([0.2, 0.3, 0.4], 5.0),
    }
    table = replay.Table(curves, {"name": list(curves)})
    small_alone = replay.hypervolume([[0.5, 1.0]], table.reference()) / table.best_hypervolume()
    big_alone = replay.hypervolume([[0.9, 10.0]], table.reference()) / table.best_hypervolume()
    assert big_alone < small_alone < 1 - 0.01
    blind = floors.blind_start_epochs(table, (small_alone - 1e-9, 1.0), workers=2)
    # 2 of the 3 trainings blind, each start-up 1 in 3: with both front points the last ends
    # after 3 + 2 epochs; with one of them one more training is needed, 3 x 3 epochs. "small"
    # alone is in 2 start-ups of 3.
    assert blind == {f"{small_alone - 1e-9:.2f}": [5, 5, 9], "1.00": [5, 9, 9]}
    # a sampler's own start-ups: both front points, or one of them and the dominated one
    both, one = [[0.9, 10.0], [0.5, 1.0]], [[0.9, 10.0], [0.4, 5.0]]
    own = floors.blind_start_epochs(table, (1.0,), 2, starts=[both, one, one])
    assert own == {"1.00": [5, 9, 9]}


def timed(curves: dict, seconds: dict) -> replay.Table:
    """A table of one param, "name", each point's curve, memory and seconds."""
    keyed = {replay.key({"name": n}): curve for n, curve in curves.items()}
    timing = {replay.key({"name": n}): s for n, s in seconds.items()}
    return replay.Table(keyed, {"name": list(curves)}, timing)


TIMED_CURVES = {  # "dominated" is the reference's accuracy: it holds nothing
    "big": ([0.5, 0.8, 0.9], 10.0),
    "small": ([0.3, 0.4, 0.5], 1.0),
    "dominated": ([0.2, 0.3, 0.4], 5.0),
}


def test_the_oracle_floor_trains_what_it_needs_in_seconds(floors):
    """Both front trainings are needed for the whole front: 40 s of compute, 30 s elapsed on two
    workers (side by side), 40 s on one."""
    table = timed(TIMED_CURVES, {"big": 30.0, "small": 10.0, "dominated": 5.0})
    assert floors.fewest_seconds(table, (1.0,), 2) == {"1.00": {"compute": 40.0, "elapsed": 30.0}}
    assert floors.fewest_seconds(table, (1.0,), 1) == {"1.00": {"compute": 40.0, "elapsed": 40.0}}


def test_a_blind_start_holds_its_workers_until_its_trainings_end(floors):
    """Two workers. Blind {dominated, small}: "big" starts when "dominated" ends (5 s) and ends
    at 35 s. Blind {big, dominated}: "small" starts at 5 s and ends at 15 s, before "big" at 30
    s. Blind {big, small}: 30 s, with 40 s of compute."""
    table = timed(TIMED_CURVES, {"big": 30.0, "small": 10.0, "dominated": 5.0})
    of = floors.trainings(table)
    big, small, dominated = (of[replay.key({"name": n})] for n in ("big", "small", "dominated"))
    starts = [[dominated, small], [big, dominated], [big, small]]
    got = floors.blind_start_seconds(table, (1.0,), 2, starts)
    assert got == {"1.00": {"compute": [40.0, 45.0, 45.0], "elapsed": [30.0, 30.0, 35.0]}}


def exhaustive(floors, blind, others, workers, needed, reference):
    """`least_from` by trying every set of `others` on every assignment to the workers."""
    releases = sorted([t.seconds for t in blind] + [0.0] * (workers - len(blind)))
    best = [math.inf, math.inf]
    for k in range(len(others) + 1):
        for chosen in itertools.combinations(others, k):
            for workers_of in itertools.product(range(len(releases)), repeat=k):
                loads = list(releases)
                ends = []
                for training, w in zip(chosen, workers_of):
                    loads[w] += training.seconds
                    ends.append(loads[w])
                span = max(ends, default=0.0)
                times = [span, *(t.seconds for t in blind if t.seconds > span)]
                for end in sorted(times):
                    done = [*chosen, *(t for t in blind if t.seconds <= end)]
                    if floors.hypervolume_of(done, reference) >= needed:
                        compute = sum(t.seconds for t in chosen) + sum(
                            min(end, t.seconds) for t in blind
                        )
                        best = [min(best[0], compute), min(best[1], end)]
                        break
    return tuple(best)


def random_table(rng: np.random.Generator, trainings: int) -> replay.Table:
    """`trainings` lr multipliers, each trained once (a random 3-epoch curve and seconds), its
    checkpointed variant at a random share of its memory: a full grid as `learning_curves.py`
    records one."""
    rows = []
    for i in range(trainings):
        curve = np.cumsum(rng.uniform(0.0, 0.3, 3)).round(3).tolist()
        memory, seconds = float(rng.uniform(1, 100)), float(rng.integers(10, 100))
        for checkpoint, share in (("none", 1.0), ("residual-1", float(rng.uniform(0.5, 1.5)))):
            rows.append(
                {
                    "config.schedule.lr_multiplier": 0.5 + 0.25 * i,
                    "config.checkpoint": checkpoint,
                    "curve": curve,
                    "memory.predicted_total_mb": memory * share,
                    "train_seconds": seconds,
                }
            )
    return replay.Table.from_frame(pd.DataFrame(rows))


def test_least_from_is_an_exhaustive_searchs_least(floors):
    rng = np.random.default_rng(0)
    for case in range(12):
        table = random_table(rng, int(rng.integers(3, 7)))
        every = sorted(set(floors.trainings(table).values()), key=str)
        workers = int(rng.integers(1, 4))
        blind = [every[i] for i in rng.choice(len(every), size=case % (workers + 1), replace=False)]
        others = [t for t in every if t not in blind]
        for target in (0.6, 0.9, 1.0):
            needed = floors.needed_hypervolume(table, target)
            args = (blind, others, workers, needed, table.reference())
            assert floors.least_from(*args) == pytest.approx(exhaustive(floors, *args))


def test_the_fast_hypervolume_is_the_replays(floors):
    rng = np.random.default_rng(1)
    table = random_table(rng, 6)
    every = list(set(floors.trainings(table).values()))
    for k in range(len(every) + 1):
        chosen = every[:k]
        assert floors.hypervolume_of(chosen, table.reference()) == pytest.approx(
            replay.hypervolume([[t.metric, t.memory] for t in chosen], table.reference()), abs=1e-12
        )


@pytest.mark.parametrize("case", range(8))
def test_no_replayed_sweep_beats_the_floor_of_its_own_first_asks(floors, case):
    """Random tables, samplers, exactness and workers: a replayed sweep's compute and elapsed
    seconds to each target are at least the floor from its own first asks, which is at least
    the oracle's."""
    rng = np.random.default_rng(100 + case)
    table = random_table(rng, int(rng.integers(4, 8)))
    workers = 1 + case % 3
    sampler = ("random", "tpe")[case % 2]
    raw = replay.replay_space(
        table, TINY_BASE, sampler, case, exactness=case % 4 < 2, num_samples=3 * len(table.curves)
    )
    space = SearchSpace.from_dict(raw)
    history = replay.replay(space, table, workers)
    start = floors.first_trainings(table, replay.first_asks(space, table, workers))
    for target in (0.5, 0.8, 0.95, 1.0):
        own = floors.blind_start_seconds(table, (target,), workers, [start])[f"{target:.2f}"]
        oracle = floors.fewest_seconds(table, (target,), workers)[f"{target:.2f}"]
        ended = replay.reached(history, target * table.best_hypervolume())
        for kind in ("compute", "elapsed"):
            assert oracle[kind] <= own[kind][1] + 1e-9
            if ended is not None:
                assert getattr(ended, kind) >= own[kind][1] - 1e-9, (target, kind)
