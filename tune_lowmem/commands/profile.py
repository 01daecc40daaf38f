"""`tune-lowmem profile`: a configuration's training memory, predicted (and measured), against
the same model's baseline without any technique."""

from __future__ import annotations

import argparse
import json

from . import add_config_arguments, config_from_arguments


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "profile", help="model / optimizer / activation memory and FLOPs of one configuration"
    )
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--measure", action="store_true", help="also run one real training step and measure it"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..memory import baseline_config, measure, predict

    config = config_from_arguments(args)
    ways = {"predicted": predict} | ({"measured": measure} if args.measure else {})
    reports = {name: way(config) for name, way in ways.items()}
    baselines = {name: way(baseline_config(config)) for name, way in ways.items()}
    if args.json:
        result = {
            name: {**report.to_dict(), "ratio_to_baseline": report.ratio_to(baselines[name])}
            for name, report in reports.items()
        }
        result["baseline"] = {name: report.to_dict() for name, report in baselines.items()}
        print(json.dumps(result))
        return 0
    print(describe(config))
    print(table(reports, baselines))
    return 0


def describe(config) -> str:
    """One line naming what was profiled."""
    model, micro = config.model, config.microbatch
    name = (
        f"WRN-{model.depth}-{model.width}" if config.task == "wrn-cifar10" else type(model).__name__
    )
    micro_text = "none" if micro.size is None else f"{micro.size} ({micro.mode})"
    return (
        f"{config.task} {name}, batch {config.schedule.batch_size}, {config.precision}, "
        f"checkpoint {config.checkpoint}, microbatch {micro_text}, "
        f"density {config.sparsity.density:g}"
        " (MB = 10^6 bytes)"
    )


ROWS = (
    "model MB",
    "optimizer MB",
    "activation MB",
    "total MB",
    "GFLOPs per step",
    "baseline total MB",
    "baseline / this",
    "peak MB, all held",
)


def column(report, baseline) -> list[str]:
    """One report's cells, in the order of ROWS (the peak of all PyTorch held is measured only)."""
    values = report.to_dict()
    return [
        *(
            f"{values[key]:.3f}"
            for key in ("model_mb", "optimizer_mb", "activation_mb", "total_mb")
        ),
        f"{values['flops_per_step'] / 1e9:.2f}",
        f"{baseline.to_dict()['total_mb']:.3f}",
        f"{report.ratio_to(baseline):.2f}",
        f"{values['peak_mb']:.3f}" if "peak_mb" in values else "-",
    ]


def table(reports: dict, baselines: dict) -> str:
    columns = {name: column(report, baselines[name]) for name, report in reports.items()}
    lines = [f"{'':22}" + "".join(f"{name:>12}" for name in columns)]
    for i, label in enumerate(ROWS):
        lines.append(f"{label:22}" + "".join(f"{cells[i]:>12}" for cells in columns.values()))
    return "\n".join(lines)
