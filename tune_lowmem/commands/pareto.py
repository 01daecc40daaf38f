"""`tune-lowmem pareto`: which configuration to train with, answered from the store alone.

Completed trials are averaged across seeds (mean and 95% interval, 1.96 standard errors); the
configurations non-dominated on the sweep's validation objectives are printed by memory, with
their points, trials and a command to train each, or, given a memory budget, a slowdown against
the sweep's baseline or seconds per update (`analysis.slowdown`), the single best one within
them as a TrialConfig YAML that `tune-lowmem profile` and `train` take as is. The table
fits the terminal (at most 120 characters a line; `analysis.terminal`), ``--wide`` prints the
full one.
"""

from __future__ import annotations

import argparse
import sys

from . import add_wide_argument, number, table_width


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
        help="store columns to trade off, validation metrics only (default: the sweep's own "
        "objectives); repeatable or comma-separated",
    )
    parser.add_argument(
        "--max-memory-mb",
        help="print only the most accurate configuration within this memory, as TrialConfig YAML",
    )
    parser.add_argument(
        "--max-slowdown",
        help="with or without --max-memory-mb: only configurations whose seconds per update are "
        "at most this many times the sweep's baseline's (measured, else predicted; the "
        "baseline's median over its seeds), e.g. 1.5",
    )
    parser.add_argument(
        "--max-update-s",
        help="only configurations whose seconds per update (measured, else predicted) are at "
        "most this",
    )
    parser.add_argument(
        "--min-accuracy",
        help="keep configurations whose mean validation score is at least this, in the store's "
        "units (accuracy as a fraction, e.g. 0.9; BLEU as it is)",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (with a budget: YAML), json or csv",
    )
    add_wide_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.points import NoResult
    from ..api import open_store

    max_memory_mb = number(args.max_memory_mb, "--max-memory-mb", positive=True)
    max_slowdown = number(args.max_slowdown, "--max-slowdown", positive=True)
    max_update_s = number(args.max_update_s, "--max-update-s", positive=True)
    min_accuracy = number(args.min_accuracy, "--min-accuracy")
    runs = open_store(args.store, "--store")
    runs.compact()
    try:
        print(
            runs.answer(
                sweep=args.sweep,
                task=args.task,
                objectives=args.objectives,
                max_memory_mb=max_memory_mb,
                min_accuracy=min_accuracy,
                form=args.format,
                width=table_width(args),
                store_name=args.store,
                max_slowdown=max_slowdown,
                max_update_s=max_update_s,
            ),
            end="",
        )
    except NoResult as error:
        print(f"tune-lowmem pareto: {error}", file=sys.stderr)
        return 1
    return 0
