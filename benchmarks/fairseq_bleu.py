"""BLEU of one trained model from the project's decoder and from fairseq-generate.

Trains a small DynamicConv Transformer on the shipped IWSLT'14 text (CPU), keeps it as a stored
trial, exports it with `tune-lowmem export --format fairseq`, translates the first test sentences
with both decoders (beam 5, length penalty 1, a fixed length limit) and prints both tokenised
BLEUs, how many hypotheses are identical, and the detokenised sacreBLEU with its signature.
Needs the fairseq extra (./setup.sh --fairseq). Run by hand:

    TUNE_LOWMEM_DATA=../shared/data .venv/bin/python benchmarks/fairseq_bleu.py --updates 150
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tune_lowmem import cli, store
from tune_lowmem.config import TrialConfig
from tune_lowmem.data import data_root, iwslt14
from tune_lowmem.decode import bleu, detok_bleu, references, sacrebleu_signature, translate
from tune_lowmem.fairseq_tools import fairseq_generate
from tune_lowmem.train import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=200, help="test sentences to translate")
    parser.add_argument("--max-len", type=int, default=200)
    args = parser.parse_args()
    config = TrialConfig.from_dict(
        {
            "task": "dct-iwslt14",
            "device": "cpu",
            "model": {
                "embed_dim": args.embed_dim,
                "ffn_dim": 2 * args.embed_dim,
                "heads": 4,
                "encoder_layers": 2,
                "decoder_layers": 2,
                "encoder_kernels": [3, 7],
                "decoder_kernels": [3, 7],
                "dropout": 0.1,
            },
            "schedule": {
                "max_updates": args.updates,
                "warmup_updates": 50,
                "lr": 5e-3,
                "max_tokens": 2000,
                "beam_size": 1,
            },
            "data": {"val_size": 50, "test_subset": 10},
        }
    )
    started = time.perf_counter()
    trainer = Trainer(config)
    trainer.run(
        lambda metrics, _: print(
            f"epoch {metrics['epoch']}: {metrics['updates']} updates, "
            f"val nll {metrics['val_nll_loss']:.2f}",
            flush=True,
        )
    )
    print(f"trained {trainer.updates} updates in {time.perf_counter() - started:.0f} s")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        record = store.TrialRecord(
            sweep="bench", trial_id="t1", status="completed", config=config.to_flat()
        )
        store.write_model(root, "bench", "t1", trainer.model.state_dict())
        store.write_trial(root, record, epochs=[])
        export = root / "export"
        assert (
            cli.main(
                ["export", "t1", "--format", "fairseq", "--store", str(root), "--out", str(export)]
            )
            == 0
        )

        folder = iwslt14.find_folder(data_root(config.data))
        lines = (
            (folder / f"test.{lang}").read_text(encoding="utf-8").split("\n")
            for lang in ("de", "en")
        )
        # fairseq-fixed 0.12.3.1's generate left out 4 of 100 sentences here (fairseq_generate)
        pairs = [p for p in zip(*lines) if 0 < len(p[0].split()) <= 80][: args.sentences]
        started = time.perf_counter()
        theirs, fairseq_bleu = fairseq_generate(
            export, pairs, root / "fairseq", max_len=args.max_len
        )
        fairseq_seconds = time.perf_counter() - started

    corpus = trainer.task.corpus
    data = iwslt14.ParallelText.encode(*map(list, zip(*pairs)), corpus.src_dict, corpus.tgt_dict)
    started = time.perf_counter()
    ours = translate(trainer.model, data, corpus.tgt_dict, max_len_a=0.0, max_len_b=args.max_len)
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


if __name__ == "__main__":
    main()
