"""Tasks whose minibatches are random tensors of the real shapes, so the profiler can build a
`Trainer` and run its real training step without loading any dataset."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..config import ConfigError, TrialConfig
from ..tasks.classification import Cifar10Classification

CIFAR10_IMAGE = (3, 32, 32)
CIFAR10_TRAIN_IMAGES = 50_000


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


SYNTHETIC_TASKS = {"wrn-cifar10": SyntheticCifar10}


def synthetic_task(config: TrialConfig, device: torch.device):
    """The config's task with random data; the profiler answers only for tasks listed here."""
    if config.task not in SYNTHETIC_TASKS:
        raise ConfigError(
            "task",
            f"{config.task!r} is not allowed for profiling yet; "
            f"allowed: {', '.join(SYNTHETIC_TASKS)}",
        )
    return SYNTHETIC_TASKS[config.task](config, device)
