"""`tune-lowmem`: thin verbs over the package's modules, one module per verb in `commands/`.

Each command module defines `add_parser(subparsers)` and `run(args) -> int`. Bad input exits
with status 2 and a one-line message naming the field, before anything runs; a file that cannot
be written (a full disk) stops the command with status 1 and one line naming the file.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .config import ConfigError
from .store import StoreError, WriteFailed, forget_reported_files

COMMANDS = ("train", "pareto", "report", "profile", "launch", "resume", "status", "export")


class OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors as one line (its default prints the whole usage first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="tune-lowmem", description="Find how to train a neural network in less memory."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"tune_lowmem.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    forget_reported_files()
    try:
        return args.run(args)
    except (ConfigError, StoreError, FileNotFoundError) as error:
        print(f"tune-lowmem {args.command}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except WriteFailed as error:
        print(
            f"tune-lowmem {args.command}: stopped: {error}; once there is room, "
            "`tune-lowmem resume` continues the sweep",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
