"""BLEU of one trained model from the project's decoder and from fairseq-generate.

Trains a small DynamicConv Transformer on the shipped IWSLT'14 text (CPU) and keeps it as a
stored trial (`--store`; a later run with the same `--store` and `--reuse` skips the training),
exports it with `tune-lowmem export --format fairseq`, translates test sentences with both
decoders (beam 5, length penalty 1, a fixed length limit) and prints both tokenised BLEUs, how
many hypotheses are identical, and the detokenised sacreBLEU with its signature. Needs the
fairseq extra (./setup.sh --fairseq). Run by hand:

    TUNE_LOWMEM_DATA=../shared/data .venv/bin/python benchmarks/fairseq_bleu.py --updates 150
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from tune_lowmem import cli, store
from tune_lowmem.config import TrialConfig
from tune_lowmem.data import data_root, iwslt14
from tune_lowmem.tasks.translation import DynamicConvIwslt14
from tune_lowmem.tasks.translation.decode import (
    bleu,
    detok_bleu,
    references,
    sacrebleu_signature,
    translate,
)
from tune_lowmem.tasks.translation.fairseq_tools import fairseq_generate
from tune_lowmem.train import Trainer

SWEEP, TRIAL = "bench", "t1"


def trial_config(args: argparse.Namespace) -> TrialConfig:
    layers = args.layers
    kernels = [3, 7, 15, 31, 31, 31, 31][:layers]
    return TrialConfig.from_dict(
        {
            "task": "dct-iwslt14",
            "device": "cpu",
            "model": {
                "embed_dim": args.embed_dim,
                "ffn_dim": 2 * args.embed_dim,
                "heads": 4,
                "encoder_layers": layers,
                "decoder_layers": layers,
                "encoder_kernels": kernels,
                "decoder_kernels": kernels,
                "dropout": 0.1,
            },
            "schedule": {
                "max_updates": args.updates,
                "warmup_updates": args.warmup,
                "lr": args.lr,
                "max_tokens": 2000,
                "beam_size": 1,
            },
            "data": {"val_size": 50, "test_subset": 10},
        }
    )


def train(config: TrialConfig, root: Path) -> None:
    """Train `config` as trial t1 of sweep `bench` under `root`, its weights stored after every
    epoch (a run stopped by hand leaves its last epoch's model for --reuse)."""
    record = store.TrialRecord(
        sweep=SWEEP, trial_id=TRIAL, status="completed", config=config.to_flat()
    )
    store.write_trial(root, record, epochs=[])
    started = time.perf_counter()

    def on_epoch(metrics: dict[str, float], trainer: Trainer) -> None:
        store.write_model(root, SWEEP, TRIAL, trainer.model.state_dict())
        print(
            f"epoch {metrics['epoch']}: {metrics['updates']} updates, "
            f"val nll {metrics['val_nll_loss']:.2f}, {time.perf_counter() - started:.0f} s",
            flush=True,
        )

    trainer = Trainer(config)
    trainer.run(on_epoch)
    print(f"trained {trainer.updates} updates in {time.perf_counter() - started:.0f} s")


def compare(config: TrialConfig, root: Path, args: argparse.Namespace) -> None:
    """Export the stored trial, translate with both decoders, print both BLEUs."""
    export = root / "export"
    argv = ["export", TRIAL, "--format", "fairseq", "--store", str(root), "--out", str(export)]
    assert cli.main(argv) == 0
    task = DynamicConvIwslt14(config, torch.device("cpu"))
    model = task.build_model()
    model.load_state_dict(torch.load(store.model_file(root, SWEEP, TRIAL), weights_only=True))
    folder = iwslt14.find_folder(data_root(config.data))
    lines = (
        (folder / f"test.{lang}").read_text(encoding="utf-8").split("\n") for lang in ("de", "en")
    )
    pairs = [p for p in zip(*lines) if p[0].strip()][: args.sentences]  # the file ends with "\n"

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        theirs, fairseq_bleu = fairseq_generate(export, pairs, Path(tmp), max_len=args.max_len)
        fairseq_seconds = time.perf_counter() - started

    corpus = task.corpus
    data = iwslt14.ParallelText.encode(*map(list, zip(*pairs)), corpus.src_dict, corpus.tgt_dict)
    started = time.perf_counter()
    ours = translate(model, data, corpus.tgt_dict, max_len_a=0.0, max_len_b=args.max_len)
    ours_seconds = time.perf_counter() - started
    refs = references(data, corpus.tgt_dict)
    same = sum(a == b for a, b in zip(ours, theirs))
    print(f"{len(pairs)} test sentences, beam 5, lenpen 1, max length {args.max_len}:")
    print(
        f"  tokenised BLEU  project {bleu(ours, refs):.2f} ({ours_seconds:.0f} s)   "
        f"fairseq-generate {fairseq_bleu:.2f} ({fairseq_seconds:.0f} s, including preprocess)"
    )
    print(f"  identical hypotheses: {same} of {len(pairs)}")
    print(
        f"  detokenised sacreBLEU  project {detok_bleu(ours, refs):.2f}   fairseq-generate "
        f"{detok_bleu(theirs, refs):.2f}   ({sacrebleu_signature()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--warmup", type=int, default=50, help="warm-up updates")
    parser.add_argument("--sentences", type=int, default=200, help="test sentences to translate")
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument(
        "--store", help="keep the trained trial in this folder (default: a temp one)"
    )
    parser.add_argument("--reuse", action="store_true", help="decode the trial kept in --store")
    args = parser.parse_args()
    config = trial_config(args)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.store or tmp)
        if args.reuse:
            config = store.trial_config(store.read_trials(root, SWEEP).iloc[0].to_dict())
        else:
            train(config, root)
        compare(config, root, args)


if __name__ == "__main__":
    main()
