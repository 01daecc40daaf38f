"""A stored DynamicConv Transformer trial as a fairseq checkpoint with its dictionaries, what
`tune-lowmem export --format fairseq` writes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import store
from ...config import TrialConfig
from ...data import data_root, iwslt14
from ...models.dynamicconv import DynamicConvConfig
from ...plugins import techniques
from ...validation import ConfigError
from .fairseq_interop import require_fairseq


def export_fairseq(
    store_root: str | Path, row: Mapping[str, Any], config: TrialConfig, out: Path
) -> str:
    """Write the trial's final weights as a fairseq checkpoint under `out`; what to run next."""
    trial_id = row["trial_id"]
    if not isinstance(config.model, DynamicConvConfig):
        raise ConfigError(
            "trial_id",
            f"{trial_id} is a trial of task {config.task}; --format fairseq exports "
            "DynamicConv Transformer trials (model section DynamicConvConfig) only",
        )
    weights = store.model_file(store_root, row["sweep"], trial_id)
    if not weights.is_file():
        raise ConfigError(
            "trial_id",
            f"{trial_id} has no final weights at {weights} "
            "(kept for trials completed by this version on)",
        )
    require_fairseq("--format")
    import torch

    from .fairseq_tools import REQUIRED_BATCH_SIZE_MULTIPLE, export_checkpoint

    corpus = iwslt14.load(iwslt14.find_folder(data_root(config.data)))
    state = torch.load(weights, map_location="cpu", weights_only=True)
    for technique in techniques():  # fairseq knows none of their layers (packed weights)
        state = technique.portable_state(state)
    path = export_checkpoint(
        state,
        config.model,
        corpus.src_dict.symbols,
        corpus.tgt_dict.symbols,
        out,
        extra={"sweep": row["sweep"], "trial_id": trial_id},
    )
    return (
        f"wrote {path} with {out}/dict.de.txt and {out}/dict.en.txt; translate a test set with\n"
        f"  fairseq-preprocess -s de -t en --srcdict {out}/dict.de.txt --tgtdict {out}/dict.en.txt "
        f"--testpref TEXT/test --destdir BIN\n"
        f"  fairseq-generate BIN --path {path} --beam 5 --lenpen 1 --max-len-a 1.2 --max-len-b 10 "
        f"--remove-bpe {' '.join(REQUIRED_BATCH_SIZE_MULTIPLE)}\n"
        "(fairseq-generate's default --required-batch-size-multiple 8 drops the last batch's "
        "sentences unless their number is a multiple of 8)"
    )
