"""`tune-lowmem export TRIAL_ID --format fairseq`: a stored trial's final weights as a fairseq
checkpoint plus the dictionaries, for fairseq-generate and fairseq-interactive."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    from ..data import data_root, iwslt14
    from ..fairseq_interop import require_fairseq
    from ..models.dynamicconv import DynamicConvConfig

    if args.format not in FORMATS:
        raise ConfigError(
            "--format", f"{args.format!r} is not allowed; allowed: {', '.join(FORMATS)}"
        )
    row = _trial_row(store, Path(args.store), args.trial_id, args.sweep)
    config = store.trial_config(row)
    if not isinstance(config.model, DynamicConvConfig):
        raise ConfigError(
            "trial_id",
            f"{args.trial_id} is a trial of task {config.task}; --format fairseq exports "
            "DynamicConv Transformer trials (model section DynamicConvConfig) only",
        )
    weights = store.model_file(args.store, row["sweep"], args.trial_id)
    if not weights.is_file():
        raise ConfigError(
            "trial_id",
            f"{args.trial_id} has no final weights at {weights} "
            "(kept for trials completed by this version on)",
        )
    require_fairseq("--format")
    import torch

    from ..fairseq_tools import REQUIRED_BATCH_SIZE_MULTIPLE, export_checkpoint

    corpus = iwslt14.load(iwslt14.find_folder(data_root(config.data)))
    out = Path(args.out or Path("export") / args.trial_id)
    path = export_checkpoint(
        torch.load(weights, map_location="cpu", weights_only=True),
        config.model,
        corpus.src_dict.symbols,
        corpus.tgt_dict.symbols,
        out,
        extra={"sweep": row["sweep"], "trial_id": args.trial_id},
    )
    print(
        f"wrote {path} with {out}/dict.de.txt and {out}/dict.en.txt; translate a test set with\n"
        f"  fairseq-preprocess -s de -t en --srcdict {out}/dict.de.txt --tgtdict {out}/dict.en.txt "
        f"--testpref TEXT/test --destdir BIN\n"
        f"  fairseq-generate BIN --path {path} --beam 5 --lenpen 1 --max-len-a 1.2 --max-len-b 10 "
        f"--remove-bpe {' '.join(REQUIRED_BATCH_SIZE_MULTIPLE)}\n"
        "(fairseq-generate's default --required-batch-size-multiple 8 drops the last batch's "
        "sentences unless their number is a multiple of 8)"
    )
    return 0


def _trial_row(store, root: Path, trial_id: str, sweep: str | None) -> dict:
    from ..config import ConfigError

    trials = store.read_trials(root, sweep) if sweep else store.read_trials(root)
    rows = trials[trials["trial_id"] == trial_id] if "trial_id" in trials else trials.iloc[:0]
    if rows.empty:
        where = f"sweep {sweep} of " if sweep else ""
        raise ConfigError("trial_id", f"{trial_id!r} is not a trial in {where}the store {root}")
    if len(rows) > 1:
        raise ConfigError(
            "trial_id",
            f"{trial_id!r} is in several sweeps ({', '.join(rows['sweep'])}); "
            "name one with --sweep",
        )
    return rows.iloc[0].to_dict()
