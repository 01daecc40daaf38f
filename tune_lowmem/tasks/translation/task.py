"""The DynamicConv Transformer on IWSLT'14 de-en with fairseq's pay_less_attention recipe.

fairseq's Adam (0.9, 0.98; tune_lowmem.optim) with decoupled weight decay 1e-4,
lr 5e-4 after a linear warm-up of 4,000 updates from 1e-7, then inverse square root; label
smoothing 0.1; minibatches of at most 4,000 tokens; no gradient clipping. Each epoch reports
the validation loss; the last one also decodes with beam search and reports tokenised BLEU
(`*_bleu`, the paper's) and detokenised sacreBLEU (`*_sacrebleu`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import nn

from ...config import TrialConfig
from ...data import data_root, iwslt14
from ...models.dynamicconv import DynamicConvConfig, DynamicConvTransformer
from ...optim import FairseqAdam
from ...outcome import MAXIMIZE, MINIMIZE
from ...validation import (
    ConfigError,
    auto_or_positive_int,
    nonnegative_float,
    nonnegative_int,
    optional_positive_int,
    positive_float,
    positive_int,
    probability,
    read_auto,
    require,
)
from ..base import Metric, Task, conv_and_linear_weights
from .decode import bleu, detok_bleu, references, translate

# The profiler's stand-in data: fairseq's IWSLT'14 de-en after prepare-iwslt14.sh and
# fairseq-preprocess (separate dictionaries, specials included, padded to a multiple of 8):
# "[de] Dictionary: 8848 types", "[en] Dictionary: 6632 types", train.de "160239 sents". Only the
# embeddings' sizes (and the epoch length) depend on them. A synthetic minibatch is one full
# token budget, `max_tokens // max(S, T)` sentence pairs of S source and T target tokens (end of
# sentence included), no padding. S = T = 30 is a typical batch: on the shipped IWSLT'14 text
# fairseq's 4,000-token batches hold a median of 100 pairs padded to 31 source and 40 target
# tokens, about 3,100 and 4,000 tokens a side, and 133 x 30 = 3,990 tokens a side is that size.
# Activation memory follows these padded token counts (the output layer's n x T x vocabulary
# logits dominate it) and, more weakly, the lengths themselves; `set_synthetic_lengths` changes
# them to profile long-sentence batches.
IWSLT14_VOCAB = {"de": 8_848, "en": 6_632}
IWSLT14_TRAIN_PAIRS = 160_239
IWSLT14_VALID_PAIRS = 7_283  # "valid.de 7283 sents": the split a search validates on
IWSLT14_LENGTHS = (30, 30)

TRANSLATION_METRICS = {
    "val_bleu": Metric(
        MAXIMIZE,
        0.0,
        100.0,
        "tokenised BLEU of beam search (BPE removed, lower-cased), validation split",
    ),
    "test_bleu": Metric(
        MAXIMIZE,
        0.0,
        100.0,
        "tokenised BLEU of beam search (BPE removed, lower-cased), test split",
    ),
    "val_sacrebleu": Metric(
        MAXIMIZE, 0.0, 100.0, "detokenised sacreBLEU (13a) on the validation split (final)"
    ),
    "test_sacrebleu": Metric(
        MAXIMIZE, 0.0, 100.0, "detokenised sacreBLEU (13a) on the test split (final)"
    ),
    "val_loss": Metric(MINIMIZE, 0.0, None, "label-smoothed loss per target token (nats)"),
    "test_loss": Metric(MINIMIZE, 0.0, None, "label-smoothed loss per target token (nats)"),
    "val_nll_loss": Metric(MINIMIZE, 0.0, None, "negative log-likelihood per token (nats)"),
    "test_nll_loss": Metric(MINIMIZE, 0.0, None, "negative log-likelihood per token (nats)"),
    "val_ppl": Metric(MINIMIZE, 1.0, None, "perplexity, exp(val_nll_loss)"),
    "test_ppl": Metric(MINIMIZE, 1.0, None, "perplexity, exp(test_nll_loss)"),
    "train_loss": Metric(MINIMIZE, 0.0, None, "mean training loss of the epoch"),
}


@dataclass(frozen=True)
class InverseSqrtScheduleConfig:
    """The DC-Transformer recipe of fairseq's pay_less_attention_paper: Adam, warm-up, inverse sqrt."""

    max_updates: int = 50_000
    max_epochs: int | None = None  # stop after this many epochs even before max_updates
    max_tokens: int = 4000  # token budget of one minibatch (source or target, whichever is larger)
    lr: float = 5e-4
    lr_multiplier: float = 1.0
    warmup_updates: int = 4000
    warmup_init_lr: float = 1e-7
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-8
    weight_decay: float = 1e-4
    label_smoothing: float = 0.1
    beam_size: int = 5
    length_penalty: float = 1.0
    max_decode_len_a: float = 1.2  # decode at most a*src_len + b tokens
    max_decode_len_b: int = 10
    # token budget of an evaluation batch; None (`auto` in YAML): the training microbatch's,
    # else the minibatch's (`DynamicConvIwslt14.eval_tokens`)
    eval_max_tokens: int | None = None

    def __post_init__(self) -> None:
        read_auto(self, "eval_max_tokens")

    def validate(self, prefix: str) -> None:
        for name in ("max_updates", "max_tokens", "beam_size"):
            positive_int(getattr(self, name), f"{prefix}.{name}")
        auto_or_positive_int(self.eval_max_tokens, f"{prefix}.eval_max_tokens")
        optional_positive_int(self.max_epochs, f"{prefix}.max_epochs")
        nonnegative_int(self.warmup_updates, f"{prefix}.warmup_updates")
        for name in ("lr", "lr_multiplier", "warmup_init_lr", "adam_eps"):
            positive_float(getattr(self, name), f"{prefix}.{name}")
        nonnegative_float(self.weight_decay, f"{prefix}.weight_decay")
        require(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            f"{prefix}.betas",
            f"{self.betas!r} is not allowed; two numbers in [0, 1) are required",
        )
        probability(self.label_smoothing, f"{prefix}.label_smoothing")


class DynamicConvIwslt14(Task):
    """The paper's `dct-iwslt14`."""

    MODEL_CONFIG = DynamicConvConfig
    SCHEDULE_CONFIG = InverseSqrtScheduleConfig
    METRICS = TRANSLATION_METRICS
    CHECKPOINT_STRATEGIES = DynamicConvTransformer.CHECKPOINT_STRATEGIES
    MICROBATCH_MODES = ("true",)  # layer norm has no batch statistics to simulate
    MICROBATCH_UNIT = "tokens"
    SHAPE_FIELDS = ("max_tokens", "eval_max_tokens")
    REWIRING_PERIOD_SCALE = 0.5  # Sohoni et al. A.3.1: halved for the 50,000-update schedule
    PAPER_UPDATES = 50_000  # fairseq's max_update in the paper's recipe
    OPTIMIZER = FairseqAdam

    @classmethod
    def validation_empty(cls, config: TrialConfig) -> bool:
        """A folder with its own valid split needs no hold-out: only the final split has none."""
        return config.data.split != "search"

    def __init__(self, config: TrialConfig, device: torch.device, *, synthetic: bool = False):
        super().__init__(config, device, synthetic=synthetic)
        self.lengths = IWSLT14_LENGTHS

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
        train = corpus.train.subset(
            np.sort(order[: data.train_subset] if data.train_subset else order)
        )
        test = corpus.test
        if data.test_subset is not None:
            test = test.subset(
                np.sort(np.random.default_rng(seed + 1).permutation(len(test))[: data.test_subset])
            )
        splits = {"train": train, "test": test}
        if val is not None and data.split == "search":
            splits["val"] = val
        return splits

    @cached_property
    def batches(self) -> list[np.ndarray]:
        return iwslt14.batches_by_tokens(
            self.splits["train"], self.config.schedule.max_tokens, self.config.seed
        )

    # ---- model and optimizer ------------------------------------------------------------------

    def vocab_sizes(self) -> tuple[int, int]:
        """Source and target vocabulary sizes: all the model needs of the data."""
        if self.synthetic:
            return IWSLT14_VOCAB["de"], IWSLT14_VOCAB["en"]
        return len(self.corpus.src_dict), len(self.corpus.tgt_dict)

    def build_model(self) -> nn.Module:
        """The model, its weights from `model.init_checkpoint` (a fairseq checkpoint) when set."""
        model = DynamicConvTransformer.from_config(
            self.config.model, *self.vocab_sizes(), iwslt14.PAD
        )
        if self.config.model.init_checkpoint is not None:
            from .fairseq_interop import init_from_checkpoint

            source, target = self.corpus.src_dict.symbols, self.corpus.tgt_dict.symbols
            init_from_checkpoint(model, self.config.model, source, target)
        return model

    def sparse_parameter_names(self, model: nn.Module) -> list[str]:
        """Every linear and convolution weight except embeddings and what is tied to them; norms
        have neither type and stay dense."""
        return conv_and_linear_weights(model)

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        s = self.config.schedule
        return FairseqAdam(
            model.parameters(),
            lr=self.learning_rate(0, 0),
            betas=s.betas,
            eps=s.adam_eps,
            weight_decay=s.weight_decay,
        )

    def learning_rate(self, epoch: int, update: int) -> float:
        """fairseq's inverse_sqrt: linear warm-up to lr x multiplier, then lr x sqrt(warmup / update)."""
        s = self.config.schedule
        peak = s.lr * s.lr_multiplier
        if update < s.warmup_updates:
            return s.warmup_init_lr + (peak - s.warmup_init_lr) * update / s.warmup_updates
        return peak * math.sqrt(max(s.warmup_updates, 1) / max(update, 1))

    # ---- one step -----------------------------------------------------------------------------

    def data_batches(self, epoch: int):
        for ids in iwslt14.epoch_order(self.batches, epoch, self.config.seed):
            yield iwslt14.collate(self.splits["train"], ids)  # on the host: `loss` moves it

    def set_synthetic_lengths(self, lengths: tuple[int, int]) -> None:
        """The (source, target) tokens of each synthetic sentence pair (see IWSLT14_LENGTHS)."""
        if len(lengths) != 2 or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths
        ):
            raise ConfigError(
                "lengths",
                f"{lengths!r} is not allowed; two positive integers (source, target) are required",
            )
        budget = self.config.schedule.max_tokens
        if max(lengths) > budget:
            raise ConfigError(
                "schedule.max_tokens",
                f"{budget} is not allowed; the synthetic sentence pairs of {tuple(lengths)} "
                f"tokens need at least {max(lengths)}",
            )
        self.lengths = tuple(lengths)

    def describe(self) -> str:
        model, (source, target) = self.config.model, self.lengths
        return (
            f"DC-Transformer {model.encoder_layers}+{model.decoder_layers} layers, embed "
            f"{model.embed_dim}, {self.config.schedule.max_tokens} tokens "
            f"({self.sentences_per_batch()} pairs of {source}/{target})"
        )

    def sentences_per_batch(self) -> int:
        return self.config.schedule.max_tokens // max(self.lengths)

    def synthetic_batch(self, generator: torch.Generator) -> iwslt14.Batch:
        return self._synthetic_pairs(self.sentences_per_batch(), generator)

    def _synthetic_pairs(self, pairs: int, generator: torch.Generator) -> iwslt14.Batch:
        """`pairs` random sentence pairs of the synthetic lengths, on the host."""
        sides = [
            _sentences(pairs, n, v, generator) for n, v in zip(self.lengths, self.vocab_sizes())
        ]
        text = iwslt14.ParallelText(*sides[0], *sides[1])
        return iwslt14.collate(text, range(pairs))

    def microbatches(self, batch: iwslt14.Batch) -> list[iwslt14.Batch]:
        size = self.microbatch_size
        return [batch] if size is None else iwslt14.split_microbatches(batch, size)

    def loss(self, model: nn.Module, batch: iwslt14.Batch) -> tuple[torch.Tensor, float]:
        """A host (micro)batch's summed loss: the device holds this batch's tokens only."""
        batch = batch.to(self.device)
        logits = model(batch.src_tokens, batch.prev_output_tokens)
        loss, _ = iwslt14.label_smoothed_nll_loss(
            logits, batch.target, self.config.schedule.label_smoothing
        )
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
            longest = int(np.maximum(split.src_sizes, split.tgt_sizes).max(initial=0))
            budget = max(self.eval_tokens(), longest)  # a pair over the budget is a batch alone
            for ids in iwslt14.batches_by_tokens(split, budget, seed=0):
                batch = iwslt14.collate(split, ids)
                batch_loss, batch_nll = self.evaluation_pass(model, batch)
                loss, nll, tokens = (
                    loss + float(batch_loss),
                    nll + float(batch_nll),
                    tokens + batch.ntokens,
                )
            # per target token, in nats like train_loss (fairseq prints base 2: divide by ln 2)
            metrics[f"{name}_loss"] = loss / tokens
            metrics[f"{name}_nll_loss"] = nll / tokens
            metrics[f"{name}_ppl"] = math.exp(metrics[f"{name}_nll_loss"])
            if final:
                metrics.update(self.bleu(model, split, name))
        return metrics

    def eval_tokens(self) -> int:
        """The token budget of an evaluation batch: `schedule.eval_max_tokens`, or when it is auto
        the training microbatch's (the minibatch's without microbatches). A teacher-forced pass
        under no_grad holds a layer's input and output, and the logits, where training at the
        same budget saved every layer's for its backward; the losses are per-token sums, the same
        at any budget within float reassociation."""
        schedule = self.config.schedule
        return schedule.eval_max_tokens or self.microbatch_size or schedule.max_tokens

    def synthetic_evaluation_batch(self, generator: torch.Generator) -> iwslt14.Batch:
        """The synthetic sentence pairs that fill an evaluation batch's token budget."""
        return self._synthetic_pairs(self._evaluation_pairs(), generator)

    def _evaluation_pairs(self) -> int:
        """Synthetic sentence pairs in an evaluation batch's token budget."""
        return max(1, self.eval_tokens() // max(self.lengths))

    def synthetic_evaluation_batches(self) -> int:
        """IWSLT'14's validation pairs (a search split's; the final split has none) in batches
        of `synthetic_evaluation_batch`'s pairs."""
        pairs = IWSLT14_VALID_PAIRS if self.config.data.split == "search" else 0
        return math.ceil(pairs / self._evaluation_pairs())

    def evaluation_pass(self, model: nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """A token batch's summed label-smoothed loss and NLL, teacher forced (the validation
        loss; BLEU's beam search at the end of training is not this pass), the host batch moved
        to the device first."""
        batch = batch.to(self.device)
        logits = model(batch.src_tokens, batch.prev_output_tokens)
        return iwslt14.label_smoothed_nll_loss(
            logits, batch.target, self.config.schedule.label_smoothing
        )

    def bleu(self, model: nn.Module, split: iwslt14.ParallelText, name: str) -> dict[str, float]:
        """`<name>_bleu`, tokenised BLEU as the paper reports it, and `<name>_sacrebleu`,
        detokenised sacreBLEU (see tune_lowmem.tasks.translation.decode)."""
        s = self.config.schedule
        hypotheses = translate(
            model,
            split,
            self.corpus.tgt_dict,
            beam_size=s.beam_size,
            len_penalty=s.length_penalty,
            max_len_a=s.max_decode_len_a,
            max_len_b=s.max_decode_len_b,
            device=self.device,
        )
        refs = references(split, self.corpus.tgt_dict)
        return {
            f"{name}_bleu": bleu(hypotheses, refs),
            f"{name}_sacrebleu": detok_bleu(hypotheses, refs),
        }

    # ---- length of training -------------------------------------------------------------------

    def updates_per_epoch(self) -> int:
        if self.synthetic:
            pairs = self.config.data.train_subset or IWSLT14_TRAIN_PAIRS
            return max(1, pairs // self.sentences_per_batch())
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


def _sentences(
    count: int, length: int, vocab: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` sentences of `length` tokens (random words, then end of sentence), flat with
    their offsets as `iwslt14.ParallelText` keeps them."""
    words = torch.randint(len(iwslt14.SPECIALS), vocab, (count, length), generator=generator)
    words[:, -1] = iwslt14.EOS
    offsets = torch.arange(0, count * length + 1, length)
    return words.flatten().int(), offsets
