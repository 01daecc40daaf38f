"""A user's own task, as a user would write it outside the project: a small MLP classifying
Gaussian blobs it makes itself. Named ``tests.tiny_task:TinyBlobs`` in configs and spaces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from tune_lowmem.tasks.base import Metric, Task
from tune_lowmem.validation import positive_float, positive_int


@dataclass(frozen=True)
class BlobModel:
    """An MLP: `blocks` hidden blocks (at least two) of `hidden` units."""

    features: int = 8
    hidden: int = 16
    classes: int = 3
    blocks: int = 2

    def validate(self, prefix: str) -> None:
        for name in ("features", "hidden", "classes", "blocks"):
            positive_int(getattr(self, name), f"{prefix}.{name}")


@dataclass(frozen=True)
class BlobSchedule:
    """Plain SGD with cosine decay."""

    epochs: int = 2
    batch_size: int = 16
    lr: float = 0.2
    lr_multiplier: float = 1.0

    def validate(self, prefix: str) -> None:
        positive_int(self.epochs, f"{prefix}.epochs")
        positive_int(self.batch_size, f"{prefix}.batch_size")
        positive_float(self.lr, f"{prefix}.lr")
        positive_float(self.lr_multiplier, f"{prefix}.lr_multiplier")


@dataclass(frozen=True)
class BlobData:
    """How many points to draw for training and validation."""

    train: int = 192
    val: int = 96

    def validate(self, prefix: str) -> None:
        positive_int(self.train, f"{prefix}.train")
        positive_int(self.val, f"{prefix}.val")


class TinyBlobs(Task):
    MODEL_CONFIG = BlobModel
    SCHEDULE_CONFIG = BlobSchedule
    DATA_CONFIG = BlobData
    METRICS: ClassVar[dict[str, Metric]] = {
        "val_accuracy": Metric("maximize", 0.0, 1.0, "accuracy on the validation blobs"),
        "train_loss": Metric("minimize", 0.0, None, "mean training loss"),
    }
    CHECKPOINT_STRATEGIES = ("none", "blocks-1")

    @cached_property
    def points(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        generator = torch.Generator().manual_seed(1234)
        model, data = self.config.model, self.config.data
        centres = 3 * torch.randn(model.classes, model.features, generator=generator)
        drawn = {}
        for name, count in (("train", data.train), ("val", data.val)):
            labels = torch.randint(0, model.classes, (count,), generator=generator)
            x = centres[labels] + torch.randn(count, model.features, generator=generator)
            drawn[name] = (x, labels)
        return drawn

    def build_model(self) -> nn.Module:
        m = self.config.model
        blocks = [nn.Sequential(nn.Linear(m.features, m.hidden), nn.ReLU())]
        blocks += [
            nn.Sequential(nn.Linear(m.hidden, m.hidden), nn.ReLU()) for _ in range(1, m.blocks)
        ]
        return nn.Sequential(nn.Sequential(*blocks), nn.Linear(m.hidden, m.classes))

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.learning_rate(0, 0), momentum=0.9)

    def learning_rate(self, epoch: int, update: int) -> float:
        s = self.config.schedule
        total = s.epochs * self.updates_per_epoch()
        return s.lr * s.lr_multiplier * 0.5 * (1 + math.cos(math.pi * update / total))

    def updates_per_epoch(self) -> int:
        return max(1, self.config.data.train // self.config.schedule.batch_size)

    def epochs(self) -> int:
        return self.config.schedule.epochs

    def data_batches(self, epoch: int):
        x, y = self.points["train"]
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
        size = self.config.schedule.batch_size
        for start in range(0, len(y) - size + 1, size):
            idx = order[start : start + size]
            yield x[idx].to(self.device), y[idx].to(self.device)

    def synthetic_batch(self, generator: torch.Generator):
        size, m = self.config.schedule.batch_size, self.config.model
        x = torch.randn(size, m.features, generator=generator)
        return x.to(self.device), torch.randint(0, m.classes, (size,)).to(self.device)

    def loss(self, model: nn.Module, microbatch):
        x, y = microbatch
        return F.cross_entropy(model(x).float(), y, reduction="sum"), float(len(y))

    def normaliser(self, batch) -> float:
        return float(len(batch[1]))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, final: bool) -> dict[str, float]:
        x, y = self.points["val"]
        predicted = model(x.to(self.device)).float().argmax(1).cpu()
        return {"val_accuracy": float((predicted == y).float().mean())}
