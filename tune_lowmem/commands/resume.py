"""`tune-lowmem resume NAME`: continue a stopped sweep where it stood."""

from __future__ import annotations

import argparse

from . import add_sweep_arguments, print_outcome


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "resume",
        help="continue a stopped sweep: unfinished trials run again, finished ones are kept",
    )
    parser.add_argument("name", help="the sweep's name")
    add_sweep_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..api import resume

    print_outcome(resume(args.name, store=args.store, address=args.address, mlflow=args.mlflow))
    return 0
