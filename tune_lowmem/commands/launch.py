"""`tune-lowmem launch SPACE.yaml`: run a sweep to the end, printing its progress and front."""

from __future__ import annotations

import argparse

from . import add_sweep_arguments, count, print_outcome


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("launch", help="run a search space's sweep on a Ray cluster")
    parser.add_argument("space", help="a search-space YAML file (see search_spaces/)")
    parser.add_argument("--name", help="the sweep's name in the store (default: the space's name)")
    parser.add_argument(
        "--num-samples", help="points to evaluate (default: the space's num_samples)"
    )
    add_sweep_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    num_samples = count(args.num_samples, "--num-samples")  # before Ray is even imported
    from ..api import launch

    print_outcome(
        launch(
            args.space,
            name=args.name,
            store=args.store,
            address=args.address,
            num_samples=num_samples,
            mlflow=args.mlflow,
        )
    )
    return 0
