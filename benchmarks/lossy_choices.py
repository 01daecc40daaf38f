"""The accuracy cost of the lossy optimizer-state choices, against the exact optimizer.

WRN (`--task wrn`, SGD): `fused_step: heavy-ball` (momentum without Nesterov, so that microbatch
gradients can go straight into the momentum buffer) and `momentum_dtype: bf16` (momentum stored
in bf16) against `fused_step: exact`, which gives torch.optim.SGD's results
(tests/test_fused_step.py); a WRN on a CIFAR-10 subset, fp32, a few epochs.
DC-Transformer (`--task dct`, fairseq's Adam): `adam_state: bf16` and `adam_state: int8` (8-bit
blockwise moments) against the exact Adam (`param`); a small DC-Transformer on an IWSLT'14
subset, fp32, a fixed number of updates, then the validation loss.
Each seed trains every variant on the same data; it prints the last validation figures per
variant (means over seeds) and the mean per-seed difference to the reference with its 95%
t-interval.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/lossy_choices.py --seeds 3 --epochs 3
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/lossy_choices.py \\
        --task dct --seeds 3 --updates 250
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import torch
from fidelity import interval

from tune_lowmem.config import TrialConfig
from tune_lowmem.train import Trainer, train

VARIANTS = {
    "wrn": {
        "exact (reference)": {"fused_step": "exact"},
        "heavy-ball": {"fused_step": "heavy-ball"},
        "bf16 momentum": {"fused_step": "exact", "momentum_dtype": "bf16"},
    },
    "dct": {
        "exact Adam (reference)": {},
        "bf16 moments": {"adam_state": "bf16"},
        "int8 moments": {"adam_state": "int8"},
    },
}
METRICS = {"wrn": ("val_accuracy", "val_loss"), "dct": ("val_loss", "val_nll_loss")}


def wrn_config(args, seed: int) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "seed": seed,
            "device": "cpu",
            "model": {"depth": args.depth, "width": args.width},
            "schedule": {"epochs": args.epochs, "batch_size": args.batch},
            "data": {"train_subset": args.train, "val_size": args.val, "test_subset": 100},
        }
    )


def dct_config(args, seed: int) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "task": "dct-iwslt14",
            "seed": seed,
            "device": "cpu",
            "model": {
                "embed_dim": 64,
                "ffn_dim": 128,
                "heads": 4,
                "encoder_layers": 2,
                "decoder_layers": 2,
                "encoder_kernels": [3, 7],
                "decoder_kernels": [3, 7],
            },
            "schedule": {
                "max_updates": args.updates,
                "warmup_updates": args.updates // 5,
                "lr": 5e-3,
                "max_tokens": args.tokens,
            },
            "data": {"train_subset": args.train, "val_size": args.val, "test_subset": 10},
        }
    )


def dct_run(config: TrialConfig) -> dict[str, float]:
    """`max_updates` updates, then the validation loss (the run's own end would also decode)."""
    trainer = Trainer(config)
    batches = itertools.chain.from_iterable(map(trainer.task.train_batches, itertools.count()))
    for _ in range(config.schedule.max_updates):
        trainer.train_step(next(batches))
    return trainer.task.evaluate(trainer.model.eval(), final=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=tuple(VARIANTS), default="wrn")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="wrn")
    parser.add_argument("--depth", type=int, default=10, help="wrn")
    parser.add_argument("--width", type=int, default=1, help="wrn")
    parser.add_argument("--batch", type=int, default=50, help="wrn images per minibatch")
    parser.add_argument("--updates", type=int, default=250, help="dct")
    parser.add_argument("--tokens", type=int, default=600, help="dct tokens per minibatch")
    parser.add_argument("--train", type=int, help="training images or sentence pairs")
    parser.add_argument("--val", type=int, help="validation images or sentence pairs")
    args = parser.parse_args()
    dct = args.task == "dct"
    args.train = args.train or (4000 if dct else 1500)
    args.val = args.val or (300 if dct else 500)
    torch.set_num_threads(1)
    started = time.perf_counter()
    variants, names = VARIANTS[args.task], METRICS[args.task]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for seed in range(args.seeds):
        for name, variant in variants.items():
            if dct:
                last = dct_run(dct_config(args, seed).replace(**variant))
            else:
                last = train(wrn_config(args, seed).replace(**variant))[-1]
            results[name].append(tuple(last[metric] for metric in names))
            print(f"seed {seed} {name}: {results[name][-1]}", flush=True)
    seconds = time.perf_counter() - started
    if dct:
        print(
            f"DC-Transformer 2+2 layers, embed 64, {args.train} pairs, {args.updates} updates of "
            f"{args.tokens} tokens, {args.seeds} seeds, {seconds:.0f} s; validation ({args.val})"
        )
    else:
        print(
            f"WRN-{args.depth}-{args.width}, {args.train} images, {args.epochs} epochs, batch "
            f"{args.batch}, {args.seeds} seeds, {seconds:.0f} s; last epoch"
        )
    short = [name.removeprefix("val_").replace("_", " ") for name in names]
    print(
        f"{'variant':28} {short[0]:>8} {short[1]:>8}   d {short[0]} [95% CI]"
        f"{'':10}d {short[1]} [95% CI]"
    )
    reference = next(iter(results.values()))
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
