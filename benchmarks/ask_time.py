"""Seconds per ask of the known-memory sampler on a shipped space, memory from the profiler.

A sweep's asks run on its driver, between trials; each one predicts the memory of the
candidates it weighs (a profiler dry run per new shape key, seconds each on a CPU). This runs
`--points` asks of the space's own sampler (`sampler: known-memory` forced; the space's options only if it names it) in
a plain Optuna study, one at a time, each point told a stand-in accuracy at once (no training),
and prints the median seconds (wall clock and CPU) of the first ask and of the later ones, over `--repeats` sweeps
(each with the profiler's caches emptied first). With `--told N ...`, then `--scale-asks` asks
after N random points of the space told at once, for each N: a long sweep's ask, whose models
learn from a bounded part of its trials (`KnownMemorySampler.modelled`), with the CPU its
memory predictions took apart (`Timed`). `--summary` writes them as JSON, with the machine's
state (`machine.Watch`: a loaded machine's figures are refused unless `--allow-load`).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice python benchmarks/ask_time.py \\
        --told 100 500 1000 2000 --summary benchmarks/results/ask_time.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import optuna
import torch
from machine import Watch, add_arguments, describe

from tune_lowmem.memory import predict
from tune_lowmem.search.samplers import build_sampler
from tune_lowmem.search.samplers.known_memory import KnownMemorySampler, RandomDraw
from tune_lowmem.space import SearchSpace

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"


def stand_in_accuracy(params: dict) -> float:
    """An accuracy that rises with density and peaks at the base learning rate."""
    density = params.get("sparsity.density", 1.0)
    return 0.5 * density**0.3 - 0.05 * math.log(params.get("schedule.lr_multiplier", 1.0)) ** 2


class Timed:
    """A sampler's memory function that sums the CPU seconds of its calls: the profiler's dry
    runs (a new shape's), apart from the sampler's own work."""

    def __init__(self, memory):
        self.memory, self.cpu_s = memory, 0.0

    def __call__(self, params):
        start = time.process_time()
        try:
            return self.memory(params)
        finally:
            self.cpu_s += time.process_time() - start


def new_study(space: SearchSpace) -> tuple[KnownMemorySampler, optuna.Study]:
    sampler = build_sampler(space)
    sampler.memory = Timed(sampler.memory)
    return sampler, optuna.create_study(directions=list(space.objectives.values()), sampler=sampler)


def sweep(space: SearchSpace, points: int) -> list[tuple[float, float, float]]:
    """`timed_asks` of one sweep from its start."""
    predict.dry_run.cache_clear()
    return timed_asks(space, *new_study(space), points)


def at_scale(space: SearchSpace, told: int, points: int) -> list[tuple[float, float, float]]:
    """`timed_asks` after `told` points drawn at random (seeded) and told at once: the history a
    long sweep's ask weighs. Their memory is the profiler's (a dry run per new shape, cached
    across counts)."""
    sampler, study = new_study(space)
    draw, history = RandomDraw(np.random.default_rng(told)), []
    while len(history) < told:
        params = space.sample(draw)
        memory = sampler.memory_of(params)
        if memory is not None:
            history.append(
                optuna.trial.create_trial(
                    params=params,
                    distributions={name: sampler.distributions[name] for name in params},
                    values=[stand_in_accuracy(params), memory],
                )
            )
    study.add_trials(history)
    return timed_asks(space, sampler, study, points)


def timed_asks(
    space: SearchSpace, sampler: KnownMemorySampler, study: optuna.Study, points: int
) -> list[tuple[float, float, float]]:
    """Wall-clock seconds, CPU seconds and the CPU seconds of its memory predictions of each of
    `points` asks of `study`, each point told at once (on a shared machine the CPU seconds are
    the steadier figure; one thread)."""
    seconds = []
    for _ in range(points):
        start, cpu, predicting = time.perf_counter(), time.process_time(), sampler.memory.cpu_s
        trial = study.ask()
        params = space.sample(trial)
        used = time.process_time() - cpu
        seconds.append((time.perf_counter() - start, used, sampler.memory.cpu_s - predicting))
        memory = sampler.memory_of(params)
        study.tell(trial, [stand_in_accuracy(params), memory])
        print(
            f"ask {len(seconds)} after {len(study.trials) - 1} told: {seconds[-1][0]:.2f} s, "
            f"{used:.2f} s CPU ({seconds[-1][2]:.2f} s predicting memory), {memory:.1f} MB",
            flush=True,
        )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default=str(SPACE))
    parser.add_argument("--points", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--told",
        type=int,
        nargs="*",
        default=[],
        help="after the sweeps: --scale-asks asks after this many points told, for each count",
    )
    parser.add_argument("--scale-asks", type=int, default=5)
    parser.add_argument("--summary", help="write the medians here as JSON")
    add_arguments(parser)
    args = parser.parse_args()
    watch = Watch.start(torch.get_num_threads(), args.allow_load or not args.summary)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loaded = SearchSpace.load(args.space)
    options = loaded.sampler.options if loaded.sampler.name == "known-memory" else {}
    space = SearchSpace.from_dict(
        {**loaded.to_dict(), "sampler": "known-memory", "sampler_options": options}
    )
    sweeps = [sweep(space, args.points) for _ in range(args.repeats)]
    medians = {
        f"{which}_ask_{clock}_s": round(
            statistics.median(ask[column] for s in sweeps for ask in part(s)), 2
        )
        for which, part in (("first", lambda s: s[:1]), ("later", lambda s: s[1:]))
        for column, clock in enumerate(("wall", "cpu"))
    }
    print(f"{space.name}: median ask seconds (wall, CPU) {medians}")
    scale = []
    for told in args.told:
        seconds = at_scale(space, told, args.scale_asks)
        scale.append(
            {
                "told": told,
                **{
                    f"median_{what}_s": round(statistics.median(s[c] for s in seconds), 3)
                    for c, what in enumerate(("ask_wall", "ask_cpu", "predicting_cpu"))
                },
                "asks_wall_cpu_predicting_s": [[round(t, 3) for t in ask] for ask in seconds],
            }
        )
        print(
            f"after {told} told: median ask {scale[-1]['median_ask_cpu_s']} s CPU "
            f"({scale[-1]['median_predicting_cpu_s']} s predicting memory)"
        )
    machine = watch.stop()
    print(describe(machine))
    if args.summary:
        summary = {
            "space": Path(args.space).name,
            "points": args.points,
            "repeats": args.repeats,
            "sampler_options": dict(space.sampler.options),
            **medians,
            "asks_wall_cpu_predicting_s": [
                [[round(t, 2) for t in ask] for ask in s] for s in sweeps
            ],
            "scale_asks": args.scale_asks,
            "at_scale": scale,
            "machine": machine,
        }
        Path(args.summary).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
