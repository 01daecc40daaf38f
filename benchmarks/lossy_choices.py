"""The accuracy cost of the lossy optimizer-state choices, against the exact fused step.

`fused_step: heavy-ball` (momentum without Nesterov, so that microbatch gradients can go straight
into the momentum buffer) and `momentum_dtype: bf16` (momentum stored in bf16) change the
optimizer; `fused_step: exact` gives torch.optim.SGD's results (tests/test_fused_step.py), so it
is the reference. Each seed trains every variant on the same data (WRN on a CIFAR-10 subset, fp32,
a few epochs); it prints the last epoch's validation accuracy and loss per variant (means over
seeds) and the mean per-seed difference to the reference with its 95% t-interval.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/lossy_choices.py --seeds 3 --epochs 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from fidelity import interval

from tune_lowmem.config import TrialConfig
from tune_lowmem.train import train

VARIANTS = {
    "exact (reference)": {"fused_step": "exact"},
    "heavy-ball": {"fused_step": "heavy-ball"},
    "bf16 momentum": {"fused_step": "exact", "momentum_dtype": "bf16"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--width", type=int, default=1)
    parser.add_argument("--train", type=int, default=1500, help="training images")
    parser.add_argument("--val", type=int, default=500, help="validation images")
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for seed in range(args.seeds):
        for name, variant in VARIANTS.items():
            config = TrialConfig.from_dict(
                {
                    **variant,
                    "seed": seed,
                    "device": "cpu",
                    "model": {"depth": args.depth, "width": args.width},
                    "schedule": {"epochs": args.epochs, "batch_size": args.batch},
                    "data": {"train_subset": args.train, "val_size": args.val, "test_subset": 100},
                }
            )
            last = train(config)[-1]
            results[name].append((last["val_accuracy"], last["val_loss"]))
            print(f"seed {seed} {name}: {results[name][-1]}", flush=True)
    print(
        f"WRN-{args.depth}-{args.width}, {args.train} images, {args.epochs} epochs, batch "
        f"{args.batch}, {args.seeds} seeds, {time.perf_counter() - started:.0f} s; last epoch"
    )
    print(
        f"{'variant':28} {'val acc':>8} {'val loss':>8}   d acc [95% CI]          d loss [95% CI]"
    )
    reference = results["exact (reference)"]
    for name, rows in results.items():
        line = f"{name:28} {statistics.fmean(r[0] for r in rows):8.4f} "
        line += f"{statistics.fmean(r[1] for r in rows):8.4f}"
        if rows is not reference:
            for part in (0, 1):
                mean, low, high = interval([r[part] - e[part] for r, e in zip(rows, reference)])
                line += f"   {mean:+.4f} [{low:+.4f}, {high:+.4f}]"
        print(line)


if __name__ == "__main__":
    main()
