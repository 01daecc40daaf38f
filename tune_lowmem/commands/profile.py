"""`tune-lowmem profile`: a configuration's training memory, predicted (and measured), against
the same model's baseline without any technique."""

from __future__ import annotations

import argparse
import json

from ..memory.report import MB, PARTS
from . import add_config_arguments, config_from_arguments
from .threads import add_threads_argument, apply_threads


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "profile", help="model / optimizer / activation memory and FLOPs of one configuration"
    )
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--measure", action="store_true", help="also run one real training step and measure it"
    )
    parser.add_argument(
        "--lengths",
        type=int,
        nargs=2,
        metavar=("SOURCE", "TARGET"),
        help="for tasks with sequences (the translation task): tokens of each synthetic "
        "sentence pair (default 30 30, a typical IWSLT'14 batch)",
    )
    add_threads_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..memory import baseline_config
    from ..memory.measure import measure
    from ..memory.predict import heap_object_bytes, predict
    from ..memory.stored import stored
    from ..memory.synthetic import synthetic_task
    from ..preflight import cuda_present
    from ..validation import positive_int

    config = config_from_arguments(args)
    if args.measure:
        cuda_present(config.device, "device (with --measure)")
    lengths = (
        None if args.lengths is None else tuple(positive_int(n, "--lengths") for n in args.lengths)
    )
    task = synthetic_task(config, torch.device("cpu"), lengths)  # refuses what it cannot profile
    if args.measure:
        apply_threads(args)
    ways = {"predicted": predict} | ({"measured": measure} if args.measure else {})
    reports = {name: way(config, lengths) for name, way in ways.items()}
    baselines = {name: way(baseline_config(config), lengths) for name, way in ways.items()}
    held = stored(config, lengths) if config.sparsity.enabled else None
    objects = heap_object_bytes(config, lengths)
    if args.json:
        result = {
            name: {**report.to_dict(), "ratio_to_baseline": report.ratio_to(baselines[name])}
            for name, report in reports.items()
        }
        if held is not None:
            result["predicted"]["predicted_stored_total_mb"] = held.total_mb
        result["predicted"]["predicted_heap_objects_mb"] = objects / MB
        result["baseline"] = {name: report.to_dict() for name, report in baselines.items()}
        print(json.dumps(result))
        return 0
    print(describe(config, task))
    print(table(reports, baselines, held, objects))
    if held is not None:
        print(SPARSE_NOTE)
    if args.measure:
        print(peak_note(config, held or reports["predicted"], reports["measured"], task, objects))
    return 0


def describe(config, task) -> str:
    """One line naming what was profiled; `task` is the synthetic task it was profiled on."""
    micro = config.microbatch
    micro_text = "none" if micro.size is None else f"{micro.size} ({micro.mode})"
    return (
        f"{config.task} {task.describe()}, {config.precision}, "
        f"checkpoint {config.checkpoint}, microbatch {micro_text}, "
        f"density {config.sparsity.density:g}"
        " (MB = 10^6 bytes)"
    )


ROWS = (
    "model MB",
    "optimizer MB",
    "activation MB",
    "total MB",
    "tensor storage MB",
    "GFLOPs per step",
    "baseline total MB",
    "baseline / this",
    "peak MB, all held",
)


def column(report, baseline, storage: int | None) -> list[str]:
    """One report's cells, in the order of ROWS (the peak of all PyTorch held is measured only;
    `storage`, the tensor storage of the stored total, predicted only)."""
    values, source = report.to_dict(), report.source
    peak = values.get(f"{source}_peak_mb")
    return [
        *(f"{values[f'{source}_{part}_mb']:.3f}" for part in PARTS),
        "-" if storage is None else f"{storage / MB:.3f}",
        f"{values['flops_per_step'] / 1e9:.2f}",
        f"{baseline.total_mb:.3f}",
        f"{report.ratio_to(baseline):.2f}",
        "-" if peak is None else f"{peak:.3f}",
    ]


STORED_ROW = "total MB, stored"
ACCOUNTED_ROW = "total MB, accounted"
SPARSE_NOTE = (
    "sparse weights: 'accounted' counts them as CSR (what a sparse kernel would keep; the "
    "figure searched and stored), 'stored' as the masked step holds them (dense, with bool masks)"
)


def table(reports: dict, baselines: dict, held=None, objects: int = 0) -> str:
    """The ROWS for each report; with `held` (the predicted stored figure of a sparse config),
    the total is labelled accounted and the stored total follows it (measured: see the peak).
    `objects`: the predicted heap objects in the predicted total (`predict.heap_object_bytes`):
    the tensor storage row is the stored total without them."""
    storage = {"predicted": (held or reports["predicted"]).total_bytes - objects}
    columns = {
        name: column(report, baselines[name], storage.get(name)) for name, report in reports.items()
    }
    rows = list(enumerate(ROWS))
    if held is not None:
        at = ROWS.index("total MB")
        stored_cells = [f"{held.total_mb:.3f}"] + ["-"] * (len(columns) - 1)
        rows[at] = (at, ACCOUNTED_ROW)
        rows.insert(at + 1, (STORED_ROW, STORED_ROW))
    lines = [f"{'':22}" + "".join(f"{name:>12}" for name in columns)]
    for i, label in rows:
        cells = stored_cells if i == STORED_ROW else [c[i] for c in columns.values()]
        lines.append(f"{label:22}" + "".join(f"{cell:>12}" for cell in cells))
    return "\n".join(lines)


def peak_note(config, predicted, measured, task, objects: int) -> str:
    """What the measured peak holds beyond the predicted (stored) total: the input minibatch,
    which neither part counts, and the rest, said by device."""
    from ..tasks.base import batch_tensors

    batch = sum(t.nbytes for t in batch_tensors(next(iter(task.train_batches(0)))))
    rest = measured.peak_bytes - predicted.total_bytes - batch
    where = (
        "cuDNN/cuBLAS workspaces and the allocator's 512-byte rounding, not predicted"
        if config.device != "cpu"
        else "the rest of the CPU heap; kernels' workspace is freed inside each operator and "
        "never sampled"
    )
    return (
        f"measured peak {measured.peak_bytes / MB:.3f} MB = predicted stored total "
        f"{predicted.total_bytes / MB:.3f} MB (of which {objects / MB:.3f} MB the CPU heap's "
        f"tensor and autograd objects) + the input minibatch {batch / MB:.3f} MB "
        f"{'+' if rest >= 0 else '-'} {abs(rest) / MB:.3f} MB: {where}"
    )
