"""CIFAR-10 image classification with the paper's WideResNet recipe: SGD with Nesterov momentum
0.9, weight decay 5e-4, lr 0.1 cut x0.2 at 30/60/80% of training (`StepScheduleConfig`).

`Cifar10Classification` holds everything but the model, so any network that maps 32x32 images to
class scores trains under the same recipe; `WideResNetCifar10` is the paper's task.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..config import TrialConfig
from ..data import cifar10, to_device
from ..models.wideresnet import BasicBlock, WideResNet, WideResNetConfig
from ..outcome import MAXIMIZE, MINIMIZE
from ..techniques.base import EVERY
from ..validation import (
    auto_or_positive_int,
    fraction,
    nonnegative_float,
    positive_float,
    positive_int,
    read_auto,
    require,
)
from .base import Metric, Task

CLASSIFICATION_METRICS = {
    "val_accuracy": Metric(MAXIMIZE, 0.0, 1.0, "top-1 accuracy on the validation split"),
    "val_loss": Metric(MINIMIZE, 0.0, None, "cross entropy per image, validation split"),
    "test_accuracy": Metric(MAXIMIZE, 0.0, 1.0, "top-1 accuracy on the test split"),
    "test_loss": Metric(MINIMIZE, 0.0, None, "cross entropy per image, test split"),
    "train_loss": Metric(MINIMIZE, 0.0, None, "mean training loss of the epoch"),
}


@dataclass(frozen=True)
class StepScheduleConfig:
    """The WRN recipe: SGD with Nesterov momentum, lr cut by `gamma` at fixed fractions of training."""

    epochs: int = 200
    batch_size: int = 100
    lr: float = 0.1
    lr_multiplier: float = 1.0  # scales the whole schedule; the paper searches it
    momentum: float = 0.9
    weight_decay: float = 5e-4
    gamma: float = 0.2
    milestones: tuple[float, ...] = (0.3, 0.6, 0.8)  # epochs 60, 120, 160 of 200
    # images per evaluation batch; None (`auto` in YAML): the training microbatch, whose
    # evaluation holds less than its training step (`Cifar10Classification.eval_batch`)
    eval_batch_size: int | None = None

    def __post_init__(self) -> None:
        read_auto(self, "eval_batch_size")

    def validate(self, prefix: str) -> None:
        positive_int(self.epochs, f"{prefix}.epochs")
        positive_int(self.batch_size, f"{prefix}.batch_size")
        auto_or_positive_int(self.eval_batch_size, f"{prefix}.eval_batch_size")
        positive_float(self.lr, f"{prefix}.lr")
        positive_float(self.lr_multiplier, f"{prefix}.lr_multiplier")
        fraction(self.momentum, f"{prefix}.momentum", open_low=False)
        nonnegative_float(self.weight_decay, f"{prefix}.weight_decay")
        fraction(self.gamma, f"{prefix}.gamma")
        require(
            all(0 < m < 1 for m in self.milestones)
            and list(self.milestones) == sorted(self.milestones),
            f"{prefix}.milestones",
            f"{self.milestones!r} is not allowed; increasing fractions of training in (0, 1) are required",
        )

    def milestone_updates(self, total_updates: float) -> tuple[int, ...]:
        """The updates from which the lr is cut: each milestone's fraction of the run's
        `total_updates` (epochs x updates per epoch, which may be fractional), rounded half up,
        so that a short run cuts where the paper's 200 epochs would (epochs 60/120/160)."""
        return tuple(math.floor(m * total_updates + 0.5) for m in self.milestones)


def step_learning_rate(schedule: StepScheduleConfig, update: int, total_updates: float) -> float:
    """The lr of 0-based `update` of a run of `total_updates`: cut by gamma from each milestone's
    fraction of the updates on (per update, not per epoch, so short runs cut where they should)."""
    cuts = bisect.bisect_right(schedule.milestone_updates(total_updates), update)
    return schedule.lr * schedule.lr_multiplier * schedule.gamma**cuts


class Cifar10Classification(Task):
    """CIFAR-10 under the step schedule; subclasses say which model."""

    SCHEDULE_CONFIG = StepScheduleConfig
    SHAPE_FIELDS = ("batch_size", "eval_batch_size")
    METRICS = CLASSIFICATION_METRICS
    MICROBATCH_MODES = ("true", "simulated")
    OPTIMIZER = torch.optim.SGD
    IMAGE_SHAPE: ClassVar[tuple[int, int, int]] = (3, 32, 32)

    MICROBATCH_OF = "batch_size"

    @classmethod
    def validate_config(cls, config: TrialConfig) -> None:
        classes = config.model.num_classes
        require(
            classes == len(cifar10.CLASSES),
            "model.num_classes",
            f"{classes} is not allowed; CIFAR-10 has {len(cifar10.CLASSES)} classes",
        )

    @cached_property
    def data(self) -> cifar10.Cifar10:
        return cifar10.Cifar10.from_config(self.config.data, self.config.seed)

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
        data = self.config.data
        if self.synthetic:
            images = data.train_subset or cifar10.TRAIN_SIZE - (
                data.val_size if data.split == "search" else 0
            )
        else:
            images = len(self.data.train)
        return max(1, images // self.config.schedule.batch_size)

    def epochs(self) -> int:
        return self.config.schedule.epochs

    def data_batches(self, epoch: int):
        return cifar10.train_batches(
            self.data.train,
            self.config.schedule.batch_size,
            epoch,
            self.config.seed,
            self.config.data.augment,
        )

    def synthetic_batch(self, generator: torch.Generator) -> cifar10.Minibatch:
        """A minibatch of random images, its own split standing for the data set's host copy,
        augmented as the config's data would be."""
        count = self.config.schedule.batch_size
        split = cifar10.Split(*self._synthetic_images(count, generator))
        return cifar10.minibatch(split, torch.arange(count), generator, self.config.data.augment)

    def _synthetic_images(self, count: int, generator: torch.Generator):
        """`count` random uint8 images and labels on the host, as the data pipeline serves them."""
        shape = (count, *self.IMAGE_SHAPE)
        images = torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
        labels = torch.randint(0, self.config.model.num_classes, (count,), generator=generator)
        return images, labels

    def on_device(self, batch: tuple[torch.Tensor, torch.Tensor]):
        """A host (micro)batch of uint8 images as the model's input: moved to the device, then
        normalised there (the device holds this batch's floats, never the whole minibatch's)."""
        images, labels = batch
        return cifar10.normalize(to_device(images, self.device)), to_device(labels, self.device)

    def loss(self, model: nn.Module, microbatch: cifar10.Minibatch):
        """The microbatch's images are gathered and augmented here, as it moves to the device."""
        images, labels = self.on_device((microbatch.images(), microbatch.labels))
        logits = model(images)
        return F.cross_entropy(logits.float(), labels, reduction="sum"), float(labels.shape[0])

    def normaliser(self, batch: cifar10.Minibatch) -> float:
        return float(batch.labels.shape[0])

    def eval_batch(self) -> int:
        """Images per evaluation batch: `schedule.eval_batch_size`, or when it is auto the
        training microbatch. A forward pass under no_grad keeps at most a layer's input and output
        where the training forward at the same batch saved every layer's for its backward, so
        its tensors fit under the training step's; its convolutions' workspace may take it a
        little above, and the run's peak (`memory.predict.run_peak`) counts the larger."""
        schedule = self.config.schedule
        return schedule.eval_batch_size or self.microbatch_size or schedule.batch_size

    def synthetic_evaluation_batch(self, generator: torch.Generator):
        return self._synthetic_images(self.eval_batch(), generator)

    def synthetic_evaluation_batches(self) -> int:
        """The validation split's images (`data.val_size`, held out in a search split; none in
        the final split) in batches of `eval_batch`."""
        data = self.config.data
        images = data.val_size if data.split == "search" else 0
        return math.ceil(images / self.eval_batch())

    def evaluation_pass(self, model: nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The (host) batch's summed cross entropy and count of correct top-1 predictions."""
        images, labels = self.on_device(batch)
        logits = model(images).float()
        loss = F.cross_entropy(logits, labels, reduction="sum")
        return loss, (logits.argmax(1) == labels).sum()

    @torch.no_grad()
    def evaluate(self, model: nn.Module, final: bool) -> dict[str, float]:
        """Per-image sums over the batches: the same metrics at any `eval_batch`, within float
        reassociation (a convolution's kernel may sum another way at another batch)."""
        metrics = {}
        splits = {"val": self.data.val, "test": self.data.test}
        for name, split in splits.items():
            if split is None:
                continue
            correct, loss, total = 0, 0.0, 0
            for images, labels in cifar10.eval_batches(split, self.eval_batch()):
                batch_loss, batch_correct = self.evaluation_pass(model, (images, labels))
                loss += float(batch_loss)
                correct += int(batch_correct)
                total += int(labels.shape[0])
            metrics[f"{name}_accuracy"] = correct / total
            metrics[f"{name}_loss"] = loss / total
        return metrics


class WideResNetCifar10(Cifar10Classification):
    """The paper's `wrn-cifar10`: WideResNet-d-k (28-2 in the paper)."""

    MODEL_CONFIG = WideResNetConfig
    CHECKPOINT_STRATEGIES = WideResNet.CHECKPOINT_STRATEGIES
    EXACT: ClassVar = {"model.fused_norm": EVERY}  # fused BN-ReLU units: the same function
    # the fused units compute in the storage dtype and normalise whole batches: neither autocast
    # nor simulated microbatching's group batch norm reaches them
    AUTOCAST_REACHES: ClassVar = {"model.fused_norm": ("none",)}
    SIMULATED_REACHES: ClassVar = {"model.fused_norm": ("none",)}

    def build_model(self) -> nn.Module:
        return WideResNet.from_config(self.config.model)

    def describe(self) -> str:
        model = self.config.model
        return f"WRN-{model.depth}-{model.width}, batch {self.config.schedule.batch_size}"

    def sparse_parameter_names(self, model: nn.Module) -> list[str]:
        """The 3x3 convolutions of every residual block; the stem, the 1x1 shortcuts and the
        classifier stay dense (Sohoni et al. A.3.1)."""
        return [
            f"{name}.{conv}.weight"
            for name, module in model.named_modules()
            if isinstance(module, BasicBlock)
            for conv in ("conv1", "conv2")
        ]
