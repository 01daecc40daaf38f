"""`tv-cifar10`: a torchvision network chosen by name, trained on CIFAR-10 under the WideResNet
recipe (`Cifar10Classification`): the proof that the techniques and the profiler work on a model
the project did not write.

Checkpointing uses the generic rule (`models.strategies.GENERIC_STRATEGIES`: the blocks of every
sequential stage), since torchvision's models have no checkpointing of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..models import torchvision_models
from ..models.strategies import GENERIC_STRATEGIES
from ..validation import choice, positive_int
from .classification import Cifar10Classification


@dataclass(frozen=True)
class TorchvisionModelConfig:
    """Which torchvision network, and its output size."""

    arch: str = (
        "resnet18"  # resnet18 | mobilenet_v3_small | vit_tiny (see models.torchvision_models)
    )
    num_classes: int = 10

    def validate(self, prefix: str) -> None:
        choice(self.arch, torchvision_models.ARCHITECTURES, f"{prefix}.arch")
        positive_int(self.num_classes, f"{prefix}.num_classes")


class TorchvisionCifar10(Cifar10Classification):
    """CIFAR-10 with a torchvision classifier; sparsity prunes every convolution and linear
    weight but the first and the last (`Task.sparse_parameter_names`)."""

    MODEL_CONFIG = TorchvisionModelConfig
    CHECKPOINT_STRATEGIES = GENERIC_STRATEGIES

    def build_model(self) -> nn.Module:
        model = self.config.model
        return torchvision_models.build(model.arch, model.num_classes)
