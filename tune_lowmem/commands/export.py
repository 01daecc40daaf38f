"""`tune-lowmem export TRIAL_ID --format fairseq`: a stored trial's final weights as a fairseq
checkpoint plus the dictionaries, for fairseq-generate and fairseq-interactive."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import stored_trial

FORMATS = ("fairseq",)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export", help="write a trial's final model for another tool (fairseq)"
    )
    parser.add_argument("trial_id", help="the trial's id (the store's trial_id column)")
    parser.add_argument("--format", required=True, help=f"allowed: {', '.join(FORMATS)}")
    parser.add_argument("--store", default="runs", help="the store's folder (default: ./runs)")
    parser.add_argument("--sweep", help="the trial's sweep, when trial ids repeat across sweeps")
    parser.add_argument("--out", help="the folder to write (default: ./export/<trial_id>)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import store
    from ..config import ConfigError
    from ..tasks.translation.export import export_fairseq

    if args.format not in FORMATS:
        raise ConfigError(
            "--format", f"{args.format!r} is not allowed; allowed: {', '.join(FORMATS)}"
        )
    row = stored_trial(args.store, args.trial_id, args.sweep, "trial_id")
    out = Path(args.out or Path("export") / args.trial_id)
    print(export_fairseq(args.store, row, store.trial_config(row), out))
    return 0
