"""`tune-lowmem status NAME`: what the store holds of a sweep, and its best points so far."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("status", help="counts and the Pareto front of a sweep, from the store")
    parser.add_argument("name", help="the sweep's name")
    parser.add_argument("--store", default="runs", help="the store's folder (default: ./runs)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import store
    from ..preflight import store_folder
    from ..progress import front_table
    from ..search import front, saved_space, status_counts

    root = store_folder(args.store, "--store")
    space = saved_space(args.name, root)
    trials = store.read_trials(root, args.name)
    counts = status_counts(trials)
    print(f"sweep {args.name}: {len(trials)} trials stored "
          f"({', '.join(f'{n} {status}' for status, n in counts.items())}); "
          f"{space.num_samples} points x {space.seeds_per_point} seed(s) planned")
    print("Pareto front (" + ", ".join(f"{m} {d}" for m, d in space.objectives.items()) + "):")
    print(front_table(front(space, trials)))
    print(f"store: {root}")
    return 0
