"""`tune-lowmem pareto`: which configuration to train with, answered from the store alone.

Completed trials are averaged across seeds (mean and 95% interval, 1.96 standard errors); the
non-dominated configurations are printed by memory, or, given a memory budget, the single most
accurate one under it as a TrialConfig YAML that `tune-lowmem profile` and `train` take as is.
"""

from __future__ import annotations

import argparse
import sys

from ..validation import ConfigError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "pareto", help="the Pareto-optimal configurations of a sweep, or the best under a budget"
    )
    parser.add_argument("--store", required=True, help="the Parquet store a sweep wrote")
    parser.add_argument("--sweep", help="one sweep of the store (default: all of them)")
    parser.add_argument("--task", help="one task, when the store holds several")
    parser.add_argument(
        "--objectives",
        action="append",
        default=[],
        metavar="COLUMN:max|min,...",
        help="store columns to trade off (default: the validation score, maximised, and "
        "memory.predicted_total_mb, minimised); repeatable or comma-separated",
    )
    parser.add_argument(
        "--max-memory-mb",
        type=float,
        help="print only the most accurate configuration within this memory, as TrialConfig YAML",
    )
    parser.add_argument(
        "--min-accuracy",
        type=float,
        help="keep configurations whose mean score is at least this, in the store's units "
        "(accuracy as a fraction, e.g. 0.9; BLEU as it is)",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (with a budget: YAML), json or csv",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.points import NoResult
    from ..analysis.query import answer
    from ..preflight import store_folder
    from ..validation import is_number, optional_positive_float

    store_folder(args.store, "--store")
    optional_positive_float(args.max_memory_mb, "--max-memory-mb")
    if args.min_accuracy is not None and not is_number(args.min_accuracy):
        raise ConfigError("--min-accuracy", f"{args.min_accuracy!r} is not allowed; a finite number is required")
    try:
        print(
            answer(
                args.store,
                sweep=args.sweep,
                task=args.task,
                objectives=args.objectives,
                max_memory_mb=args.max_memory_mb,
                min_accuracy=args.min_accuracy,
                form=args.format,
            ),
            end="",
        )
    except NoResult as error:
        print(f"tune-lowmem pareto: {error}", file=sys.stderr)
        return 1
    return 0
