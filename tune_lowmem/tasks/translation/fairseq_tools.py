"""fairseq's own code at work on the project's models (needs the fairseq extra): fairseq's model
built from the project's config, checkpoints written as fairseq-train writes them, and test
sentences translated with fairseq-preprocess and fairseq-generate. The name mapping and the
reading side are `fairseq_interop`."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...models.dynamicconv import DynamicConvConfig
from .fairseq_interop import (
    CHECKPOINT_NAME,
    fairseq_arguments,
    plain,
    require_fairseq,
    to_fairseq,
    write_dictionary,
)


def build_fairseq(
    model: DynamicConvConfig,
    src_symbols: list[str],
    tgt_symbols: list[str],
    folder: Path,
    langs: tuple[str, str] = ("de", "en"),
    extra_args: tuple[str, ...] = (),
):
    """fairseq's own (cfg, task, model) for the project's `model` section: the dictionaries written
    to `folder` as fairseq's translation task reads them, then fairseq-train's argument parsing
    (`extra_args`: e.g. a criterion or an optimizer) and model building."""
    require_fairseq("--format")
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    folder.mkdir(parents=True, exist_ok=True)
    for lang, symbols in zip(langs, (src_symbols, tgt_symbols)):
        write_dictionary(symbols, folder / f"dict.{lang}.txt")
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(folder),
            "--task",
            "translation",
            "-s",
            langs[0],
            "-t",
            langs[1],
            *fairseq_arguments(model),
            *extra_args,
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return cfg, task, task.build_model(cfg.model)


def export_checkpoint(
    state_dict: Mapping[str, torch.Tensor],
    model: DynamicConvConfig,
    src_symbols: list[str],
    tgt_symbols: list[str],
    out: Path,
    langs: tuple[str, str] = ("de", "en"),
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write `out`/checkpoint_best.pt and `out`/dict.<lang>.txt as fairseq-train would have for
    this model, so that fairseq-generate and fairseq-interactive load it. fairseq builds its own
    model from the written arguments and must take every weight (strict)."""
    from omegaconf import OmegaConf

    cfg, _, fairseq_model = build_fairseq(model, src_symbols, tgt_symbols, out, langs)
    weights = to_fairseq(state_dict)
    fairseq_model.load_state_dict(weights, strict=True)
    checkpoint = {
        "args": None,
        "cfg": plain(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)),
        "model": weights,
        "optimizer_history": [
            {
                "criterion_name": "LabelSmoothedCrossEntropyCriterion",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],
        "extra_state": {"tune_lowmem": dict(extra or {})},
        "last_optimizer_state": None,
    }
    path = out / CHECKPOINT_NAME
    torch.save(checkpoint, path)
    return path


# fairseq-generate's default (8) drops the last batch when its size is not a multiple of 8.
REQUIRED_BATCH_SIZE_MULTIPLE = ("--required-batch-size-multiple", "1")

# ---- fairseq's own tools -----------------------------------------------------------------------


def _fairseq_cli(tool: str, *argv: str) -> str:
    """Run fairseq_cli.<tool> in a fresh interpreter (fairseq keeps global Hydra state); its log."""
    done = subprocess.run(
        [sys.executable, "-m", f"fairseq_cli.{tool}", *argv],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"fairseq {tool} failed: {done.stderr[-2000:]}")
    return done.stdout + done.stderr


def fairseq_generate(
    export: Path,
    pairs: list[tuple[str, str]],
    folder: Path,
    beam: int = 5,
    len_penalty: float = 1.0,
    max_len: int = 200,
    batch_size: int = 128,
    langs: tuple[str, str] = ("de", "en"),
) -> tuple[list[str], float]:
    """Translate (source, reference) text pairs with fairseq-preprocess and fairseq-generate from
    an exported folder: the BPE-removed hypotheses in order, and fairseq's BLEU (sacrebleu,
    tokenize none: the project's tokenised BLEU). The length limit is fixed (`max_len`), because
    fairseq's a * source + b takes the batch's longest source and the project's each sentence's.
    `--required-batch-size-multiple 1` keeps every sentence: with fairseq's default of 8,
    fairseq 0.12's data_utils.batch_by_size drops the last batch (the longest sentences) when
    its size is not a multiple of 8 (facebookresearch/fairseq#5036). A missing hypothesis is
    an error, never skipped."""
    src, tgt = langs
    text = folder / "text"
    text.mkdir(parents=True, exist_ok=True)
    for lang, lines in zip(langs, zip(*pairs)):
        (text / f"test.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _fairseq_cli(
        "preprocess",
        "-s",
        src,
        "-t",
        tgt,
        "--srcdict",
        str(export / f"dict.{src}.txt"),
        "--tgtdict",
        str(export / f"dict.{tgt}.txt"),
        "--testpref",
        str(text / "test"),
        "--destdir",
        str(folder / "bin"),
    )
    log = _fairseq_cli(
        "generate",
        str(folder / "bin"),
        "--path",
        str(export / CHECKPOINT_NAME),
        "--beam",
        str(beam),
        "--lenpen",
        str(len_penalty),
        "--max-len-a",
        "0",
        "--max-len-b",
        str(max_len),
        "--batch-size",
        str(batch_size),
        *REQUIRED_BATCH_SIZE_MULTIPLE,
        "--remove-bpe",
        "--scoring",
        "sacrebleu",
        "--sacrebleu-tokenizer",
        "none",
        "--cpu",
    )
    hypotheses = {int(m[1]): m[2] for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", log, re.MULTILINE)}
    if sorted(hypotheses) != list(range(len(pairs))):
        raise RuntimeError(
            f"fairseq-generate translated {len(hypotheses)} of {len(pairs)} sentences"
        )
    return [hypotheses[i] for i in range(len(pairs))], float(re.search(r"BLEU = ([\d.]+)", log)[1])
