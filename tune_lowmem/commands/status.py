"""`tune-lowmem status NAME`: what the store holds of a sweep, and its best points so far.

It reads the Parquet store alone (no Ray, no torch), compacting the sweep's files first when a
running sweep has written many, and shows the same front `tune-lowmem pareto` would.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="counts and the Pareto front of a sweep, from the store"
    )
    parser.add_argument("name", help="the sweep's name")
    parser.add_argument("--store", default="runs", help="the store's folder (default: ./runs)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import store
    from ..analysis.objectives import NoResult, saved_space
    from ..analysis.query import answer
    from ..config import ConfigError
    from ..preflight import store_folder

    root = store_folder(args.store, "--store")
    name = store.check_name(args.name, "NAME")
    space = saved_space(root, name)
    if space is None and name not in store.list_sweeps(root):
        known = ", ".join(store.list_sweeps(root)) or "none"
        raise ConfigError("NAME", f"no sweep {name!r} in {root}; sweeps there: {known}")
    store.compact(root, name)
    trials = store.read_trials(root, name, columns=["status"])
    counts = dict(trials["status"].value_counts()) if len(trials) else {}
    stored = ", ".join(f"{int(counts.get(s, 0))} {s}" for s in store.STATUSES)
    planned = (
        f"; {space.get('num_samples')} points x {space.get('seeds_per_point', 1)} seed(s) planned"
        if space
        else ""
    )
    print(f"sweep {name}: {len(trials)} trials stored ({stored}){planned}")
    print("Pareto front, chosen on validation data:")
    try:
        print(answer(str(root), sweep=name) if len(trials) else "  (no trial stored yet)\n", end="")
    except NoResult as error:
        print(f"  ({error})")
    print(f"store: {root}")
    return 0
