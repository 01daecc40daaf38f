"""The CIFAR-10 input pipeline's images/s against what the training step consumes, side by side.

The pipeline (cifar10.train_batches and `Minibatch.images`: shuffle, gather, pad-crop-flip
augmentation) works on the host's uint8 split; the task moves each microbatch's images to the
device and normalises them there, inside the step the second figure times. Rounds alternate the
two; figures are medians. It writes no result file; the machine's state
(`machine.Watch`) is printed with the figures.

    .venv/bin/python benchmarks/data_loading.py [--depth 16 --width 2 --batch 100 --rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from machine import Watch, describe

from tune_lowmem.config import TrialConfig
from tune_lowmem.data import cifar10
from tune_lowmem.train import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--images", type=int, default=5000, help="training images the pipeline serves"
    )
    parser.add_argument("--steps", type=int, default=3, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    watch = Watch.start(torch.get_num_threads(), allow_load=True)
    config = TrialConfig.from_dict(
        {
            "model.depth": args.depth,
            "model.width": args.width,
            "schedule.batch_size": args.batch,
            "data.train_subset": args.images,
            "data.val_size": 100,
            "data.test_subset": 100,
            "device": "cpu",
        }
    )
    trainer = Trainer(config)
    split = trainer.task.data.train
    batches = list(cifar10.train_batches(split, args.batch, 0, config.seed))[: args.steps]
    trainer.train_step(batches[0])  # warm-up
    loading, training = [], []
    for round_ in range(args.rounds):
        started = time.perf_counter()
        served = sum(
            int(batch.images().shape[0])
            for batch in cifar10.train_batches(split, args.batch, round_, config.seed)
        )
        loading.append(served / (time.perf_counter() - started))
        started = time.perf_counter()
        for batch in batches:
            trainer.train_step(batch)
        training.append(args.steps * args.batch / (time.perf_counter() - started))
    load, train = statistics.median(loading), statistics.median(training)
    print(
        f"CIFAR-10 pipeline (augment, batch {args.batch}) vs WRN-{args.depth}-{args.width} train_step, "
        f"CPU threads {torch.get_num_threads()}, median of {args.rounds} rounds"
    )
    print(f"pipeline {load:10.0f} images/s")
    print(f"training {train:10.0f} images/s")
    print(f"pipeline / training: {load / train:.1f}x (above 1: the step is never starved)")
    print(describe(watch.stop()))


if __name__ == "__main__":
    main()
