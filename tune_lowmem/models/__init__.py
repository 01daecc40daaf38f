"""Model builders, one per task."""

from __future__ import annotations

from torch import nn

from ..config import TrialConfig


def build_model(config: TrialConfig) -> nn.Module:
    """The task's model, in fp32 on the CPU; techniques cast and move it afterwards."""
    if config.task == "wrn-cifar10":
        from .wideresnet import WideResNet

        return WideResNet.from_config(config.model)
    from .dynamicconv import DynamicConvTransformer

    return DynamicConvTransformer.from_config(config.model)
