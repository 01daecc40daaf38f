"""`tune-lowmem report`: the paper's figures and Table 3 from a store, as PNG, Markdown, CSV and
one static HTML page (the scripts in ``analysis/`` run this same verb)."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("report", help="figures, Table 3 and an HTML page from a store")
    parser.add_argument("--store", required=True, help="the Parquet store a sweep wrote")
    parser.add_argument(
        "--out", required=True, help="folder for the PNGs, table3.md/.csv and index.html"
    )
    parser.add_argument("--sweep", help="one sweep of the store (default: all of them)")
    parser.add_argument("--task", help="one task, when the store holds several")
    parser.add_argument(
        "--metric",
        help="the validation metric to choose and plot by (default: the one the sweep "
        "optimised, e.g. metric.val_accuracy); test metrics are shown beside, never chosen on",
    )
    parser.add_argument(
        "--only",
        metavar="KIND",
        help="write only this figure or table and no HTML: memory_parts, "
        "accuracy_vs_density, accuracy_vs_microbatch, accuracy_vs_memory, memory_vs_time, "
        "hypervolume, table3",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.points import NoResult, load_points
    from ..analysis.report import KINDS, write_report
    from ..api import open_store
    from ..preflight import writable_folder
    from ..validation import choice

    runs = open_store(args.store, "--store")
    writable_folder(args.out, "--out")
    if args.only is not None:
        choice(args.only, KINDS, "--only")
    runs.compact()
    try:
        points = load_points(args.store, sweep=args.sweep, task=args.task, metric=args.metric)
        written = write_report(points, args.out, only=args.only)
    except NoResult as error:
        print(f"tune-lowmem report: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
