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

    .venv/bin/python benchmarks/profiler_accuracy.py --techniques | --calibrate

`--techniques` replaces the grid by `TECHNIQUE_POINTS`: small configurations of both tasks with
the newer techniques (fused units, the fused step, bf16 momentum, Kahan and stochastic rounding,
small microbatches), none of them `CALIBRATION`, the point `memory.predict.HEAP_BYTES_PER_STORAGE`
was calibrated on; `--calibrate` (alone) prints that constant again from a real step of
`CALIBRATION`.

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

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB, MemoryReport
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.models.dynamicconv import DynamicConvConfig
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


WRN = {"model.depth": 10, "model.width": 1, "schedule.batch_size": 32, "device": "cpu"}
DCT = {
    "task": "dct-iwslt14",
    "model": {
        "embed_dim": 32,
        "ffn_dim": 64,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_kernels": [3],
        "decoder_kernels": [3],
    },
    "schedule.max_tokens": 300,
    "device": "cpu",
}
CALIBRATION = {**WRN, "precision": "bf16", "model.fused_norm": "unit", "microbatch.size": 8}
TECHNIQUE_POINTS = [
    {**WRN, "precision": "bf16", "model.fused_norm": "block", "microbatch.size": 8},
    {**WRN, "precision": "bf16", "checkpoint": "residual-2*-nested", "microbatch.size": 8},
    {
        **WRN,
        "precision": "bf16",
        "fused_step": "heavy-ball",
        "model.fused_norm": "block",
        "microbatch.size": 4,
        "sparsity.density": 0.3,
    },
    {
        **WRN,
        "fused_step": "exact",
        "momentum_dtype": "bf16",
        "model.fused_norm": "unit",
        "microbatch.size": 4,
        "schedule.batch_size": 16,
    },
    {
        **WRN,
        "precision": "bf16",
        "precision_update": "kahan",
        "microbatch.size": 2,
        "schedule.batch_size": 16,
    },
    {**WRN, "precision": "bf16", "precision_update": "stochastic", "model.fused_norm": "unit"},
    {**WRN, "precision": "bf16", "fused_step": "exact", "model.fused_norm": "unit"},
    {**DCT, "precision": "bf16", "microbatch.size": 100},
    {**DCT, "checkpoint": "residual-1", "microbatch.size": 150, "sparsity.density": 0.4},
]


def short(flat: dict) -> str:
    """A `TECHNIQUE_POINTS` point's settings beyond its task's base (`WRN` or `DCT`)."""
    base = DCT if flat.get("task") == DCT["task"] else WRN
    return " ".join(f"{k}={v}" for k, v in flat.items() if base.get(k) != v)


def calibrate() -> None:
    """The CPU heap's bytes per live storage that make `CALIBRATION`'s prediction equal a real
    step's measured activation part (bisection on `StorageTracker.peak`'s `heap_bytes`)."""
    from tune_lowmem.memory import accounting
    from tune_lowmem.memory import predict as predict_module

    trackers = []

    class Recording(predict_module.StorageTracker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trackers.append(self)

    config = TrialConfig.from_dict(CALIBRATION)
    predict_module.StorageTracker = Recording
    run = predict_module.dry_run(predict_module.shape_key(config))
    predict_module.StorageTracker = Recording.__base__
    model, optimizer = run.model, run.optimizer
    held = [*model.parameters(), *model.buffers(), *accounting.state_tensors(optimizer)]
    held += [p.grad for p in model.parameters() if p.grad is not None]
    target = measure(config).activation_bytes
    low, high = 0, 1 << 16
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if trackers[0].peak(held, middle) <= target else (low, middle)
    storage = trackers[0].peak(held)
    print(
        f"calibration {short(CALIBRATION)}: measured activation {target / MB:.4f} MB, predicted "
        f"storage {storage / MB:.4f} MB: {low} bytes per live storage"
    )


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
    parser.add_argument("--techniques", action="store_true", help="TECHNIQUE_POINTS, both tasks")
    parser.add_argument("--calibrate", action="store_true", help="print HEAP_BYTES_PER_STORAGE")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.calibrate:
        calibrate()
        return
    if args.techniques:
        points = [TrialConfig.from_dict(flat) for flat in TECHNIQUE_POINTS]
        names = [short(flat) for flat in TECHNIQUE_POINTS]
        print("WRN-10-1 and a 1+1-layer DC-Transformer (embed 32, 300 tokens of 30/30-token pairs)")
    else:
        points = grid(args)
        names = [label(config) for config in points]
        print(describe(args))
    print(f"on {args.device}; MB = 10^6 bytes; ratio = predicted / measured")
    width = max(map(len, names))
    print(f"{'point':{width}}" + HEADER[HEADER.index(" |") :] if args.techniques else HEADER)
    worst = {"activation": (1.0, ""), "total": (1.0, "")}
    for config, name in zip(points, names, strict=True):
        lengths = tuple(args.lengths) if config.task == "dct-iwslt14" else None
        started = time.perf_counter()
        predicted, measured = predict(config, lengths), measure(config, lengths)
        seconds = time.perf_counter() - started
        print(f"{name:{width}} | {row(predicted, measured)} | {seconds:5.1f}", flush=True)
        ratios = {
            "activation": predicted.activation_bytes / measured.activation_bytes,
            "total": predicted.total_bytes / measured.total_bytes,
        }
        for part, ratio in ratios.items():
            if abs(ratio - 1) >= abs(worst[part][0] - 1):
                worst[part] = (ratio, " ".join(name.split()))
    for part, (ratio, where) in worst.items():
        print(f"worst {part}: ratio {ratio:.4f} ({abs(ratio - 1):.2%} off) at {where}")


if __name__ == "__main__":
    main()
