"""The DynamicConv Transformer on IWSLT'14 de-en with fairseq's pay_less_attention recipe.

Adam (0.9, 0.98) with decoupled weight decay 1e-4 (fairseq's Adam decays the weights directly),
lr 5e-4 after a linear warm-up of 4,000 updates from 1e-7, then inverse square root; label
smoothing 0.1; minibatches of at most 4,000 tokens; no gradient clipping. Each epoch reports
the validation loss; the last one also decodes with beam search and reports BLEU.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import torch
from torch import nn

from ..config import TrialConfig
from ..data import data_root, iwslt14
from ..decode import bleu, references, translate
from ..models import build_model


class Iwslt14Translation:
    """The `dct-iwslt14` task."""

    def __init__(self, config: TrialConfig, device: torch.device):
        self.config = config
        self.device = device

    # ---- data ---------------------------------------------------------------------------------

    @cached_property
    def corpus(self) -> iwslt14.Iwslt14:
        return iwslt14.load(iwslt14.find_folder(data_root(self.config.data)))

    @cached_property
    def splits(self) -> dict[str, iwslt14.ParallelText]:
        """train / val / test as the config asks: a seeded hold-out when the folder has no valid split."""
        data, corpus, seed = self.config.data, self.corpus, self.config.seed
        order = np.random.default_rng(seed).permutation(len(corpus.train))
        val = corpus.valid
        if val is None and data.split == "search" and data.val_size > 0:
            val, order = corpus.train.subset(order[: data.val_size]), order[data.val_size :]
        train = corpus.train.subset(np.sort(order[: data.train_subset] if data.train_subset else order))
        test = corpus.test
        if data.test_subset is not None:
            test = test.subset(np.sort(np.random.default_rng(seed + 1).permutation(len(test))[: data.test_subset]))
        splits = {"train": train, "test": test}
        if val is not None and data.split == "search":
            splits["val"] = val
        return splits

    @cached_property
    def batches(self) -> list[np.ndarray]:
        return iwslt14.batches_by_tokens(self.splits["train"], self.config.schedule.max_tokens, self.config.seed)

    # ---- model and optimizer ------------------------------------------------------------------

    def vocab_sizes(self) -> tuple[int, int]:
        """Source and target vocabulary sizes: all the model needs of the data."""
        return len(self.corpus.src_dict), len(self.corpus.tgt_dict)

    def build_model(self) -> nn.Module:
        return build_model(self.config, self.vocab_sizes())

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        s = self.config.schedule
        return torch.optim.AdamW(
            model.parameters(), lr=self.learning_rate(0, 0), betas=s.betas, eps=s.adam_eps, weight_decay=s.weight_decay
        )

    def learning_rate(self, epoch: int, update: int) -> float:
        """fairseq's inverse_sqrt: linear warm-up to lr x multiplier, then lr x sqrt(warmup / update)."""
        s = self.config.schedule
        peak = s.lr * s.lr_multiplier
        if update < s.warmup_updates:
            return s.warmup_init_lr + (peak - s.warmup_init_lr) * update / s.warmup_updates
        return peak * math.sqrt(max(s.warmup_updates, 1) / max(update, 1))

    # ---- one step -----------------------------------------------------------------------------

    def train_batches(self, epoch: int):
        for ids in iwslt14.epoch_order(self.batches, epoch, self.config.seed):
            yield iwslt14.collate(self.splits["train"], ids).to(self.device)

    def microbatches(self, batch: iwslt14.Batch) -> list[iwslt14.Batch]:
        size = self.config.microbatch.size
        return [batch] if size is None else iwslt14.split_microbatches(batch, size)

    def loss(self, model: nn.Module, batch: iwslt14.Batch) -> tuple[torch.Tensor, float]:
        logits = model(batch.src_tokens, batch.prev_output_tokens)
        loss, _ = iwslt14.label_smoothed_nll_loss(logits, batch.target, self.config.schedule.label_smoothing)
        return loss, float(batch.ntokens)

    def normaliser(self, batch: iwslt14.Batch) -> float:
        return float(batch.ntokens)

    # ---- evaluation ---------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, model: nn.Module, final: bool) -> dict[str, float]:
        metrics: dict[str, float] = {}
        names = ("val", "test") if final else ("val",)
        for name in names:
            split = self.splits.get(name)
            if split is None:
                continue
            loss, nll, tokens = 0.0, 0.0, 0
            for ids in iwslt14.batches_by_tokens(split, self.config.schedule.max_tokens, seed=0):
                batch = iwslt14.collate(split, ids).to(self.device)
                logits = model(batch.src_tokens, batch.prev_output_tokens)
                batch_loss, batch_nll = iwslt14.label_smoothed_nll_loss(
                    logits, batch.target, self.config.schedule.label_smoothing
                )
                loss, nll, tokens = loss + float(batch_loss), nll + float(batch_nll), tokens + batch.ntokens
            # per target token, in nats like train_loss (fairseq prints base 2: divide by ln 2)
            metrics[f"{name}_loss"] = loss / tokens
            metrics[f"{name}_nll_loss"] = nll / tokens
            metrics[f"{name}_ppl"] = math.exp(metrics[f"{name}_nll_loss"])
            if final:
                metrics[f"{name}_bleu"] = self.bleu(model, split)
        return metrics

    def bleu(self, model: nn.Module, split: iwslt14.ParallelText) -> float:
        s = self.config.schedule
        hypotheses = translate(
            model, split, self.corpus.tgt_dict, beam_size=s.beam_size, len_penalty=s.length_penalty,
            max_len_a=s.max_decode_len_a, max_len_b=s.max_decode_len_b, device=self.device,
        )
        return bleu(hypotheses, references(split, self.corpus.tgt_dict))

    # ---- length of training -------------------------------------------------------------------

    def updates_per_epoch(self) -> int:
        return len(self.batches)

    def total_updates(self) -> int:
        s = self.config.schedule
        if s.max_epochs is None:
            return s.max_updates
        return min(s.max_updates, s.max_epochs * self.updates_per_epoch())

    def epochs(self) -> int:
        s = self.config.schedule
        epochs = math.ceil(s.max_updates / self.updates_per_epoch())
        return min(epochs, s.max_epochs) if s.max_epochs else epochs

    def finished(self, epoch: int, updates: int) -> bool:
        s = self.config.schedule
        return updates >= s.max_updates or (s.max_epochs is not None and epoch >= s.max_epochs)
