"""Record the search benchmark's table: real learning curves of a grid, once, as Parquet.

Every point of the grid below is trained for real (WRN-16-2 on the quickstart's CIFAR-10 subset,
4 epochs, CPU) and its validation accuracy after every epoch is kept, with the profiler's
predicted memory (`memory.predicted_total_mb`, known before training). `search_replay.py` then
replays sweeps against this table.

Exact techniques change memory, not the learning curve: gradient checkpointing recomputes the
same forward pass, and the fused BN-ReLU-conv block gives the same gradients, so a point that
differs only in those shares the curve trained once without them (its own predicted memory is
still its own). Every other technique changes the arithmetic and is trained on its own.

The table is rewritten after every training (an interrupted run continues; rerun to extend).
Trainings can be spread over processes: each of ``--shard K/N`` trains every N-th one and keeps
its rows in its own file beside the table, and every process merges all of them into the table.

    TUNE_LOWMEM_DATA=/work/shared/data nice python benchmarks/learning_curves.py [--shard 0/2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import pandas as pd
import torch

from tune_lowmem.memory.predict import predict
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

TABLE = Path(__file__).parent / "learning_curves.parquet"
TRAINED = {  # what changes the learning curve, in training order (the outer axis last filled)
    "schedule.lr_multiplier": [1.0, 0.5],
    "sparsity.density": [1.0, 0.1, 0.3],
    "precision": ["fp32", "bf16"],
    "microbatch.size": [None, 2],
}
SHARED = {  # exact: the same curve, other memory
    "checkpoint": ["none", "residual-1", "residual-2", "residual-2*"],
    "model.fused_norm": ["none", "block"],
}
GRID = {**TRAINED, **SHARED}
BASE = {
    "task": "wrn-cifar10",
    "device": "cpu",
    "model": {"depth": 16, "width": 2},
    "schedule": {"epochs": 4, "batch_size": 50},
    "data": {"train_subset": 3000, "val_size": 1000, "test_subset": 50},
    # rewiring every few updates early on, as in the quickstart (its period is searched there)
    "sparsity": {"period_multiplier": 16.0},
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


def shard_file(table: Path, shard: int) -> Path:
    return table.with_name(f"{table.stem}.shard{shard}.parquet")


def write(frame: pd.DataFrame, path: Path) -> None:
    """Atomically: a reader (or another shard's merge) never sees half a file."""
    partial = path.with_suffix(f".tmp{os.getpid()}")
    frame.to_parquet(partial, index=False)
    partial.replace(path)


def read(path: Path) -> list[dict]:
    return pd.read_parquet(path).to_dict("records") if path.exists() else []


def merge(table: Path) -> int:
    """Every shard's rows, and the table's own (an earlier run's), into the table: those of the
    grid as it is now (a value taken out of the grid takes its rows out)."""
    grid = {key(dict(zip(GRID, values))) for values in itertools.product(*GRID.values())}
    parts = [table, *table.parent.glob(f"{table.stem}.shard*.parquet")]
    frame = pd.concat([pd.read_parquet(p) for p in parts if p.exists()])
    frame = frame[frame["key"].isin(grid)].drop_duplicates("key", keep="last")
    write(frame.sort_values("key", ignore_index=True), table)
    return len(frame)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--shard", default="0/1", help="K/N: train every N-th training from K")
    args = parser.parse_args()
    shard, shards = (int(v) for v in args.shard.split("/"))
    torch.set_num_threads(1)
    space = grid_space()
    args.table.parent.mkdir(parents=True, exist_ok=True)
    own = shard_file(args.table, shard)
    rows = read(own)
    known = {row["key"]: row for row in read(args.table) + rows}
    exact = [dict(zip(SHARED, values)) for values in itertools.product(*SHARED.values())]
    trainings = list(itertools.product(*reversed(TRAINED.values())))
    for values in trainings[shard::shards]:
        trained = dict(zip(reversed(TRAINED), values))
        missing = [v for v in exact if key({**trained, **v}) not in known]
        if not missing:
            continue
        earlier = next((known[k] for v in exact if (k := key({**trained, **v})) in known), None)
        if earlier is None:  # a new training; else a new exact variant of a trained curve
            started = time.perf_counter()
            history = Trainer(space.trial_config({**trained, **exact[0]})).run()
            seconds = time.perf_counter() - started
            curve = [float(epoch["val_accuracy"]) for epoch in history]
        else:
            curve, seconds = [float(v) for v in earlier["curve"]], earlier["train_seconds"]
        for variant in missing:
            params = {**trained, **variant}
            row = {
                "key": key(params),
                **{f"config.{k}": v for k, v in params.items()},
                "curve": curve,
                "memory.predicted_total_mb": predict(space.trial_config(params)).total_mb,
                "train_seconds": seconds,
            }
            rows.append(row)
            known[row["key"]] = row
        write(pd.DataFrame(rows), own)
        done = "trained" if earlier is None else f"{len(missing)} exact variants of"
        print(
            f"{merge(args.table):3d} rows; {done} {trained}: {curve} in {seconds:.0f} s", flush=True
        )
    print(f"{merge(args.table)} rows in {args.table}")


if __name__ == "__main__":
    main()
