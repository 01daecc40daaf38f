"""Tasks whose minibatches are random tensors of the real shapes, so the profiler can build a
`Trainer` and run its real training step without loading any dataset.

The translation task's stand-in needs an assumption about what a minibatch looks like, since
real ones vary: it is one full token budget, `schedule.max_tokens // max(S, T)` sentence pairs
with every source S tokens and every target T tokens long (end of sentence included), no
padding. The default S = T = 30 is a typical IWSLT'14 batch: on the shipped IWSLT'14 text
(`valid.*`, drawn from the training talks) fairseq's 4,000-token batches hold a median of 100
pairs padded to 31 source and 40 target tokens, about 3,100 and 4,000 tokens a side, and
133 x 30 = 3,990 tokens a side is that batch's size. Activation memory follows these padded token
counts (the output layer's n x T x vocabulary logits dominate it) and, more weakly, the lengths
themselves (the dynamic convolution's band matrices and the attention grow with T per token);
the lengths can be changed (`lengths=(S, T)`) to profile long-sentence batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..config import ConfigError, TrialConfig
from ..data import iwslt14
from ..tasks.classification import Cifar10Classification
from ..tasks.translation import Iwslt14Translation

CIFAR10_IMAGE = (3, 32, 32)
CIFAR10_TRAIN_IMAGES = 50_000

# fairseq's IWSLT'14 de-en after examples/translation/prepare-iwslt14.sh and fairseq-preprocess
# (separate dictionaries, specials included, padded to a multiple of 8): "[de] Dictionary: 8848
# types", "[en] Dictionary: 6632 types", train.de "160239 sents". Only the embeddings' sizes
# (and the epoch length) depend on them.
IWSLT14_VOCAB = {"de": 8_848, "en": 6_632}
IWSLT14_TRAIN_PAIRS = 160_239
IWSLT14_LENGTHS = (30, 30)  # source and target tokens of every synthetic sentence pair


class SyntheticCifar10(Cifar10Classification):
    """`wrn-cifar10` with normal-distributed images and uniform labels in place of CIFAR-10: the
    batches the real task yields (float32 images, int64 labels, on the task's device)."""

    def train_batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        batch, classes = self.config.schedule.batch_size, self.config.model.num_classes
        for _ in range(self.updates_per_epoch()):
            images = torch.randn(batch, *CIFAR10_IMAGE, generator=generator)
            labels = torch.randint(0, classes, (batch,), generator=generator)
            yield images.to(self.device), labels.to(self.device)

    def updates_per_epoch(self) -> int:
        data = self.config.data
        images = data.train_subset or CIFAR10_TRAIN_IMAGES - (
            data.val_size if data.split == "search" else 0
        )
        return max(1, images // self.config.schedule.batch_size)


class SyntheticIwslt14(Iwslt14Translation):
    """`dct-iwslt14` on fairseq's IWSLT'14 de-en vocabulary sizes, with minibatches of random
    words: full token budgets of equal-length sentence pairs (see the module docstring), built
    by the real task's `collate`, so padding, end-of-sentence and shifted decoder inputs are as
    in training."""

    def __init__(
        self, config: TrialConfig, device: torch.device, lengths: tuple[int, int] | None = None
    ):
        super().__init__(config, device)
        self.lengths = IWSLT14_LENGTHS if lengths is None else tuple(lengths)
        if len(self.lengths) != 2 or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in self.lengths
        ):
            raise ConfigError(
                "lengths",
                f"{lengths!r} is not allowed; two positive integers (source, target) are required",
            )
        budget = config.schedule.max_tokens
        if max(self.lengths) > budget:
            raise ConfigError(
                "schedule.max_tokens",
                f"{budget} is not allowed; the synthetic sentence pairs of {self.lengths} tokens "
                f"need at least {max(self.lengths)}",
            )

    def vocab_sizes(self) -> tuple[int, int]:
        return IWSLT14_VOCAB["de"], IWSLT14_VOCAB["en"]

    def sentences_per_batch(self) -> int:
        return self.config.schedule.max_tokens // max(self.lengths)

    def train_batches(self, epoch: int) -> Iterator[iwslt14.Batch]:
        generator = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        pairs = self.sentences_per_batch()
        for _ in range(self.updates_per_epoch()):
            sides = [
                _sentences(pairs, n, v, generator) for n, v in zip(self.lengths, self.vocab_sizes())
            ]
            text = iwslt14.ParallelText(*sides[0], *sides[1])
            yield iwslt14.collate(text, range(pairs)).to(self.device)

    def updates_per_epoch(self) -> int:
        pairs = self.config.data.train_subset or IWSLT14_TRAIN_PAIRS
        return max(1, pairs // self.sentences_per_batch())


def _sentences(
    count: int, length: int, vocab: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` sentences of `length` tokens (random words, then end of sentence), flat with
    their offsets as `iwslt14.ParallelText` keeps them."""
    words = torch.randint(len(iwslt14.SPECIALS), vocab, (count, length), generator=generator)
    words[:, -1] = iwslt14.EOS
    offsets = torch.arange(0, count * length + 1, length)
    return words.flatten().int(), offsets


SYNTHETIC_TASKS = {"wrn-cifar10": SyntheticCifar10, "dct-iwslt14": SyntheticIwslt14}


def synthetic_task(
    config: TrialConfig, device: torch.device, lengths: tuple[int, int] | None = None
):
    """The config's task with random data; the profiler answers only for tasks listed here.
    `lengths`: the translation task's (source, target) sentence lengths (default
    IWSLT14_LENGTHS); the other tasks have none."""
    if config.task not in SYNTHETIC_TASKS:
        raise ConfigError(
            "task",
            f"{config.task!r} is not allowed for profiling yet; "
            f"allowed: {', '.join(SYNTHETIC_TASKS)}",
        )
    task = SYNTHETIC_TASKS[config.task]
    if lengths is None:
        return task(config, device)
    if task is not SyntheticIwslt14:
        raise ConfigError("lengths", f"{lengths!r} is not allowed for {config.task}; allowed: none")
    return task(config, device, lengths)


def batch_tensors(batch: Any) -> list[torch.Tensor]:
    """The tensors of a minibatch: a tuple of tensors (WRN) or a dataclass holding them (DCT)."""
    return [part for part in _parts(batch) if torch.is_tensor(part)]


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], batch: Any) -> Any:
    """The minibatch with `fn` applied to each of its tensors (e.g. to make them fake)."""
    parts = [fn(part) if torch.is_tensor(part) else part for part in _parts(batch)]
    if dataclasses.is_dataclass(batch):
        return dataclasses.replace(batch, **dict(zip(_field_names(batch), parts, strict=True)))
    return tuple(parts)


def _field_names(batch: Any) -> list[str]:
    return [field.name for field in dataclasses.fields(batch)]


def _parts(batch: Any) -> list[Any]:
    if dataclasses.is_dataclass(batch):
        return [getattr(batch, name) for name in _field_names(batch)]
    return list(batch)
