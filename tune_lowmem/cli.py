"""`tune-lowmem`: thin verbs over the package's modules, one module per verb in `commands/`.

Each command module defines `add_parser(subparsers)` and `run(args) -> int`. Bad input exits
with status 2 and a one-line message naming the field, before anything runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .config import ConfigError

COMMANDS = ("train", "pareto", "report", "profile", "launch", "resume", "status", "export")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune-lowmem", description="Find how to train a neural network in less memory."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"tune_lowmem.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ConfigError, FileNotFoundError) as error:
        print(f"tune-lowmem {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
