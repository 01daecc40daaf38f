"""Pure bf16's weight update: rounded to nearest, stochastically or Kahan-compensated, against
amp-bf16 and fp32.

Pure bf16 (weights, gradients and momentum in bf16, no fp32 master copy, as in the paper) loses
every update smaller than half of bf16's spacing at the weight, which is most of them once the
learning rate is cut. This trains the same short run in each mode (same seeds, same data) and
prints per epoch the train loss and validation accuracy (means over seeds), the train loss's
change over the last epoch (a stall shows as ~0), and each mode's predicted memory.

    PYTHONPATH=$PWD nice .venv/bin/python benchmarks/bf16_update.py --seeds 2 --epochs 4

`--modes` trains only the named modes (the runs are deterministic: a mode's row does not depend
on which others run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB
from tune_lowmem.memory.predict import predict
from tune_lowmem.train import train

MODES = {
    "fp32": {"precision": "fp32"},
    "amp-bf16": {"precision": "amp-bf16"},
    "bf16 nearest": {"precision": "bf16"},
    "bf16 stochastic": {"precision": "bf16", "precision_update": "stochastic"},
    "bf16 kahan": {"precision": "bf16", "precision_update": "kahan"},
}


def config(mode: dict, seed: int, args) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            **mode,
            "task": "wrn-cifar10",
            "seed": seed,
            "device": "cpu",
            "model": {"depth": args.depth, "width": args.width},
            "schedule": {"epochs": args.epochs, "batch_size": args.batch},
            "data": {"train_subset": args.train, "val_size": args.val, "test_subset": 100},
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+seeds-1")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--width", type=int, default=1)
    parser.add_argument("--train", type=int, default=2000, help="training images")
    parser.add_argument("--val", type=int, default=1000, help="validation images")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    print(
        f"WRN-{args.depth}-{args.width}, {args.train} CIFAR-10 images, batch {args.batch}, "
        f"{args.epochs} epochs (lr 0.1, x0.2 at 30/60/80% of the updates), "
        f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, "
        f"{args.val} validation images, {args.threads} thread(s); means over seeds"
    )
    print(
        f"{'mode':16} {'memory MB':>9} {'model+opt':>9}  "
        + "  ".join(f"{'ep' + str(e + 1) + ' loss/acc':>15}" for e in range(args.epochs))
        + f"  {'last-epoch dloss':>16}"
    )
    for name in args.modes:
        mode = MODES[name]
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        runs = [train(config(mode, seed, args)) for seed in seeds]
        memory = predict(config(mode, 0, args))
        cells = []
        for epoch in range(args.epochs):
            loss = statistics.fmean(r[epoch]["train_loss"] for r in runs)
            acc = statistics.fmean(r[epoch]["val_accuracy"] for r in runs)
            cells.append(f"{loss:8.4f}/{acc:6.3f}")
        last = statistics.fmean(r[-1]["train_loss"] - r[-2]["train_loss"] for r in runs)
        print(
            f"{name:16} {memory.total_mb:9.2f} {(memory.model_bytes + memory.optimizer_bytes) / MB:9.2f}  "
            + "  ".join(f"{c:>15}" for c in cells)
            + f"  {last:+16.4f}",
            flush=True,
        )
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
