"""CPU threads for the verbs that train in this process (`train`, `profile --measure`).

A sweep's trial runs on `resources.cpu` threads; these verbs take `--threads` the same way
(default: torch's own, one per core, which crawls on a loaded machine) and say on stderr what
they used, so that stdout stays the table or the JSON.
"""

from __future__ import annotations

import argparse
import sys

from ..config import ConfigError


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads torch computes with (default: torch's, one per core); "
        "a sweep's trials use resources.cpu",
    )


def apply_threads(args: argparse.Namespace) -> int:
    """Set torch's thread count from `--threads` (checked first), print it, and return it."""
    import torch

    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(
                "--threads", f"{args.threads!r} is not allowed; a positive integer is required"
            )
        torch.set_num_threads(args.threads)
    used = torch.get_num_threads()
    source = "--threads" if args.threads is not None else "torch's default; set --threads"
    print(f"threads: {used} ({source})", file=sys.stderr, flush=True)
    return used
