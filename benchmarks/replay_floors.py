"""The floors of the replay benchmark: the least a sweep can spend to reach a share of a recorded
table's best hypervolume, in epochs, in compute-seconds and in elapsed seconds.

What a floor bounds: these tables under this harness (`benchmarks.replay`): sweeps of
the table's points that train every trial to the end (no early stopping), each training taking
its recorded seconds on `workers` workers, scored by the replay's hypervolume. It says how far
any sampler could go here, not what search could do elsewhere: early stopping can go below it,
and trainings timed on other hardware may rank otherwise.

- From an oracle start (`fewest_epochs`, `fewest_seconds`): the sweep trains only trainings it
  needs, as if it knew every result before it started.
- From a blind start (`blind_start_epochs`, `blind_start_seconds`): a sweep of `workers` trials
  at once asks its first `workers` trainings before any result, so blind to accuracy, and they
  start together; from then on the floor lets it know every result (more than a sampler can),
  and ask only what it needs, each training starting when a worker is free. The start-ups are
  drawn at random, or are a sampler's own first asks (`replay.first_asks`): no replayed sweep
  that trains its trials to the end beats the floor of its own first asks
  (tests/test_replay_floors.py checks it on random tables).

A training is counted once: the points of a table that share a curve and its seconds are one
training's exact variants (the recording trains each training once), at the least memory of
them. Compute is worker-seconds until the target is reached: every training that ended, and the
part run of those still running (a blind training the floor does not need runs on).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from benchmarks import replay
from tune_lowmem import pareto

BLIND_DRAWS = 500  # start-ups drawn per table (seeded): the quartiles move by an epoch at most


# ---- in epochs: every epoch one unit, every training in step ----------------------------------


def least_memory(table: replay.Table) -> dict[tuple, float]:
    """Each training's curve -> its least memory: points of one curve (a training's exact
    variants, or trainings that end alike) count once, at their least memory."""
    trainings: dict[tuple, float] = {}
    for curve, memory in table.curves.values():
        trainings[tuple(curve)] = min(memory, trainings.get(tuple(curve), memory))
    return trainings


def trained_finals(table: replay.Table) -> list[list[float]]:
    """Each training's final (metric, memory) once (`least_memory`)."""
    return [[curve[-1], memory] for curve, memory in least_memory(table).items()]


def fewest_added(
    chosen: list[list[float]], front: list[list[float]], needed: float, reference: list[float]
) -> int:
    """The fewest `front` points that, beside `chosen`, hold the hypervolume `needed` (only
    front points need be tried: a dominated point adds no more than the point that dominates
    it)."""
    return next(
        k
        for k in range(len(front) + 1)
        if any(
            replay.hypervolume([*chosen, *added], reference) >= needed
            for added in itertools.combinations(front, k)
        )
    )


def needed_hypervolume(table: replay.Table, target: float) -> float:
    """The hypervolume that holds `target` of the table's best (a rounding's slack below)."""
    return (target - 1e-12) * table.best_hypervolume()


def table_front(finals: list[list[float]]) -> list[list[float]]:
    on_front = pareto.non_dominated_mask(finals, ["maximize", "minimize"])
    return [point for point, kept in zip(finals, on_front, strict=True) if kept]


def drawn_starts(trainings: list, workers: int) -> list[list]:
    """`BLIND_DRAWS` start-ups of `workers` distinct trainings each, drawn at random (seeded)."""
    rng = np.random.default_rng(0)
    drawn = [rng.choice(len(trainings), size=workers, replace=False) for _ in range(BLIND_DRAWS)]
    return [[trainings[i] for i in start] for start in drawn]


def fewest_epochs(table: replay.Table, targets: tuple[float, ...]) -> dict[str, int]:
    """The fewest epochs in which any sweep can reach each target: the fewest trainings whose
    final points hold that share of the best hypervolume, each trained to the end."""
    front, reference = table_front(trained_finals(table)), table.reference()
    return {
        f"{t:.2f}": table.epochs()
        * fewest_added([], front, needed_hypervolume(table, t), reference)
        for t in targets
    }


def blind_start_epochs(
    table: replay.Table,
    targets: tuple[float, ...],
    workers: int,
    starts: list[list[list[float]]] | None = None,
) -> dict[str, list[int]]:
    """Quartiles (25%, median, 75%) over start-ups of the fewest epochs to each target of a
    sweep of `workers` trials at once, every epoch one unit of time, that trains every trial to
    the end: its first `workers` trainings (`starts`: their final points, per start-up; None:
    `BLIND_DRAWS` drawn at random among the table's trainings) are asked before any result, and
    from then on it knows every accuracy and asks only the trainings it needs. The first
    informed training starts when a blind one ends, and all blind ones end together, so a sweep
    that needs k more trains (workers + k) trainings; with none needed, the last blind one ends
    when the others have trained all but an epoch each."""
    finals = trained_finals(table)
    front, epochs, reference = table_front(finals), table.epochs(), table.reference()
    starts = drawn_starts(finals, workers) if starts is None else starts
    quartiles = {}
    for t in targets:
        needed, spent = needed_hypervolume(table, t), []
        for start in starts:
            added = fewest_added(start, front, needed, reference)
            spent.append(epochs * (workers + added) - (workers - 1 if added == 0 else 0))
        quartiles[f"{t:.2f}"] = [
            int(v) for v in np.percentile(spent, [25, 50, 75], method="nearest")
        ]
    return quartiles


# ---- in seconds: each training its recorded seconds -------------------------------------------


@dataclass(frozen=True)
class Training:
    """One recorded training: its final metric, its variants' least memory, its seconds."""

    metric: float
    memory: float
    seconds: float


def trainings(table: replay.Table) -> dict[str, Training]:
    """Each point's training (points that share a curve and its seconds share one)."""
    least: dict[tuple, Training] = {}
    of_point = {}
    for point, (curve, memory) in table.curves.items():
        seconds = table.seconds_of(point)
        same = (tuple(curve), seconds)
        held = least.get(same)
        if held is None or memory < held.memory:
            least[same] = Training(curve[-1], memory, seconds)
        of_point[point] = same
    return {point: least[same] for point, same in of_point.items()}


def hypervolume_of(chosen: list[Training], reference: list[float]) -> float:
    """`replay.hypervolume` of the trainings' final points (metric, log memory), in one pass:
    the floors weigh thousands of sets."""
    floor, ceiling = reference[0], math.log10(reference[1])
    volume, best = 0.0, floor
    for training in sorted(chosen, key=lambda t: (t.memory, -t.metric)):
        if training.metric > best:
            volume += (training.metric - best) * max(0.0, ceiling - math.log10(training.memory))
            best = training.metric
    return volume


@functools.lru_cache(maxsize=1 << 16)
def makespan(jobs: tuple[float, ...], releases: tuple[float, ...]) -> float:
    """The earliest time by which `jobs` (seconds each, run whole on one worker) can all end on
    workers free from `releases` (their times): the best assignment, by search (0: no job)."""
    loads, used, best = list(releases), [0] * len(releases), [math.inf if jobs else 0.0]

    def place(i: int, end: float) -> None:
        if i == len(jobs):
            best[0] = min(best[0], end)
            return
        tried = set()
        for w, load in enumerate(loads):
            if load in tried or load + jobs[i] >= best[0]:
                continue  # a worker free at the same time is the same choice
            tried.add(load)
            loads[w], used[w] = load + jobs[i], used[w] + 1
            place(i + 1, max(end, loads[w]))
            loads[w], used[w] = load, used[w] - 1

    place(0, 0.0)
    return best[0]


def least_from(
    blind: list[Training], others: list[Training], workers: int, needed: float, reference
) -> tuple[float, float]:
    """(fewest compute-seconds, fewest elapsed seconds) to the hypervolume `needed` of a sweep
    whose `blind` trainings start together at time 0 (the workers left free from 0) and run to
    their end, and which then trains trainings of `others` it chooses: each set of them that
    could do is tried, scheduled to end soonest (`makespan`), the target reached when its last
    one and the blind ones it needs have ended. A training no shorter, of no less metric and no
    less memory than another is never needed; a set whose costs already reach the best found
    is not grown."""
    releases = tuple(sorted([t.seconds for t in blind] + [0.0] * (workers - len(blind))))
    ranked = sorted(set(others), key=lambda t: (t.seconds, -t.metric, t.memory))
    useful = [
        t
        for i, t in enumerate(ranked)
        if not any(
            o.metric >= t.metric and o.memory <= t.memory and o.seconds <= t.seconds
            for o in ranked[:i]  # an earlier one is no longer: of equals, the first is kept
        )
    ]
    ends = sorted({t.seconds for t in blind})
    best = [math.inf, math.inf]

    def cost(span: float, spent: float) -> float:
        return spent + sum(min(span, t.seconds) for t in blind)

    def visit(start: int, chosen: list[Training], spent: float) -> None:
        span = makespan(tuple(sorted((t.seconds for t in chosen), reverse=True)), releases)
        reached = next(
            (
                end
                for end in [span, *(e for e in ends if e > span)]
                if hypervolume_of([*chosen, *(t for t in blind if t.seconds <= end)], reference)
                >= needed
            ),
            None,
        )
        if reached is not None:
            best[0], best[1] = min(best[0], cost(reached, spent)), min(best[1], reached)
        for j in range(start, len(useful)):
            if hypervolume_of([*blind, *chosen, *useful[j:]], reference) < needed:
                break  # nor with fewer of them
            grown = [*chosen, useful[j]]
            span = makespan(tuple(sorted((t.seconds for t in grown), reverse=True)), releases)
            if cost(span, spent + useful[j].seconds) >= best[0] and span >= best[1]:
                continue
            visit(j + 1, grown, spent + useful[j].seconds)

    visit(0, [], 0.0)
    return best[0], best[1]


def fewest_seconds(
    table: replay.Table, targets: tuple[float, ...], workers: int
) -> dict[str, dict[str, float]]:
    """The fewest compute-seconds and elapsed seconds in which any sweep of `workers` trials at
    once can reach each target: the trainings it needs, and nothing else, from time 0."""
    every, reference = list(set(trainings(table).values())), table.reference()
    floors = {}
    for t in targets:
        compute, elapsed = least_from([], every, workers, needed_hypervolume(table, t), reference)
        floors[f"{t:.2f}"] = {"compute": compute, "elapsed": elapsed}
    return floors


def blind_start_seconds(
    table: replay.Table,
    targets: tuple[float, ...],
    workers: int,
    starts: list[list[Training]] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Quartiles (25%, median, 75%) over start-ups of the fewest compute-seconds and elapsed
    seconds to each target of a sweep of `workers` trials at once that trains every trial to
    the end and asks its first trainings blind (`starts`, per start-up; None: `BLIND_DRAWS`
    drawn at random among the table's trainings): `least_from`."""
    every, reference = sorted(set(trainings(table).values()), key=str), table.reference()
    starts = drawn_starts(every, workers) if starts is None else starts
    quartiles = {}
    for t in targets:
        needed = needed_hypervolume(table, t)
        least = [
            least_from(start, [e for e in every if e not in start], workers, needed, reference)
            for start in starts
        ]
        quartiles[f"{t:.2f}"] = {
            kind: [float(v) for v in np.percentile(values, [25, 50, 75], method="nearest")]
            for kind, values in zip(("compute", "elapsed"), zip(*least, strict=True), strict=True)
        }
    return quartiles


def first_trainings(table: replay.Table, asked: list[dict]) -> list[Training]:
    """The trainings of a sweep's first asks (`replay.first_asks`)."""
    of_point = trainings(table)
    return [of_point[replay.key(point)] for point in asked]
