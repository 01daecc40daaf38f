"""Epochs to a front: every sampler, with and without early stopping, replayed on real curves.

Each sweep runs through the project's own `ScreenedSearcher` and `MultiObjectiveASHA`
(`tune_lowmem.search.replay`: suggest, the scheduler's decision on every epoch's recorded
result, on_trial_complete), against the table `learning_curves.py` recorded. For every method
and sampler seed it counts the epochs trained until the hypervolume of the points trained to the
end reaches 90%, 95% and 99% of the whole table's; it prints the median and quartiles over the
seeds (inf: not reached within the sweep's points), all methods side by side in one run.

    PYTHONPATH=$PWD nice python benchmarks/search_replay.py [--seeds 20 --points 48 --workers 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import optuna
import pandas as pd
from learning_curves import BASE, TABLE

from tune_lowmem.search import replay
from tune_lowmem.space import SearchSpace

SAMPLERS = ("random", "tpe", "nsga2", "gp", "grid")
TARGETS = (0.90, 0.95, 0.99)


def quartiles(values: list[float]) -> str:
    q1, median, q3 = np.percentile(values, [25, 50, 75], method="nearest")
    return f"{median:5.0f} [{q1:3.0f}-{q3:3.0f}]".replace("inf", "  -")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(TABLE))
    parser.add_argument("--seeds", type=int, default=20, help="sampler seeds per method")
    parser.add_argument("--points", type=int, default=48, help="points per sweep (num_samples)")
    parser.add_argument("--workers", type=int, default=4, help="trials at once")
    parser.add_argument("--grace", type=int, default=1, help="scheduler.grace_epochs")
    parser.add_argument("--factor", type=float, default=3, help="scheduler.reduction_factor")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    table = replay.Table.from_frame(pd.read_parquet(args.table))
    best = table.best_hypervolume()
    epochs = len(next(iter(table.curves.values()))[0])
    finals = np.array(table.finals())
    print(
        f"table: {len(table.curves)} points x {epochs} epochs; final accuracy "
        f"{finals[:, 0].min():.3f}..{finals[:, 0].max():.3f}, memory "
        f"{finals[:, 1].min():.1f}..{finals[:, 1].max():.1f} MB; best hypervolume {best:.3f}; "
        f"every point trained to the end: {len(table.curves) * epochs} epochs"
    )
    print(
        f"sweeps of {args.points} points, {args.workers} trials at once, {args.seeds} sampler "
        f"seeds; epochs trained to reach x% of the best hypervolume: median [quartiles]"
    )
    print(f"{'method':22s}" + "".join(f"{f'{t:.0%}':>17s}" for t in TARGETS) + "   s/sweep")
    stopping = {"type": "mo-asha", "grace_epochs": args.grace, "reduction_factor": args.factor}
    for sampler in args.samplers.split(","):
        options = {"sampler_options": {"population_size": 12}} if sampler == "nsga2" else {}
        for scheduler in (None, stopping):
            started = time.perf_counter()
            needed: dict[float, list[float]] = {t: [] for t in TARGETS}
            for seed in range(args.seeds):
                raw = replay.replay_space(
                    table,
                    BASE,
                    sampler,
                    seed,
                    num_samples=args.points,
                    scheduler=scheduler,
                    **options,
                )
                history = replay.replay(SearchSpace.from_dict(raw), table, args.workers)
                for target in TARGETS:
                    needed[target].append(replay.epochs_to(history, target * best))
            seconds = (time.perf_counter() - started) / args.seeds
            name = sampler + (" + mo-asha" if scheduler else "")
            row = "".join(f"{quartiles(needed[t]):>17s}" for t in TARGETS)
            print(f"{name:22s}{row}   {seconds:7.1f}", flush=True)


if __name__ == "__main__":
    main()
