"""Record the search benchmark's table: real learning curves of a grid, once, as Parquet.

Every point of the grid below is trained for real (WRN-10-1 on a small CIFAR-10 subset, a few
epochs, CPU) and its validation accuracy after every epoch is kept, with the profiler's predicted
memory (`memory.predicted_total_mb`, known before training). `search_replay.py` then replays
sweeps against this table.

Gradient checkpointing recomputes the same forward pass and gives the same gradients, so it
changes memory, not the learning curve: a point that differs only in `checkpoint` shares the
curve trained once with ``checkpoint: none`` (its own predicted memory is still its own). Every
other technique changes the arithmetic and is trained on its own.

The table is rewritten after every training (an interrupted run continues; rerun to extend).

    TUNE_LOWMEM_DATA=/work/shared/data nice python benchmarks/learning_curves.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import pandas as pd
import torch

from tune_lowmem.memory.predict import predict
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

TABLE = Path(__file__).parent / "learning_curves.parquet"
TRAINED = {  # what changes the learning curve, in training order (the outer axis last filled)
    "schedule.lr_multiplier": [1.0, 0.25, 4.0],
    "sparsity.density": [1.0, 0.1, 0.2, 0.5],
    "precision": ["fp32", "bf16"],
    "microbatch.size": [None, 10],
}
SHARED = {
    "checkpoint": ["none", "residual-1", "residual-2", "residual-2*"]
}  # same curve, other memory
GRID = {**TRAINED, **SHARED}
BASE = {
    "task": "wrn-cifar10",
    "device": "cpu",
    "model": {"depth": 10, "width": 1},
    "schedule": {"epochs": 4, "batch_size": 50},
    "data": {"train_subset": 600, "val_size": 300, "test_subset": 50},
}


def grid_space(grid: dict = GRID, base: dict = BASE) -> SearchSpace:
    """The table's grid as a search space of choice params (what the replay searches)."""
    return SearchSpace.from_dict(
        {
            "name": "learning-curves",
            "base": base,
            "params": {name: {"type": "choice", "values": v} for name, v in grid.items()},
            "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
            "num_samples": 1,
        }
    )


def key(params: dict) -> str:
    return json.dumps({name: params[name] for name in GRID}, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    args = parser.parse_args()
    torch.set_num_threads(1)
    space = grid_space()
    rows = pd.read_parquet(args.table).to_dict("records") if args.table.exists() else []
    done = {row["key"] for row in rows}
    args.table.parent.mkdir(parents=True, exist_ok=True)
    for values in itertools.product(*reversed(TRAINED.values())):
        trained = dict(zip(reversed(TRAINED), values))
        if key({**trained, "checkpoint": "none"}) in done:
            continue
        started = time.perf_counter()
        history = Trainer(space.trial_config({**trained, "checkpoint": "none"})).run()
        seconds = time.perf_counter() - started
        curve = [float(epoch["val_accuracy"]) for epoch in history]
        for checkpoint in SHARED["checkpoint"]:
            params = {**trained, "checkpoint": checkpoint}
            rows.append(
                {
                    "key": key(params),
                    **{f"config.{k}": v for k, v in params.items()},
                    "curve": curve,
                    "memory.predicted_total_mb": predict(space.trial_config(params)).total_mb,
                    "train_seconds": seconds,
                }
            )
        partial = args.table.with_suffix(".tmp")
        pd.DataFrame(rows).to_parquet(partial, index=False)
        partial.replace(args.table)
        print(
            f"{len(rows) // len(SHARED['checkpoint']):3d} trained {trained}: {curve} in {seconds:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
