"""Search efficiency on a tabular benchmark: every point of a small grid trained once for real,
then Optuna's samplers searching that table (the objective is a look-up).

The table (WRN-10-1, a 1,000-image CIFAR-10 subset validated on 500 more, 2 epochs, precision x microbatch x
checkpointing x density = 24 points, with memory.predict's total) is cached as JSON, row by
row (an interrupted run continues where it stopped); reruns skip training unless --retrain. Each sampler runs N trials for several seeds; the figures are
the hypervolume of the points found so far (the same reference point for all), the median
trials to reach 95% of the full grid's hypervolume, and, with a memory budget (default: the
median predicted memory), the share of proposed points the constraint answered without
training (as search.ScreenedSearcher does: an over-budget point costs no training).

    .venv/bin/python benchmarks/search_efficiency.py [--trials 24 --seeds 5 --retrain]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import numpy as np
import optuna

from tune_lowmem.memory.predict import predict
from tune_lowmem.pareto import hypervolume, hypervolume_history
from tune_lowmem.search.samplers import build_sampler
from tune_lowmem.search.searcher import CONSTRAINT
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

RESULTS = Path(__file__).parent / "results"
GRID = {
    "precision": ["fp32", "bf16"],
    "microbatch.size": [None, 10],
    "checkpoint": ["none", "residual-2*"],
    "sparsity.density": [0.2, 0.5, 1.0],
}
OBJECTIVES = {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"}
SAMPLERS = ("nsga2", "tpe", "gp", "random")


def space(
    sampler: str = "random", seed: int = 0, budget: float | None = None, grid: dict = GRID
) -> SearchSpace:
    return SearchSpace.from_dict(
        {
            "name": "search-efficiency",
            "base": {
                "task": "wrn-cifar10",
                "device": "cpu",
                "model": {"depth": 10, "width": 1},
                **{name: values[0] for name, values in grid.items() if len(values) == 1},
                "schedule": {"epochs": 2, "batch_size": 100},
                "data": {"train_subset": 1000, "val_size": 500, "test_subset": 100},
            },
            "params": {
                name: {"type": "choice", "values": values}
                for name, values in grid.items()
                if len(values) > 1
            },
            "objectives": OBJECTIVES,
            "memory_budget_mb": budget,
            "sampler": sampler,
            "sampler_options": {"population_size": 6} if sampler == "nsga2" else {},
            "sampler_seed": seed,
            "num_samples": 24,
        }
    )


def key(params: dict) -> str:
    return json.dumps({name: params[name] for name in GRID}, sort_keys=True)


def build_table(path: Path, retrain: bool) -> list[dict]:
    """Train every grid point once; points already in the cached table are not trained again."""
    rows = [] if retrain or not path.exists() else json.loads(path.read_text())
    done = {key(row["params"]) for row in rows}
    grid_space = space()
    path.parent.mkdir(parents=True, exist_ok=True)
    for values in itertools.product(*GRID.values()):
        params = dict(zip(GRID, values))
        if key(params) in done:
            continue
        config = grid_space.trial_config(params)
        started = time.perf_counter()
        history = Trainer(config).run()
        seconds = time.perf_counter() - started
        rows.append(
            {
                "params": params,
                "val_accuracy": history[-1]["val_accuracy"],
                "memory.predicted_total_mb": predict(config).total_mb,
                "train_seconds": seconds,
            }
        )
        path.write_text(json.dumps(rows, indent=1))
        print(
            f"trained {params}: acc {rows[-1]['val_accuracy']:.3f}, "
            f"{rows[-1]['memory.predicted_total_mb']:.1f} MB, {seconds:.1f} s",
            flush=True,
        )
    return rows


def trained_grid(rows: list[dict]) -> tuple[dict, list[dict]]:
    """--trained-only: the largest complete sub-grid among the first rows trained, and its rows."""
    for end in range(len(rows), 0, -1):
        grid = {
            name: [v for v in values if any(r["params"][name] == v for r in rows[:end])]
            for name, values in GRID.items()
        }
        if len(rows[:end]) == len(list(itertools.product(*grid.values()))):
            return grid, rows[:end]
    raise SystemExit("--trained-only: the cached table holds no trained point yet")


def run_study(
    table: dict[str, dict], sampler: str, seed: int, trials: int, budget: float | None, grid: dict
):
    """One search over the table; returns the values told (None for screened points) in order."""
    search_space = space(sampler, seed, budget, grid)
    study = optuna.create_study(
        directions=list(OBJECTIVES.values()), sampler=build_sampler(search_space)
    )
    told = []
    for _ in range(trials):
        trial = study.ask()
        row = table[key({**search_space.base, **search_space.sample(trial)})]
        values = [row["val_accuracy"], row["memory.predicted_total_mb"]]
        if budget is not None:
            trial.set_constraint(CONSTRAINT, row["memory.predicted_total_mb"] - budget)
        if (
            budget is not None and row["memory.predicted_total_mb"] > budget
        ):  # screened: never trained
            study.tell(trial, [0.0, row["memory.predicted_total_mb"]])
            told.append(None)
        else:
            study.tell(trial, values)
            told.append(values)
    return told


def trials_to(history: np.ndarray, target: float) -> float:
    reached = np.flatnonzero(history >= target)
    return float(reached[0] + 1) if len(reached) else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24, help="trials per study")
    parser.add_argument("--seeds", type=int, default=5, help="sampler seeds per sampler")
    parser.add_argument(
        "--budget-mb", type=float, default=None, help="default: median predicted memory"
    )
    parser.add_argument(
        "--retrain", action="store_true", help="train the grid again, ignoring the cache"
    )
    parser.add_argument(
        "--trained-only",
        action="store_true",
        help="train nothing; search the complete sub-grid the cached table already holds",
    )
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = RESULTS / "search_efficiency_table.json"
    if args.trained_only:
        grid, rows = trained_grid(json.loads(path.read_text()))
    else:
        rows, grid = build_table(path, args.retrain), GRID
    table = {key(row["params"]): row for row in rows}
    directions = list(OBJECTIVES.values())
    memory = [row["memory.predicted_total_mb"] for row in rows]
    reference = [0.0, 1.1 * max(memory)]
    budget = args.budget_mb if args.budget_mb is not None else statistics.median(memory)
    points = [[row["val_accuracy"], row["memory.predicted_total_mb"]] for row in rows]
    grid_hv = hypervolume(points, directions, reference)
    feasible_hv = hypervolume([p for p in points if p[1] <= budget], directions, reference)
    print(
        f"grid {' x '.join(str(len(v)) for v in grid.values())}: {len(rows)} points, {sum(r['train_seconds'] for r in rows):.0f} s of training in all; "
        f"accuracy {min(r['val_accuracy'] for r in rows):.3f}..{max(r['val_accuracy'] for r in rows):.3f}, "
        f"memory {min(memory):.1f}..{max(memory):.1f} MB; reference point {reference}"
    )
    print(
        f"grid hypervolume {grid_hv:.3f}; within budget {budget:.1f} MB: {feasible_hv:.3f} "
        f"({sum(m <= budget for m in memory)} of {len(rows)} points); the grid trains all {len(rows)} to get it"
    )
    checkpoints = [n for n in (4, 8, 12, 16, 20, 24, 32, 48) if n <= args.trials]
    print(
        f"\nno budget: median over {args.seeds} sampler seeds of hypervolume / grid hypervolume after n trials"
    )
    print(
        f"{'sampler':8s} "
        + " ".join(f"{'n=' + str(n):>6s}" for n in checkpoints)
        + "  trials to 95% (median)"
    )
    for sampler in SAMPLERS:
        histories = [
            hypervolume_history(
                run_study(table, sampler, seed, args.trials, None, grid), directions, reference
            )
            for seed in range(args.seeds)
        ]
        shares = [statistics.median(h[n - 1] / grid_hv for h in histories) for n in checkpoints]
        needed = statistics.median(trials_to(h, 0.95 * grid_hv) for h in histories)
        print(f"{sampler:8s} " + " ".join(f"{s:6.3f}" for s in shares) + f"  {needed:g}")
    print(
        f"\nbudget {budget:.1f} MB: share of proposed points screened (never trained), median over seeds;"
        f" trainings to reach 95% of the within-budget grid hypervolume"
    )
    for sampler in SAMPLERS:
        screened, trainings = [], []
        for seed in range(args.seeds):
            told = run_study(table, sampler, seed, args.trials, budget, grid)
            screened.append(sum(v is None for v in told) / len(told))
            trained = [v for v in told if v is not None]
            history = (
                hypervolume_history(trained, directions, reference) if trained else np.zeros(1)
            )
            trainings.append(trials_to(history, 0.95 * feasible_hv))
        print(
            f"{sampler:8s} screened {statistics.median(screened):5.1%}  "
            f"trainings to 95%: {statistics.median(trainings):g}"
        )


if __name__ == "__main__":
    main()
