"""`tune-lowmem status NAME`: what the store holds of a sweep, and its best points so far.

It reads the Parquet store alone (no Ray, no torch) through `tune_lowmem.api`, compacting the
sweep's files first when a running sweep has written many, and shows the same front
`tune-lowmem pareto` would, fitting the terminal as it does (``--wide``: the full table). A saved
space that cannot be read is named in one line; the counts and the front then come from the
rows alone.
"""

from __future__ import annotations

import argparse

from . import add_wide_argument, table_width


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="counts and the Pareto front of a sweep, from the store"
    )
    parser.add_argument("name", help="the sweep's name")
    parser.add_argument("--store", default="runs", help="the store's folder (default: ./runs)")
    add_wide_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.objectives import NoResult, say_unreadable
    from ..analysis.terminal import wrapped
    from ..api import open_store

    runs = open_store(args.store, "--store")
    status = runs.status(args.name)
    if status.space_problem is not None:
        say_unreadable(status.space_problem)
    runs.compact(status.name)
    stored = ", ".join(f"{n} {s}" for s, n in status.counts.items())
    baseline = " and the baseline" if status.baseline else ""
    planned = (
        f"; {status.planned_points} points x {status.seeds_per_point} seed(s){baseline} planned"
        if status.planned_points is not None
        else ""
    )
    width = table_width(args)
    said = f"sweep {status.name}: {status.stored} trials stored ({stored}){planned}"
    print(wrapped(said, width) if width else said + "\n", end="")
    print("Pareto front, chosen on validation data:")
    try:
        shown = (
            runs.answer(status.name, width=width, store_name=args.store)
            if status.stored
            else "  (no trial stored yet)\n"
        )
        print(shown, end="")
    except NoResult as error:
        print(f"  ({error})")
    print(f"store: {runs.root}")
    return 0
