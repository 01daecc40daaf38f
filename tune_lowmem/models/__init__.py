"""Model builders, one per task."""

from __future__ import annotations

from torch import nn

from ..config import TrialConfig


def build_model(config: TrialConfig, vocab_sizes: tuple[int, int] | None = None) -> nn.Module:
    """The task's model, in fp32 on the CPU; techniques cast and move it afterwards.

    The transformer's embeddings need (source, target) vocabulary sizes from its data.
    """
    if config.task == "wrn-cifar10":
        from .wideresnet import WideResNet

        return WideResNet.from_config(config.model)
    from ..data.iwslt14 import PAD
    from .dynamicconv import DynamicConvTransformer

    if vocab_sizes is None:
        raise ValueError("vocab_sizes: (source, target) vocabulary sizes are required for task dct-iwslt14")
    return DynamicConvTransformer.from_config(config.model, *vocab_sizes, PAD)
