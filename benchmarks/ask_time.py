"""Seconds per ask of the known-memory sampler on a shipped space, memory from the profiler.

A sweep's asks run on its driver, between trials; each one predicts the memory of the
candidates it weighs (a profiler dry run per new shape key, seconds each on a CPU). This runs
`--points` asks of the space's own sampler (`sampler: known-memory` forced; the space's options only if it names it) in
a plain Optuna study, one at a time, each point told a stand-in accuracy at once (no training),
and prints the median seconds (wall clock and CPU) of the first ask and of the later ones, over `--repeats` sweeps
(each with the profiler's caches emptied first). `--summary` writes them as JSON, with the
machine's state (`machine.Watch`: a loaded machine's figures are refused unless `--allow-load`).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice python benchmarks/ask_time.py \\
        --summary benchmarks/results/ask_time.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import optuna
import torch
from machine import Watch, add_arguments, describe

from tune_lowmem.memory import predict
from tune_lowmem.search.samplers import build_sampler
from tune_lowmem.space import SearchSpace

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"


def stand_in_accuracy(params: dict) -> float:
    """An accuracy that rises with density and peaks at the base learning rate."""
    density = params.get("sparsity.density", 1.0)
    return 0.5 * density**0.3 - 0.05 * math.log(params.get("schedule.lr_multiplier", 1.0)) ** 2


def sweep(space: SearchSpace, points: int) -> list[tuple[float, float]]:
    """Wall-clock and CPU seconds of each ask of one sweep (on a shared machine the CPU
    seconds are the steadier figure; one thread)."""
    predict.dry_run.cache_clear()
    sampler = build_sampler(space)
    study = optuna.create_study(directions=list(space.objectives.values()), sampler=sampler)
    seconds = []
    for _ in range(points):
        start, cpu = time.perf_counter(), time.process_time()
        trial = study.ask()
        params = space.sample(trial)
        seconds.append((time.perf_counter() - start, time.process_time() - cpu))
        memory = sampler.memory_of(params)
        study.tell(trial, [stand_in_accuracy(params), memory])
        wall, used = seconds[-1]
        print(f"ask {len(seconds)}: {wall:.1f} s ({used:.1f} s CPU), {memory:.1f} MB", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default=str(SPACE))
    parser.add_argument("--points", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--summary", help="write the medians here as JSON")
    add_arguments(parser)
    args = parser.parse_args()
    watch = Watch.start(torch.get_num_threads(), args.allow_load or not args.summary)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loaded = SearchSpace.load(args.space)
    options = loaded.sampler_options if loaded.sampler == "known-memory" else {}
    space = SearchSpace.from_dict(
        {**loaded.to_dict(), "sampler": "known-memory", "sampler_options": options}
    )
    sweeps = [sweep(space, args.points) for _ in range(args.repeats)]
    medians = {
        f"{which}_ask_{clock}_s": round(
            statistics.median(ask[column] for s in sweeps for ask in asks(s)), 2
        )
        for which, asks in (("first", lambda s: s[:1]), ("later", lambda s: s[1:]))
        for column, clock in enumerate(("wall", "cpu"))
    }
    print(f"{space.name}: median ask seconds (wall, CPU) {medians}")
    machine = watch.stop()
    print(describe(machine))
    if args.summary:
        summary = {
            "space": Path(args.space).name,
            "points": args.points,
            "repeats": args.repeats,
            "sampler_options": space.sampler_options,
            **medians,
            "asks_wall_cpu_s": [[[round(t, 2) for t in ask] for ask in s] for s in sweeps],
            "machine": machine,
        }
        Path(args.summary).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
