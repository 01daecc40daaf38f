"""Record the search benchmark's tables: real learning curves of a grid, once, as Parquet.

Every point of a grid (`RECORDINGS`, by name: WRN-16-2 on the quickstart's CIFAR-10 subset,
4 epochs; torchvision's ResNet-18 on 600 images, 3 epochs; or its ViT on 1,500 images, 4 epochs;
CPU) is trained for real and its validation accuracy after every epoch is kept, with the
profiler's predicted memory (`memory.predicted_total_mb`, known before training).
`search_replay.py` then replays sweeps against a table.

Exact techniques change memory, not the learning curve: gradient checkpointing recomputes the
same forward pass, the fused BN-ReLU-conv block gives the same gradients and the fused step
applies the same SGD update inside the backward pass, so a point that differs only in those
shares the curve trained once without them (its own predicted memory is still its own). Every
other technique changes the arithmetic and is trained on its own.

The table is rewritten after every training (an interrupted run continues; rerun to extend).
Trainings can be spread over processes: each of ``--shard K/N`` trains every N-th one and keeps
its rows in its own file beside the table, and every process merges all of them into the table.

    TUNE_LOWMEM_DATA=/work/shared/data nice python benchmarks/learning_curves.py \
        [--grid wrn16] [--shard 0/2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from tune_lowmem.memory.predict import predict
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Recording:
    """One table: what is trained (changes the learning curve, in training order: the last axis
    is filled last), what is exact (the same curve, other memory), the base config, the file."""

    trained: dict[str, list]
    shared: dict[str, list]
    base: dict
    table: Path
    # choices whose values are listed in order beyond numbers (a replay's space declares them)
    ordered: tuple[str, ...] = ("microbatch.size",)  # null, the whole batch, first

    @property
    def grid(self) -> dict[str, list]:
        return {**self.trained, **self.shared}


RECORDINGS = {
    "wrn16": Recording(
        trained={
            "schedule.lr_multiplier": [1.0, 0.5],
            "sparsity.density": [1.0, 0.1, 0.3],
            "precision": ["fp32", "bf16"],
            "microbatch.size": [None, 2],
        },
        shared={
            "checkpoint": ["none", "residual-1", "residual-2", "residual-2*"],
            "model.fused_norm": ["none", "block"],
        },
        base={
            "task": "wrn-cifar10",
            "device": "cpu",
            "model": {"depth": 16, "width": 2},
            "schedule": {"epochs": 4, "batch_size": 50},
            "data": {"train_subset": 3000, "val_size": 1000, "test_subset": 50},
            # rewiring every few updates early on, as in the quickstart (its period is searched)
            "sparsity": {"period_multiplier": 16.0},
        },
        table=HERE / "learning_curves.parquet",
    ),
    # torchvision's ResNet-18 (tv-cifar10): a model the project did not write. Its lr is the
    # recipe's x0.2 or x0.05: at the recipe's 0.1 with batch 50 the first updates blow it up
    # and it stays at chance. bf16 is left out: one epoch of 300 images took over 10 minutes on a
    # CPU core. The fused step (the same SGD update inside backward) and checkpointing are exact.
    "resnet18": Recording(
        trained={
            "schedule.lr_multiplier": [0.2, 0.05],
            "microbatch.size": [None, 2],
            "sparsity.density": [1.0, 0.1, 0.3],
        },
        shared={
            "checkpoint": ["none", "blocks-1", "blocks-2"],
            "fused_step": ["none", "exact"],
        },
        base={
            "task": "tv-cifar10",
            "device": "cpu",
            "model": {"arch": "resnet18"},
            "schedule": {"epochs": 3, "batch_size": 50},
            "data": {"train_subset": 600, "val_size": 500, "test_subset": 50},
            "sparsity": {"period_multiplier": 16.0},
        },
        table=HERE / "learning_curves_resnet18.parquet",
    ),
    # the third table, fixed before it was recorded and recorded before any setting was chosen
    # on it: torchvision's VisionTransformer (vit_tiny, 4x4 patches) on 1,500 CIFAR-10 images,
    # 4 epochs. 48 trainings, twice the first table's: where a model of accuracy has most to
    # save. Its layer norms make microbatching exact up to float reassociation, yet microbatch
    # stays a trained axis, as the techniques declare it (batch-norm networks train otherwise).
    "vit": Recording(
        trained={
            "schedule.lr_multiplier": [1.0, 0.5, 0.25],
            "sparsity.density": [1.0, 0.5, 0.2, 0.1],
            "precision": ["fp32", "bf16"],
            "microbatch.size": [None, 5],
        },
        shared={
            "checkpoint": ["none", "blocks-1", "blocks-2"],
            "fused_step": ["none", "exact"],
        },
        base={
            "task": "tv-cifar10",
            "device": "cpu",
            "model": {"arch": "vit_tiny"},
            "schedule": {"epochs": 4, "batch_size": 50},
            "data": {"train_subset": 1500, "val_size": 500, "test_subset": 50},
            "sparsity": {"period_multiplier": 16.0},
        },
        table=HERE / "learning_curves_vit.parquet",
    ),
}
DEFAULT = "wrn16"
# the WRN-16-2 table's, as earlier scripts import them
TABLE, BASE, GRID = (
    RECORDINGS[DEFAULT].table,
    RECORDINGS[DEFAULT].base,
    RECORDINGS[DEFAULT].grid,
)


def grid_space(recording: Recording) -> SearchSpace:
    """The table's grid as a search space of choice params (what the replay searches)."""
    return SearchSpace.from_dict(
        {
            "name": "learning-curves",
            "base": recording.base,
            "params": {name: {"type": "choice", "values": v} for name, v in recording.grid.items()},
            "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
            "num_samples": 1,
        }
    )


def key(params: dict, grid: dict) -> str:
    return json.dumps({name: params[name] for name in grid}, sort_keys=True)


def shard_file(table: Path, shard: int) -> Path:
    return table.with_name(f"{table.stem}.shard{shard}.parquet")


def write(frame: pd.DataFrame, path: Path) -> None:
    """Atomically: a reader (or another shard's merge) never sees half a file."""
    partial = path.with_suffix(f".tmp{os.getpid()}")
    frame.to_parquet(partial, index=False)
    partial.replace(path)


def read(path: Path) -> list[dict]:
    return pd.read_parquet(path).to_dict("records") if path.exists() else []


def merge(table: Path, grid: dict) -> int:
    """Every shard's rows, and the table's own (an earlier run's), into the table: those of the
    grid as it is now (a value taken out of the grid takes its rows out)."""
    points = {key(dict(zip(grid, values)), grid) for values in itertools.product(*grid.values())}
    parts = [table, *table.parent.glob(f"{table.stem}.shard*.parquet")]
    frame = pd.concat([pd.read_parquet(p) for p in parts if p.exists()])
    frame = frame[frame["key"].isin(points)].drop_duplicates("key", keep="last")
    write(frame.sort_values("key", ignore_index=True), table)
    return len(frame)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=RECORDINGS, default=DEFAULT, help="which table")
    parser.add_argument("--table", type=Path, help="the file (default: the grid's own)")
    parser.add_argument("--shard", default="0/1", help="K/N: train every N-th training from K")
    args = parser.parse_args()
    recording = RECORDINGS[args.grid]
    table, grid = args.table or recording.table, recording.grid
    shard, shards = (int(v) for v in args.shard.split("/"))
    torch.set_num_threads(1)
    space = grid_space(recording)
    table.parent.mkdir(parents=True, exist_ok=True)
    own = shard_file(table, shard)
    rows = read(own)
    known = {row["key"]: row for row in read(table) + rows}
    shared, trained_axes = recording.shared, recording.trained
    exact = [dict(zip(shared, values)) for values in itertools.product(*shared.values())]
    trainings = list(itertools.product(*reversed(trained_axes.values())))
    for values in trainings[shard::shards]:
        trained = dict(zip(reversed(trained_axes), values))
        missing = [v for v in exact if key({**trained, **v}, grid) not in known]
        if not missing:
            continue
        earlier = next(
            (known[k] for v in exact if (k := key({**trained, **v}, grid)) in known), None
        )
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
                "key": key(params, grid),
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
            f"{merge(table, grid):3d} rows; {done} {trained}: {curve} in {seconds:.0f} s",
            flush=True,
        )
    print(f"{merge(table, grid)} rows in {table}")


if __name__ == "__main__":
    main()
