"""Predicted against measured training memory over a grid of the techniques, per task.

Every point is one `TrialConfig`: precision x microbatch x checkpointing x density. `predict`
runs on fake tensors; `measure` runs one real training step on the configured device (the CPU
here, where half-precision kernels are slow, hence the small default models). Per point it prints
the activation and total figures of both and their ratio (predicted / measured), the FLOPs of
both and the measured peak of everything PyTorch held; at the end, the worst point of each ratio.

    .venv/bin/python benchmarks/profiler_accuracy.py [--depth 16 --width 2 --batch 20
                                                      --microbatch 10 --precisions fp32 bf16]
    .venv/bin/python benchmarks/profiler_accuracy.py --task dct-iwslt14 [--embed 128 --layers 3
                                                      --max-tokens 1000 --microbatch 250]

The WRN grid crosses every checkpointing strategy (the paper's four and the nested ones) with
densities 1.0 and 0.3; the DC-Transformer grid (synthetic minibatches of IWSLT'14 shape,
`memory.synthetic`) crosses none and residual-1 with densities 1.0 and 0.4, on a model of
`--layers` encoder and decoder layers (the paper's kernel sizes, from the first) with FFN
2 x `--embed`.
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from tune_lowmem.config import DynamicConvConfig, TrialConfig
from tune_lowmem.memory import MB, MemoryReport
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.tasks import get_task

PRECISIONS = ("fp32", "fp16", "bf16")
SPARSE_DENSITY = {"wrn-cifar10": 0.3, "dct-iwslt14": 0.4}
MICROBATCH = {"wrn-cifar10": 10, "dct-iwslt14": 250}  # images or tokens
HEADER = (
    "precision micro checkpoint   density |  act pred  act meas  ratio |  tot pred  tot meas  ratio"
    " |  GFLOPs pred/meas |  peak MB |     s"
)


def base(args: argparse.Namespace) -> dict:
    """The fixed part of every point: the task, its model and its minibatch."""
    if args.task == "wrn-cifar10":
        model = {"model.depth": args.depth, "model.width": args.width}
        return {**model, "schedule.batch_size": args.batch, "device": args.device}
    paper = DynamicConvConfig()
    model = {
        "embed_dim": args.embed,
        "ffn_dim": 2 * args.embed,
        "encoder_layers": args.layers,
        "decoder_layers": args.layers,
        "encoder_kernels": list(paper.encoder_kernels[: args.layers]),
        "decoder_kernels": list(paper.decoder_kernels[: args.layers]),
    }
    return {
        "task": args.task,
        "model": model,
        "schedule.max_tokens": args.max_tokens,
        "device": args.device,
    }


def describe(args: argparse.Namespace) -> str:
    if args.task == "wrn-cifar10":
        return f"WRN-{args.depth}-{args.width}, batch {args.batch}"
    source, target = args.lengths
    return (
        f"DC-Transformer {args.layers}+{args.layers} layers, embed {args.embed}, "
        f"{args.max_tokens}-token minibatches of {source}/{target}-token pairs"
    )


def grid(args: argparse.Namespace) -> list[TrialConfig]:
    microbatch = args.microbatch or MICROBATCH[args.task]
    points = itertools.product(
        args.precisions,
        (None, microbatch),
        get_task(args.task).CHECKPOINT_STRATEGIES,
        (1.0, SPARSE_DENSITY[args.task]),
    )
    return [
        TrialConfig.from_dict(
            {
                **base(args),
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
    parser.add_argument("--task", default="wrn-cifar10", choices=tuple(MICROBATCH))
    parser.add_argument("--depth", type=int, default=16, help="WRN depth")
    parser.add_argument("--width", type=int, default=2, help="WRN width")
    parser.add_argument("--batch", type=int, default=20, help="WRN images per minibatch")
    parser.add_argument("--embed", type=int, default=128, help="DC-Transformer embedding dim")
    parser.add_argument("--layers", type=int, default=3, help="DC-Transformer layers per side")
    parser.add_argument("--max-tokens", type=int, default=1000, help="DC-Transformer budget")
    parser.add_argument(
        "--lengths",
        type=int,
        nargs=2,
        default=(30, 30),
        metavar=("SOURCE", "TARGET"),
        help="DC-Transformer synthetic sentence lengths",
    )
    parser.add_argument(
        "--microbatch", type=int, help="images (WRN, default 10) or tokens (DCT, default 250)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = tuple(args.lengths) if args.task == "dct-iwslt14" else None

    print(f"{describe(args)}, on {args.device}; MB = 10^6 bytes; ratio = predicted / measured")
    print(HEADER)
    worst = {"activation": (1.0, ""), "total": (1.0, "")}
    for config in grid(args):
        started = time.perf_counter()
        predicted, measured = predict(config, lengths), measure(config, lengths)
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
