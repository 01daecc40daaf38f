"""The memory ladder of WideResNet-28-2: the paper's combinations, then the new techniques.

Each rung is one `TrialConfig` (batch 100, the paper's, unless --batch); it prints the profiler's prediction
(`memory.predict`, fake tensors) and, with --measure, a real step's measurement (`memory.measure`,
the storage tracker on the CPU heap) for the rungs named there (real steps of WRN-28-2 at batch
128 take minutes on a loaded CPU with the tracker on, fp16 ones far more). Per rung: activation
and total MB, the ratio to the fp32 baseline, and the FLOPs per step as a ratio to the baseline's
(the recomputation's cost; a measured step time on this shared CPU would be noise).

    .venv/bin/python benchmarks/memory_ladder.py [--batch 100] [--measure 0 1 5]
"""

from __future__ import annotations

import argparse
import time

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB, MemoryReport, accounting
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import dry_run, planned_nonzeros, predict, shape_key

PAPER = {  # the paper's ratios to its 404.8 MB baseline (Sohoni et al. 2019, Table 3 and text)
    "fp16 + residual-2*": "9.5x",
    "+ microbatch 10": "33.2x",
    "+ 30% nonzeros": "60.7x",
}
FP16_CHAIN = [
    ("fp16 + residual-2*", {"precision": "fp16", "checkpoint": "residual-2*"}),
    ("+ microbatch 10", {"microbatch.size": 10}),
    ("+ 30% nonzeros", {"sparsity.density": 0.3}),
]
BLOCK = {"model.fused_norm": "block"}


def rungs() -> list[tuple[str, dict]]:
    """(label, flat config) of each rung, each on top of the one before within its chain."""
    ladder = [
        ("baseline fp32", {}),
        ("fp32 residual-2*", {"checkpoint": "residual-2*"}),
        ("fp32 residual-2*-nested", {"checkpoint": "residual-2*-nested"}),
        (
            "fp32 residual-2* + fused unit",
            {"checkpoint": "residual-2*", "model.fused_norm": "unit"},
        ),
        ("fp32 residual-2* + fused block", {"checkpoint": "residual-2*", **BLOCK}),
    ]
    for new in (False, True):
        flat: dict = {}
        for label, step in FP16_CHAIN:
            flat = {**flat, **step, **(BLOCK if new else {})}
            ladder.append((f"{label}{' + fused block' if new else ''}", dict(flat)))
    return ladder


def accounted(config: TrialConfig, predicted: MemoryReport) -> list[tuple[str, MemoryReport]]:
    """The last rung again with what a dry run does not show, each added to the one before:
    sparse weights stored as the smaller of CSR and bitmap, and `techniques.fused_step.FusedSGD`
    (momentum without Nesterov, so that microbatches accumulate into the momentum buffer: no
    gradient buffer, only the gradient being applied, at most the largest parameter's)."""
    model = dry_run(shape_key(config)).model
    nonzeros = planned_nonzeros(model, config)
    best = accounting.model_bytes(model, nonzeros, "best")
    largest = max(accounting.value_bytes(p, nonzeros.get(n)) for n, p in model.named_parameters())
    state = accounting.gradient_bytes(model, nonzeros)  # one momentum buffer shaped like them
    bitmap = MemoryReport(
        best,
        predicted.optimizer_bytes,
        predicted.activation_bytes,
        predicted.flops_per_step,
        "predicted",
    )
    fused = MemoryReport(
        best, state + largest, predicted.activation_bytes, predicted.flops_per_step, "predicted"
    )
    return [
        ("+ bitmap where smaller (accounted)", bitmap),
        ("+ fused SGD, no Nesterov (acc.)", fused),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--measure", type=int, nargs="*", default=[], help="rung indices")
    args = parser.parse_args()
    base = {"model.depth": 28, "model.width": 2, "schedule.batch_size": args.batch, "device": "cpu"}
    print(f"WRN-28-2, batch {args.batch}; MB = 10**6 bytes; ratios to the fp32 baseline's total")
    print(
        f"{'#':>2} {'rung':40} {'act pred':>9} {'tot pred':>9} {'ratio':>7} {'paper':>6} "
        f"{'FLOPs':>6} | {'act meas':>9} {'tot meas':>9} {'pred/meas':>9} {'s':>5}"
    )
    baseline = final = None
    ladder = rungs()
    for index, (label, flat) in enumerate(ladder):
        if args.batch % flat.get("microbatch.size", 1):
            print(f"{index:>2} {label:40} (microbatch 10 does not divide batch {args.batch})")
            continue
        config = TrialConfig.from_dict({**base, **flat})
        predicted = predict(config)
        baseline = baseline or predicted
        line = (
            f"{index:>2} {label:40} {predicted.activation_bytes / MB:9.2f} "
            f"{predicted.total_bytes / MB:9.2f} {predicted.ratio_to(baseline):6.2f}x "
            f"{PAPER.get(label, ''):>6} {predicted.flops_per_step / baseline.flops_per_step:5.2f}x"
        )
        if index in args.measure:
            started = time.perf_counter()
            measured = measure(config)
            line += (
                f" | {measured.activation_bytes / MB:9.2f} {measured.total_bytes / MB:9.2f} "
                f"{predicted.total_bytes / measured.total_bytes:9.4f} "
                f"{time.perf_counter() - started:5.0f}"
            )
        print(line, flush=True)
        final = (config, predicted) if index == len(ladder) - 1 else None
    for label, report in accounted(*final) if final else ():
        print(
            f"   {label:40} {report.activation_bytes / MB:9.2f} {report.total_bytes / MB:9.2f} "
            f"{report.ratio_to(baseline):6.2f}x"
        )


if __name__ == "__main__":
    main()
