"""Predicted against measured training memory over a grid of the techniques, for the WRN.

Every point is one `TrialConfig`: precision x microbatch x checkpointing x density. `predict`
runs on fake tensors; `measure` runs one real training step on the configured device (the CPU
here, where fp16 convolutions are slow, hence the small default model). Per point it prints the
activation and total figures of both and their ratio (predicted / measured), the FLOPs of both
and the measured peak of everything PyTorch held; at the end, the worst point of each ratio.

    .venv/bin/python benchmarks/profiler_accuracy.py [--depth 16 --width 2 --batch 20
                                                      --microbatch 10 --precisions fp32 bf16]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB, MemoryReport, measure, predict

PRECISIONS = ("fp32", "fp16", "bf16")
CHECKPOINTS = ("none", "residual-1", "residual-2", "residual-2*")
DENSITIES = (1.0, 0.3)
HEADER = (
    "precision micro checkpoint   density |  act pred  act meas  ratio |  tot pred  tot meas  ratio"
    " |  GFLOPs pred/meas |  peak MB |     s"
)


def grid(args: argparse.Namespace) -> list[TrialConfig]:
    base = {
        "model.depth": args.depth,
        "model.width": args.width,
        "schedule.batch_size": args.batch,
        "device": args.device,
    }
    points = itertools.product(args.precisions, (None, args.microbatch), CHECKPOINTS, DENSITIES)
    return [
        TrialConfig.from_dict(
            {
                **base,
                "precision": precision,
                "microbatch.size": micro,
                "checkpoint": checkpoint,
                "sparsity.density": density,
            }
        )
        for precision, micro, checkpoint, density in points
    ]


def label(config: TrialConfig) -> str:
    micro = str(config.microbatch.size or "-")
    return f"{config.precision:9} {micro:>5} {config.checkpoint:12} {config.sparsity.density:7.1f}"


def row(predicted: MemoryReport, measured: MemoryReport) -> str:
    cells = []
    for part in ("activation_bytes", "total_bytes"):
        p, m = getattr(predicted, part), getattr(measured, part)
        cells.append(f"{p / MB:9.3f} {m / MB:9.3f} {p / m:6.3f}")
    flops = f"{predicted.flops_per_step / 1e9:8.2f} {measured.flops_per_step / 1e9:8.2f}"
    return " | ".join([*cells, flops, f"{measured.peak_bytes / MB:8.3f}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--microbatch", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(
        f"WRN-{args.depth}-{args.width}, batch {args.batch}, on {args.device}; "
        "MB = 10^6 bytes; ratio = predicted / measured"
    )
    print(HEADER)
    worst = {"activation": (1.0, ""), "total": (1.0, "")}
    for config in grid(args):
        started = time.perf_counter()
        predicted, measured = predict(config), measure(config)
        seconds = time.perf_counter() - started
        print(f"{label(config)} | {row(predicted, measured)} | {seconds:5.1f}", flush=True)
        ratios = {
            "activation": predicted.activation_bytes / measured.activation_bytes,
            "total": predicted.total_bytes / measured.total_bytes,
        }
        for part, ratio in ratios.items():
            if abs(ratio - 1) >= abs(worst[part][0] - 1):
                worst[part] = (ratio, " ".join(label(config).split()))
    for part, (ratio, where) in worst.items():
        print(f"worst {part}: ratio {ratio:.4f} ({abs(ratio - 1):.2%} off) at {where}")


if __name__ == "__main__":
    main()
