"""What differs between the paper's two benchmarks, behind one small interface.

A task knows its data, its model, its loss, its optimizer and schedule, and how to evaluate;
the training loop in `tune_lowmem.train` knows the rest (techniques, stepping, callbacks).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch
from torch import nn

from ..config import TrialConfig


class Task(Protocol):
    """The interface the training loop drives; one implementation per benchmark."""

    config: TrialConfig
    device: torch.device

    def build_model(self) -> nn.Module:
        """The fp32 model on the CPU, before any technique is applied."""

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer: ...

    def learning_rate(self, epoch: int, update: int) -> float:
        """The schedule's learning rate for the next update (lr multiplier included)."""

    def train_batches(self, epoch: int) -> Iterable[Any]:
        """One epoch of minibatches, deterministic for (seed, epoch)."""

    def microbatches(self, batch: Any) -> list[Any]:
        """The minibatch cut into microbatches (one element when microbatching is off)."""

    def loss(self, model: nn.Module, microbatch: Any) -> tuple[torch.Tensor, float]:
        """Summed training loss of a microbatch, and the number of items it sums over."""

    def normaliser(self, batch: Any) -> float:
        """What the minibatch loss is divided by (images, or target tokens), for every microbatch."""

    def evaluate(self, model: nn.Module, final: bool) -> dict[str, float]:
        """Validation (and, when `final`, test) metrics; the model is in eval mode."""

    def epochs(self) -> int:
        """How many epochs the schedule has (for DCT: enough to reach max_updates)."""

    def finished(self, epoch: int, updates: int) -> bool:
        """Whether training is over after `epoch` epochs and `updates` updates."""


def build_task(config: TrialConfig, device: torch.device) -> Task:
    if config.task == "wrn-cifar10":
        from .classification import Cifar10Classification

        return Cifar10Classification(config, device)
    from .translation import Iwslt14Translation

    return Iwslt14Translation(config, device)
