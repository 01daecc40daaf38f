"""WideResNet on CIFAR-10 with the paper's step schedule (SGD, Nesterov 0.9, lr 0.1 x0.2 steps)."""

from __future__ import annotations

import bisect
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

from ..config import StepScheduleConfig, TrialConfig
from ..data import cifar10
from ..models import build_model
from ..techniques import microbatch


def step_learning_rate(schedule: StepScheduleConfig, update: int, total_updates: float) -> float:
    """The lr of 0-based `update` of a run of `total_updates`: cut by gamma from each milestone's
    fraction of the updates on (per update, not per epoch, so short runs cut where they should)."""
    cuts = bisect.bisect_right(schedule.milestone_updates(total_updates), update)
    return schedule.lr * schedule.lr_multiplier * schedule.gamma**cuts


class Cifar10Classification:
    """The `wrn-cifar10` task."""

    def __init__(self, config: TrialConfig, device: torch.device):
        self.config = config
        self.device = device

    @cached_property
    def data(self) -> cifar10.Cifar10:
        return cifar10.Cifar10.from_config(self.config.data, self.config.seed, self.device)

    def build_model(self) -> nn.Module:
        return build_model(self.config)

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        schedule = self.config.schedule
        return torch.optim.SGD(
            model.parameters(),
            lr=self.learning_rate(0, 0),
            momentum=schedule.momentum,
            nesterov=schedule.momentum > 0,
            weight_decay=schedule.weight_decay,
        )

    def learning_rate(self, epoch: int, update: int) -> float:
        return step_learning_rate(self.config.schedule, update, self.total_updates())

    def updates_per_epoch(self) -> int:
        """Full minibatches of the training split (`train_batches` drops the last partial one)."""
        return len(self.data.train) // self.config.schedule.batch_size

    def total_updates(self) -> int:
        return self.config.schedule.epochs * self.updates_per_epoch()

    def train_batches(self, epoch: int):
        return cifar10.train_batches(
            self.data.train, self.config.schedule.batch_size, epoch, self.config.seed, self.config.data.augment
        )

    def microbatches(self, batch):
        if self.config.microbatch.mode != "true":
            return [batch]
        return microbatch.split(batch, self.config.microbatch.size)

    def loss(self, model: nn.Module, microbatch_: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, float]:
        images, labels = microbatch_
        logits = model(images)
        return F.cross_entropy(logits.float(), labels, reduction="sum"), float(labels.shape[0])

    def normaliser(self, batch) -> float:
        return float(batch[1].shape[0])

    @torch.no_grad()
    def evaluate(self, model: nn.Module, final: bool) -> dict[str, float]:
        metrics = {}
        splits = {"val": self.data.val, "test": self.data.test}
        for name, split in splits.items():
            if split is None:
                continue
            correct, loss, total = 0, 0.0, 0
            for images, labels in cifar10.eval_batches(split, self.config.schedule.eval_batch_size):
                logits = model(images).float()
                loss += float(F.cross_entropy(logits, labels, reduction="sum"))
                correct += int((logits.argmax(1) == labels).sum())
                total += int(labels.shape[0])
            metrics[f"{name}_accuracy"] = correct / total
            metrics[f"{name}_loss"] = loss / total
        return metrics

    def epochs(self) -> int:
        return self.config.schedule.epochs

    def finished(self, epoch: int, updates: int) -> bool:
        return epoch >= self.config.schedule.epochs
