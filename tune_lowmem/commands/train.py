"""`tune-lowmem train`: one trial, without Ray, printing each epoch's metrics."""

from __future__ import annotations

import argparse
import json

from . import add_config_arguments, config_from_arguments
from .threads import add_threads_argument, apply_threads


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train one configuration without Ray")
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object per epoch")
    add_threads_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..preflight import cuda_present
    from ..train import train

    config = config_from_arguments(args)
    cuda_present(config.device)
    apply_threads(args)

    def show(metrics: dict, _trainer) -> None:
        if args.json:
            print(json.dumps(metrics), flush=True)
        else:
            print(
                "  ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in metrics.items()
                ),
                flush=True,
            )

    train(config, on_epoch=show)
    return 0
